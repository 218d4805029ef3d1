"""The read model the metrics are built from at scrape time: what each validation's controller
knows, shared without locks (one event loop writes, the scrape reads a consistent-enough view).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuval_api.reasons import Reason
from gpuval_api.result import Verdict
from gpuval_operator.state import RunState
from gpuval_operator.views import NodeResult


@dataclass(slots=True)
class Untested:
    """A node whose latest attempt was NotRun, since when, and why (metrics; its alert)."""

    reason: str
    since: float


@dataclass(slots=True)
class FabricNode:
    """A node's latest settled fabric verdict (metrics; the fabric alert)."""

    run: str
    verdict: Verdict
    reason: Reason | None


@dataclass(slots=True)
class ValidationState:
    """What the metrics and the controller share about one GpuValidation."""

    name: str
    run: RunState | None = None
    # The latest tested verdict (Passed or Failed) of each node: the failure metrics and alerts.
    latest: dict[str, NodeResult] = field(default_factory=dict)
    # Nodes whose latest attempt was NotRun, kept apart: never a failure.
    untested: dict[str, Untested] = field(default_factory=dict)
    run_ids: set[str] = field(default_factory=set)
    invalid: bool = False
    uniform: bool | None = None
    outliers: int = 0
    last_run_started: float | None = None
    last_run_completed: float | None = None
    last_success: float | None = None
    # The fabric: each node's latest settled verdict, and the groups' busbw (GB/s) of the latest
    # run that has settled ones.
    fabric_nodes: dict[str, FabricNode] = field(default_factory=dict)
    fabric_run: str = ""
    fabric_groups: dict[str, float] = field(default_factory=dict)


class Registry(dict[str, ValidationState]):
    """Validation name -> state; read by the metrics collector at scrape time."""

    # This replica holds the leader Lease (a standby exports no validation series).
    leading: bool = False
