"""The registry of every GpuValidation's read model in this operator: what the metrics collector
reads at scrape time."""

from __future__ import annotations

from gpuval_operator.nodes.breaker.operatorwide import OutOfServiceCounts
from gpuval_operator.readmodel.validation import ValidationState


class Registry(dict[str, ValidationState]):
    """Validation name -> state; read by the metrics collector at scrape time."""

    # This replica holds the leader Lease (a standby exports no validation series).
    leading: bool = False

    def __init__(self) -> None:
        super().__init__()
        self.out_of_service = OutOfServiceCounts()
