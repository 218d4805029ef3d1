"""Pure: the run-wide comparison of the fabric groups, once every group has its results.

Each agent judged its group on the group's own evidence; the operator sees every group of the
run. It takes the run's median pair busbw for the pairs' floor (`thresholds.floor`), and the
median busbw of the groups of each size for the groups' floor, and settles each node's fabric
verdict:

- a group that did not form (FabricGangNotFormed) is NotRun on every node, whatever an agent
  stopped with it wrote; a node whose group did not meet is NotRun, as recorded; a group of
  three or more where every other rank could not reach rank 0 names rank 0 (FabricUnreachable)
  and not the others (NotRun); in a group of two the two sides cannot be told apart, and
  neither is named (NotRun);
- what an agent or the operator found against a node other than slowness (transport fallback,
  a hang, a crash, a pod that failed) stands;
- slowness is judged again against the run-wide floor with the same pair method the agents use
  (`gpuval_api.fabric.blame`): the nodes it names fail (FabricSlowNode, FabricSlowLink); one an
  agent named against its group alone and the run does not is Passed. A group in which no pair
  reached the floor names no one;
- a group below its floor that names no node is a slow group: listed in the validation status,
  no node blamed.

Nothing here calls the API (tests/unit/test_operator_fabric_verdicts.py).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpuval_api.fabric import FabricKey, FabricPair, FabricThresholds, blame, median_pair
from gpuval_api.reasons import Reason
from gpuval_api.result import Verdict


@dataclass(frozen=True, slots=True)
class FabricResult:
    """One member's result in one group: the agent's own, or what the operator recorded."""

    verdict: Verdict
    reason: Reason | None
    message: str
    by_agent: bool = False


def result_of(status: Mapping[str, object], *, by_agent: bool = False) -> FabricResult:
    """The result a status.fabric the operator writes stands for (`by_agent`: taken from the
    agent's termination message)."""
    reason = status.get(FabricKey.REASON)
    return FabricResult(
        Verdict(str(status.get(FabricKey.VERDICT))),
        Reason(str(reason)) if reason else None,
        str(status.get(FabricKey.MESSAGE) or ""),
        by_agent,
    )


# What the run-wide comparison decides again; anything else an agent found stands.
SLOWNESS = frozenset({Reason.FABRIC_SLOW_NODE, Reason.FABRIC_SLOW_LINK, Reason.NCCL_LOW_BUSBW})
_WORST = {Verdict.FAILED: 2, Verdict.NOT_RUN: 1, Verdict.PASSED: 0}


@dataclass(frozen=True, slots=True)
class GroupEvidence:
    name: str
    nodes: tuple[str, ...]
    records: tuple[FabricResult, ...]  # by rank
    busbw: float | None = None
    pairs: tuple[FabricPair, ...] = ()
    domain: str | None = None


@dataclass(frozen=True, slots=True)
class Final:
    """A node's settled fabric verdict in one group (or over its groups)."""

    verdict: Verdict
    reason: Reason | None
    message: str


@dataclass(frozen=True, slots=True)
class GroupOutcome:
    name: str
    domain: str | None
    nodes: tuple[str, ...]
    busbw: float | None
    floor: float | None
    slow: bool  # below its floor with no node named
    finals: tuple[Final, ...]  # by rank

    @property
    def worst(self) -> Final:
        return max(self.finals, key=lambda f: _WORST[f.verdict])


@dataclass(frozen=True, slots=True)
class Classification:
    median_pair: float | None
    pair_floor: float
    groups: tuple[GroupOutcome, ...]
    nodes: dict[str, Final]  # each node over its groups: the worst


def _unreachable(record: FabricResult) -> bool:
    return record.verdict is Verdict.FAILED and record.reason is Reason.FABRIC_UNREACHABLE


def rank0_unreachable(group: GroupEvidence) -> list[Final] | None:
    """Every other rank could not reach rank 0: rank 0 is named, the others are not."""
    others, rank0 = group.records[1:], group.records[0]
    if not others or not all(_unreachable(r) for r in others):
        return None
    if rank0.verdict is Verdict.PASSED:
        return None
    node0 = group.nodes[0]
    if len(group.nodes) == 2:
        text = (
            f"{group.nodes[1]} could not reach {node0}'s rendezvous in group {group.name}; in a "
            f"group of two the two sides cannot be told apart, so neither is named: "
            f"{others[0].message}"
        )
        return [Final(Verdict.NOT_RUN, Reason.FABRIC_UNREACHABLE, text)] * 2
    names = ", ".join(group.nodes[1:])
    blamed = Final(
        Verdict.FAILED,
        Reason.FABRIC_UNREACHABLE,
        f"every other rank of group {group.name} ({names}) could not reach this node's "
        f"rendezvous (rank 0): {others[0].message}",
    )
    spared = Final(
        Verdict.NOT_RUN,
        Reason.FABRIC_UNREACHABLE,
        f"could not reach rank 0 ({node0}) of group {group.name}, which no rank reached: "
        f"{node0} is named, not this node",
    )
    return [blamed] + [spared] * len(others)


def _settle(
    group: GroupEvidence, rank: int, record: FabricResult, blamed: dict[str, Final], floor: float
) -> Final:
    node = group.nodes[rank]
    if record.verdict is Verdict.NOT_RUN:
        return Final(record.verdict, record.reason, record.message)
    if record.verdict is Verdict.FAILED and record.reason not in SLOWNESS:
        return Final(record.verdict, record.reason, record.message)
    if node in blamed:
        return blamed[node]
    if record.verdict is Verdict.FAILED:
        return Final(
            Verdict.PASSED,
            None,
            f"against the run's pair floor {floor:.1f} GB/s no node of group {group.name} stands "
            f"out (its agent said: {record.reason}: {record.message})",
        )
    return Final(Verdict.PASSED, None, record.message)


def _group_floors(
    groups: Sequence[GroupEvidence], thresholds: FabricThresholds
) -> dict[int, float]:
    by_size: dict[int, list[float]] = {}
    for group in groups:
        if group.busbw is not None:
            by_size.setdefault(len(group.nodes), []).append(group.busbw)
    return {size: thresholds.floor(statistics.median(v)) for size, v in by_size.items()}


def not_formed(group: GroupEvidence) -> list[Final] | None:
    """The group did not form (the operator gave it up): nothing was measured, whatever an agent
    wrote as its pod was stopped (a rank that lost rank 0, say). Each keeps the operator's words
    where it has them."""
    gave_up = [
        r for r in group.records if r.reason is Reason.FABRIC_GANG_NOT_FORMED and not r.by_agent
    ]
    if not gave_up:
        return None
    return [
        Final(Verdict.NOT_RUN, Reason.FABRIC_GANG_NOT_FORMED, r.message)
        if r.reason is Reason.FABRIC_GANG_NOT_FORMED
        else Final(Verdict.NOT_RUN, Reason.FABRIC_GANG_NOT_FORMED, gave_up[0].message)
        for r in group.records
    ]


def classify_group(
    group: GroupEvidence, pair_floor: float, group_floor: float | None
) -> GroupOutcome:
    finals = not_formed(group) or rank0_unreachable(group)
    if finals is None:
        named: dict[str, Final] = {}
        # Blame needs a reference: a group in which no pair reached the floor is slow as a
        # whole and names no one.
        rounds = [p for p in group.pairs if p.round >= 1]
        if any(p.busbw_gbps is not None and p.busbw_gbps >= pair_floor for p in rounds):
            for found in blame(group.pairs, pair_floor):
                named[found.node] = Final(Verdict.FAILED, found.reason, found.message)
        finals = [
            _settle(group, rank, record, named, pair_floor)
            for rank, record in enumerate(group.records)
        ]
    low = group.busbw is not None and group_floor is not None and group.busbw < group_floor
    slow = low and not any(f.reason in SLOWNESS for f in finals)
    return GroupOutcome(
        group.name, group.domain, group.nodes, group.busbw, group_floor, slow, tuple(finals)
    )


def classify(groups: Sequence[GroupEvidence], thresholds: FabricThresholds) -> Classification:
    median = median_pair(p for g in groups for p in g.pairs if p.round >= 1)
    pair_floor = thresholds.floor(median)
    floors = _group_floors(groups, thresholds)
    outcomes = tuple(classify_group(g, pair_floor, floors.get(len(g.nodes))) for g in groups)
    nodes: dict[str, Final] = {}
    for outcome in outcomes:
        for node, final in zip(outcome.nodes, outcome.finals, strict=True):
            known = nodes.get(node)
            if known is None or _WORST[final.verdict] > _WORST[known.verdict]:
                nodes[node] = final
    return Classification(median, pair_floor, outcomes, nodes)
