"""Healthy capacity, the pure computation (docs/operator/capacity.md): each selected node's
state and its GPUs' (gpuval_api.capacity gives the states and their precedence), and the counts
the status and /metrics show. Nothing here reads a clock or calls the API: the controller passes
the time and the node watch's facts in (tests/unit/operator/test_operator_capacity.py)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from gpuval_api import Verdict
from gpuval_api.capacity import NODE_STATES, CapacityState
from gpuval_api.remediation import ACTIVE_STATES, RepairState
from gpuval_operator.proofage import NodeProof, within


@dataclass(frozen=True, slots=True)
class NodeCapacity:
    """What the states need of one selected node."""

    name: str
    gpus: int
    tested: str | None  # this validation's latest tested verdict (Passed, Failed); None: none
    repair: str | None = None  # its RepairRecord's state (spec.remediation); None: none
    needs_repair_label: bool = False  # it carries gpuval.dev/needs-repair
    proven_at: float | None = None  # its gpuval.dev/proven-at (epoch seconds)
    # GPUs its latest failed report names (0: none named, the whole node counts failed).
    failed_gpus: int = 0


@dataclass(frozen=True, slots=True)
class CapacitySummary:
    """The selected GPUs and nodes by state (every state present, 0 when none)."""

    gpus: dict[CapacityState, int] = field(default_factory=dict)
    nodes: dict[CapacityState, int] = field(default_factory=dict)

    @property
    def total_gpus(self) -> int:
        return sum(self.gpus.values())

    @property
    def total_nodes(self) -> int:
        return sum(self.nodes.values())

    @property
    def healthy_ratio(self) -> float:
        """Healthy GPUs over the selected GPUs (1 when none is selected: nothing is missing)."""
        total = self.total_gpus
        return self.gpus.get(CapacityState.HEALTHY, 0) / total if total else 1.0


def node_state(node: NodeCapacity, max_age: float | None, now: float) -> CapacityState:
    """The node's one state, by the precedence of gpuval_api.capacity."""
    if node.repair == RepairState.NEEDS_REPAIR or node.needs_repair_label:
        return CapacityState.NEEDS_PERSON
    if node.repair in ACTIVE_STATES:
        return CapacityState.REPAIR
    if node.tested == Verdict.FAILED:
        return CapacityState.FAILED
    if node.tested != Verdict.PASSED:
        return CapacityState.UNTESTED
    proof = NodeProof(node.name, node.gpus, node.proven_at)
    if max_age is not None and not within(proof, max_age, now):
        return CapacityState.STALE
    return CapacityState.HEALTHY


def gpu_states(node: NodeCapacity, state: CapacityState) -> dict[CapacityState, int]:
    """The node's GPUs by state: all in the node's, but a failed node's: the GPUs its report
    names `failed`, its others `withheld` (out of service with their node)."""
    if state is not CapacityState.FAILED or not 0 < node.failed_gpus < node.gpus:
        return {state: node.gpus}
    return {
        CapacityState.FAILED: node.failed_gpus,
        CapacityState.WITHHELD: node.gpus - node.failed_gpus,
    }


def summarize(nodes: Iterable[NodeCapacity], max_age: float | None, now: float) -> CapacitySummary:
    gpus: Counter[CapacityState] = Counter()
    counted: Counter[CapacityState] = Counter()
    for node in nodes:
        state = node_state(node, max_age, now)
        counted[state] += 1
        gpus.update(gpu_states(node, state))
    return CapacitySummary(
        gpus={s: gpus[s] for s in CapacityState},
        nodes={s: counted[s] for s in NODE_STATES},
    )
