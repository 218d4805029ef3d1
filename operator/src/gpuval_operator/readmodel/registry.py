"""The registry of every GpuValidation's read model in this operator: what the metrics collector
reads at scrape time."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuval_operator.readmodel.validation import ValidationState


@dataclass(slots=True)
class OutOfService:
    """The nodes gpuval holds out of service as the operator last counted them from the nodes
    (gpuval_operator.nodes.ledger): in all, by validation key, and the operator-wide limit."""

    limit: int = 0
    total: int = 0
    by_validation: dict[str, int] = field(default_factory=dict)


class Registry(dict[str, ValidationState]):
    """Validation name -> state; read by the metrics collector at scrape time."""

    # This replica holds the leader Lease (a standby exports no validation series).
    leading: bool = False

    def __init__(self) -> None:
        super().__init__()
        self.out_of_service = OutOfService()
