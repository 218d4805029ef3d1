"""Pure: the circuit breaker on node actions and the systemic hold. Nothing here calls the API.

Which failing node's taint and cordon may be applied now, and which are held and why:
- a node already out of service through this validation keeps its actions (holding never undoes
  one), and a node that never entered service (it carries a startup taint) is not taken out of it;
- a reason shared by more than `systemicFraction` of the run's tested nodes, and by at least
  `systemicMinNodes`, is systemic: the spec or the stack, not the nodes (Systemic); while the
  nodes still to be tested could make it so, the failure waits (AwaitingRun);
- a validation holds at most `nodeActions.maxNodes` nodes out of service (MaxNodesReached), gpuval
  as a whole at most the operator-wide limit (OperatorMaxNodesReached).

The counts come from the nodes, never from memory: the nodes carrying gpuval.dev/out-of-service
(`OutOfServiceNode.parse`, listed by gpuval_operator.nodes.breaker.operatorwide) and each
validation's entry on them, plus the nodes reserved for a patch still in flight, so two replicas, a
restart and concurrent patches all count the same. A release (gpuval.dev/release) approves what was
out of service before it: those nodes no longer count against the validation's own limit.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuval_api import ConditionReason as R
from gpuval_api import keys
from gpuval_operator.nodes.entries import entries
from gpuval_operator.run.breakerstate import SystemicFailure


@dataclass(frozen=True, slots=True)
class OutOfServiceNode:
    """A node gpuval holds out of service, and the validations whose entries hold it there
    (validation key -> since when, Unix seconds)."""

    name: str
    by: Mapping[str, int]

    @classmethod
    def parse(cls, node: Mapping[str, Any]) -> OutOfServiceNode | None:
        meta = node.get("metadata") or {}
        if keys.NODE_LABEL_OUT_OF_SERVICE not in (meta.get("labels") or {}):
            return None
        found = entries(meta.get("annotations") or {})
        # A node in repair counts through its validation even when it never entered service.
        by = {v: e.since or e.at for v, e in found.items() if e.in_force or e.repairing}
        return cls(str(meta.get("name", "")), by)


@dataclass(frozen=True, slots=True)
class Limits:
    validation: int  # nodeActions.maxNodes as a count
    operator: int  # the operator-wide limit


@dataclass(slots=True)
class Tally:
    """What gpuval holds out of service: the listed nodes, and the reservations of patches in
    flight (node -> the validations that reserved it)."""

    nodes: dict[str, OutOfServiceNode] = field(default_factory=dict)
    reserved: dict[str, set[str]] = field(default_factory=dict)

    def operator_count(self) -> int:
        return len(self.nodes.keys() | self.reserved.keys())

    def counts_for(self, node: str, validation: str, approved_at: float) -> bool:
        """The node counts against `validation`'s own limit: held out of service through it since
        its last release, or reserved by it. Both are stamped to the second, so a node taken out
        in the release's own second counts: a pass right after a release fills the limit once
        (were it approved, each pass of the same second would take the limit again)."""
        listed = self.nodes.get(node)
        since = listed.by.get(validation) if listed is not None else None
        return (since is not None and since >= approved_at) or validation in self.reserved.get(
            node, ()
        )

    def validation_count(self, validation: str, approved_at: float) -> int:
        names = self.nodes.keys() | self.reserved.keys()
        return sum(1 for n in names if self.counts_for(n, validation, approved_at))

    def out(self, node: str) -> bool:
        return node in self.nodes or node in self.reserved

    def by_validation(self) -> Counter[str]:
        """Nodes out of service through each validation (approved ones included)."""
        counts: Counter[str] = Counter()
        for name in self.nodes.keys() | self.reserved.keys():
            listed = self.nodes.get(name)
            counts.update(set(listed.by if listed else ()) | self.reserved.get(name, set()))
        return counts


def admit(
    tally: Tally, node: str, validation: str, approved_at: float, limits: Limits
) -> str | None:
    """None: `validation` may take `node` out of service now (the caller reserves it first); else
    the cause its taint and cordon are held for."""
    mine = tally.counts_for(node, validation, approved_at)
    if not mine and tally.validation_count(validation, approved_at) >= limits.validation:
        return R.MAX_NODES_REACHED
    if not tally.out(node) and tally.operator_count() >= limits.operator:
        return R.OPERATOR_MAX_NODES_REACHED
    return None


def never_in_service(node: Mapping[str, Any], startup_keys: Collection[str]) -> bool:
    """The node still carries a startup taint (spec.gating.startupTaint): it never entered
    service, so a taint or cordon takes nothing out of it."""
    taints = (node.get("spec") or {}).get("taints") or []
    return any(t.get("key") in startup_keys for t in taints)


def systemic(
    reasons: Iterable[str], tested: int, fraction: float, min_nodes: int
) -> list[SystemicFailure]:
    """The reasons of the run's failed nodes (`reasons`, one per node) shared by more than
    `fraction` of its `tested` nodes (Passed or Failed) and by at least `min_nodes`, most
    common first."""
    found = [
        SystemicFailure(reason, n, tested)
        for reason, n in Counter(reasons).items()
        if n >= min_nodes and n > fraction * tested
    ]
    return sorted(found, key=lambda s: (-s.failed, s.reason))


def undecided(
    reasons: Iterable[str], tested: int, untested: int, fraction: float, min_nodes: int
) -> set[str]:
    """The reasons of the run's failed nodes (`reasons`, one per node) that are not systemic yet
    but could still be: were every one of the `untested` nodes left without a verdict to fail
    the same way, the reason would be. Until the run can tell, a failure's taint and cordon wait
    (its label and condition do not)."""
    counts = Counter(reasons)
    found = set()
    for reason, n in counts.items():
        systemic_now = n >= min_nodes and n > fraction * tested
        best = n + untested
        if not systemic_now and best >= min_nodes and best > fraction * (tested + untested):
            found.add(reason)
    return found


def to_retry(
    held: Mapping[str, str],
    reasons: Mapping[str, str],
    systemic_reasons: Collection[str],
    free: Limits,
    out: Collection[str] = (),
) -> tuple[list[str], dict[str, str]]:
    """Held nodes worth another admission now, in name order, and the causes of the others as
    they stand. A limit's hold is tried again while slots are `free` (the admission decides; each
    try costs a read of the node): every node takes one of the validation's, and one of the
    operator's unless it is `out` of service already (through another validation), which takes
    none. So a node another validation holds out does not use up the operator's slot for the
    node after it. A systemic hold whose reason is no longer systemic (or was released) is tried
    the same way. The others are held by the limit that stops them now."""
    retry: list[str] = []
    causes: dict[str, str] = {}
    left_validation, left_operator = free.validation, free.operator
    for node in sorted(held):
        cause = held[node]
        if cause == R.SYSTEMIC and reasons.get(node) in systemic_reasons:
            causes[node] = cause
            continue
        operator_slot = node not in out
        if left_validation > 0 and (left_operator > 0 or not operator_slot):
            retry.append(node)
            left_validation -= 1
            left_operator -= operator_slot
        elif left_validation <= 0:
            causes[node] = R.MAX_NODES_REACHED
        else:
            causes[node] = R.OPERATOR_MAX_NODES_REACHED
    return retry, causes
