"""Pure: what a run remembers of its breaker (its held node actions), and the two conditions that
say so.

A failing node's taint and cordon are held when the validation already holds `nodeActions.maxNodes`
nodes out of service (MaxNodesReached), when gpuval as a whole holds its operator-wide limit
(OperatorMaxNodesReached), or when its failure's reason is systemic: shared by most of the run's
tested nodes, so the spec or the fleet's stack is the likely cause (Systemic). The decisions are
gpuval_operator.nodes.breaker.rules's; this module keeps their outcome for the status and the
metrics.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from gpuval_api import ConditionReason as R
from gpuval_api import ConditionType
from gpuval_operator.timestamps import rfc3339

# A held node's cause, most telling first (the condition's reason is the first one present).
HOLD_CAUSES = (R.SYSTEMIC, R.MAX_NODES_REACHED, R.OPERATOR_MAX_NODES_REACHED)


@dataclass(frozen=True, slots=True)
class SystemicFailure:
    """A reason shared by more than the systemic fraction of the run's tested nodes."""

    reason: str
    failed: int
    tested: int

    def message(self, so_far: bool = False) -> str:
        share = self.failed / self.tested if self.tested else 0.0
        tested = "nodes tested so far" if so_far else "tested nodes"
        return f"{self.failed} of {self.tested} {tested} ({share:.0%}) failed with {self.reason}"


@dataclass(slots=True)
class BreakerState:
    """One run's held node actions (node -> cause), its systemic reasons, and the counts the
    last decision saw (for the condition's message)."""

    held: dict[str, str] = field(default_factory=dict)
    systemic: list[SystemicFailure] = field(default_factory=list)
    # Reasons the nodes still to be tested could make systemic, and the failed nodes whose taint
    # and cordon wait for that (AwaitingRun): not held, not yet acted on.
    undecided: set[str] = field(default_factory=set)
    waiting: set[str] = field(default_factory=set)
    # nodeActions.maxNodes as a count, and the nodes out of service through this validation.
    limit: int = 0
    out_of_service: int = 0
    # The operator-wide limit and the nodes gpuval holds out of service in all.
    operator_limit: int = 0
    operator_out_of_service: int = 0
    # A person's release (gpuval.dev/release) applies to this run: its systemic hold is lifted.
    released: bool = False
    # ... and it asks for the repairs of the systemic failure too (`release --repair`).
    release_repairs: bool = False
    # The validation has spec.remediation (what the release says of repairs).
    repairs: bool = False
    # Nodes out of service through this validation since before this time (Unix seconds) were
    # approved by a release and no longer count against maxNodes.
    approved_at: float = 0.0
    # Hold causes and systemic reasons whose Event this run has posted; the release last handled.
    posted: set[str] = field(default_factory=set)
    release_seen: str = ""
    # After a restart: the held nodes were read back from the nodes' entries.
    restored: bool = False
    # Of out_of_service: those that count against maxNodes (out since the last release), and
    # those that need repair by a person (spec.remediation NeedsRepair).
    counted: int = 0
    needs_repair: int = 0

    def systemic_reasons(self) -> set[str]:
        """The reasons held as systemic (none once a person released the run)."""
        return set() if self.released else {s.reason for s in self.systemic}

    def no_repair_reasons(self) -> set[str]:
        """The reasons spec.remediation asks no repair for: the systemic ones (released or not:
        the taint and cordon a release lets through do not make the cause the nodes') and those
        still undecided; none when a person's release asked for the repairs too."""
        if self.released and self.release_repairs:
            return set()
        return {s.reason for s in self.systemic} | self.undecided

    def out_of_service_text(self) -> str:
        """How many nodes are out of service through this validation and why, against the limit:
        those out since the last release count against maxNodes, the rest were released."""
        text = (
            f"out of service through this validation {self.counted} "
            f"(nodeActions.maxNodes {self.limit})"
        )
        released = self.out_of_service - self.counted
        if released > 0:
            text += f", {released} more released by a person (not counted)"
        if self.needs_repair:
            verb = "needs" if self.needs_repair == 1 else "need"
            text += f"; {self.needs_repair} of them {verb} repair by a person (NeedsRepair)"
        return text

    def causes(self) -> Counter[str]:
        return Counter(self.held.values())


def as_of(now: float, untested: int, total: int, condition: str) -> str:
    """What an Event's figures are: those of its time. An Event is posted once and never
    updated, while the condition it echoes follows the run (a systemic share of 3 of 5 tested
    nodes may end as 6 of 10)."""
    if untested:
        return (
            f" (at {rfc3339(now)}, {untested} of {total} nodes still to test: figures so far; "
            f"the {condition} condition keeps them current)"
        )
    return f" (at {rfc3339(now)})"


def systemic_event(
    found: SystemicFailure, run_id: str, now: float, untested: int, total: int
) -> str:
    """The SystemicFailure Event's message, with the time and share it was found at."""
    return (
        f"{found.message(so_far=untested > 0)} in run {run_id}: the spec or the fleet's stack is "
        "the likely cause, not the nodes"
        + as_of(now, untested, total, ConditionType.SYSTEMIC_FAILURE)
    )


def _count_text(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{reason} {n}" for reason, n in sorted(counts.items(), key=lambda i: -i[1]))


def held_condition(
    state: BreakerState, failures: Mapping[str, int], validation: str
) -> tuple[str, str, str, str]:
    """NodeActionsHeld (type, status, reason, message): True naming how many failed nodes' taint
    and cordon are held, for what, and the failures' reasons; False when none is."""
    causes = state.causes()
    if not causes:
        waiting = (
            f"; {len(state.waiting)} failed nodes wait for the rest of the run to tell whether "
            "their reason is systemic before their taint and cordon"
            if state.waiting
            else ""
        )
        return (
            ConditionType.NODE_ACTIONS_HELD,
            "False",
            R.NOT_HELD,
            f"no node action held ({state.out_of_service_text()}){waiting}",
        )
    reason = next(c for c in HOLD_CAUSES if causes.get(c))
    parts = []
    for cause in HOLD_CAUSES:
        if causes.get(cause):
            parts.append(f"{causes[cause]} for {cause}")
    failed = sum(failures.values())
    message = (
        f"{len(state.held)} of {failed} failed nodes keep their label but not their taint and "
        f"cordon ({'; '.join(parts)}); failures: {_count_text(failures)}; "
        f"{state.out_of_service_text()}, through "
        f"gpuval {state.operator_out_of_service} (operator limit {state.operator_limit}); "
        f"`kubectl gpuval release {validation}` acts on them up to the limits again"
    )
    return ConditionType.NODE_ACTIONS_HELD, "True", reason, message


def systemic_condition(state: BreakerState) -> tuple[str, str, str, str]:
    """SystemicFailure (type, status, reason, message)."""
    if not state.systemic:
        return (
            ConditionType.SYSTEMIC_FAILURE,
            "False",
            R.NOT_SYSTEMIC,
            "no failure reason is shared by most of the run's tested nodes",
        )
    found = "; ".join(s.message() for s in state.systemic)
    if state.released and state.repairs and state.release_repairs:
        held = "released by a person, repairs asked too"
    elif state.released and state.repairs:
        held = "released by a person: their taint and cordon apply, no repair is asked for them"
    elif state.released:
        held = "released by a person"
    else:
        held = "their taint and cordon are held"
    message = (
        f"{found}: the spec (a threshold) or the fleet's stack (driver, firmware, settings) is "
        f"the likely cause, not the nodes; {held}"
    )
    return ConditionType.SYSTEMIC_FAILURE, "True", R.SAME_REASON_ON_MANY_NODES, message
