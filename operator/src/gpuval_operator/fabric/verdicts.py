"""Pure: the run-wide comparison of the fabric groups, once every group has its results.

Each agent judged its group on the group's own evidence; the operator sees every group of the
run. It takes the run's reference pair busbw (`gpuval_api.fabric.isolation.reference_busbw`: the
median over nodes of each node's best pair) for the pairs' floor (`thresholds.floor`), and the
median busbw of the groups of each size for the groups' floor; with a topology key the domain groups
and the cross-domain groups are each compared with their own kind only (a path between domains
may be slower than one inside a rack by design). It settles each node's fabric verdict:

- a group that did not form (FabricGangNotFormed) is NotRun on every node, whatever an agent
  stopped with it wrote; a node whose group did not meet is NotRun, as recorded; a group of
  three or more where every other rank could not reach rank 0 names rank 0 (FabricUnreachable)
  and not the others (NotRun); in a group of two the two sides cannot be told apart, and
  neither is named (NotRun);
- what an agent or the operator found against a node other than slowness (transport fallback,
  a hang, a crash, a pod that failed) stands;
- slowness is judged again against the run-wide floor with the same pair method the agents use
  (`gpuval_api.fabric.isolation.blame`): the nodes it names fail (FabricSlowNode,
  FabricSlowLink); one an agent named against its group alone and the run does not is Passed. A
  group of three or more in which no pair reached the floor names no one; the slow pair of a group
  of two is the link or either node (FabricSlowPair: NotRun on both, and it says so);
- in a cross-domain group what the pairs name is a path between domains (fabric.paths): listed,
  no representative blamed;
- a group below its floor that names no node and no path is a slow group: listed in the
  validation status, no node blamed;
- with spec.fabric.train, the training phase is compared the same way (fabric.trainverdicts):
  what its pairs name against the run's training floor fails a node the all-reduce did not
  name; slow training groups and groups whose losses differ are listed, no node blamed.

Nothing here calls the API (tests/unit/operator/test_operator_fabric_verdicts.py).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpuval_api import Reason, Verdict, verdict_of
from gpuval_api.fabric import FabricKey, FabricPair, FabricThresholds
from gpuval_api.fabric.isolation import Blame, blame, reference_busbw, round_pairs
from gpuval_api.fabric.train import FabricTrain
from gpuval_operator.fabric.facts import MESSAGE_LIMIT, FabricFacts, FabricTrainFacts
from gpuval_operator.fabric.paths import PathFinding, cross_findings
from gpuval_operator.fabric.trainverdicts import (
    TrainClassification,
    TrainGroup,
    classify_train,
    judge_train,
    train_reference,
)


@dataclass(frozen=True, slots=True)
class MemberResult:
    """One member's result in one group: the agent's own, or what the operator recorded."""

    verdict: Verdict
    reason: Reason | None
    message: str
    by_agent: bool = False


def result_of(status: Mapping[str, object], *, by_agent: bool = False) -> MemberResult:
    """The result a status.fabric the operator writes stands for (`by_agent`: taken from the
    agent's termination message)."""
    reason = status.get(FabricKey.REASON)
    return MemberResult(
        Verdict(str(status.get(FabricKey.VERDICT))),
        Reason(str(reason)) if reason else None,
        str(status.get(FabricKey.MESSAGE) or ""),
        by_agent,
    )


# What the run-wide comparison decides again; anything else an agent found stands.
SLOWNESS = frozenset(
    {
        Reason.FABRIC_SLOW_NODE,
        Reason.FABRIC_SLOW_LINK,
        Reason.FABRIC_SLOW_PAIR,
        Reason.NCCL_LOW_BUSBW,
        Reason.FABRIC_TRAIN_SLOW_NODE,
    }
)
_WORST = {Verdict.FAILED: 2, Verdict.NOT_RUN: 1, Verdict.PASSED: 0}


@dataclass(frozen=True, slots=True)
class GroupEvidence:
    name: str
    nodes: tuple[str, ...]
    results: tuple[MemberResult, ...]  # by rank
    busbw: float | None = None
    pairs: tuple[FabricPair, ...] = ()
    domain: str | None = None
    cross: bool = False
    # A cross-domain group's: each representative's domain, and those alone in their domain.
    domains: Mapping[str, str] | None = None
    lone: frozenset[str] = frozenset()
    train: FabricTrainFacts | None = None  # its training phase (spec.fabric.train)

    def training(self) -> TrainGroup | None:
        if self.train is None:
            return None
        return TrainGroup(self.name, self.nodes, self.train, self.domain, self.cross)


@dataclass(frozen=True, slots=True)
class Final:
    """A node's settled fabric verdict in one group (or over its groups); `noted`: its message
    tells of a path found through it (a representative), which wins over a plain pass."""

    verdict: Verdict
    reason: Reason | None
    message: str
    noted: bool = False


@dataclass(frozen=True, slots=True)
class GroupOutcome:
    name: str
    domain: str | None
    nodes: tuple[str, ...]
    busbw: float | None
    floor: float | None
    slow: bool  # below its floor with no node named
    finals: tuple[Final, ...]  # by rank
    paths: tuple[PathFinding, ...] = ()

    @property
    def worst(self) -> Final:
        return max(self.finals, key=lambda f: _WORST[f.verdict])


@dataclass(frozen=True, slots=True)
class Classification:
    median_pair: float | None  # the reference of the domain groups' pairs (every group's without)
    pair_floor: float
    groups: tuple[GroupOutcome, ...]
    nodes: dict[str, Final]  # each node over its groups: the worst
    cross_median_pair: float | None = None  # the cross-domain groups' reference
    train: TrainClassification | None = None  # spec.fabric.train's comparison

    @property
    def paths(self) -> list[PathFinding]:
        return [p for g in self.groups for p in g.paths]


def _unreachable(result: MemberResult) -> bool:
    return result.verdict is Verdict.FAILED and result.reason is Reason.FABRIC_UNREACHABLE


def rank0_unreachable(group: GroupEvidence) -> list[Final] | None:
    """Every other rank could not reach rank 0: rank 0 is named, the others are not."""
    others, rank0 = group.results[1:], group.results[0]
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


@dataclass(frozen=True, slots=True)
class Judged:
    """What the pairs of one group named against the run's floor."""

    named: dict[str, Final]
    notes: dict[str, str]
    paths: tuple[PathFinding, ...] = ()
    alone: bool = False  # a group of two whose one pair is the only one it is compared with


def settle(group: GroupEvidence, rank: int, result: MemberResult, judged: Judged) -> Final:
    node = group.nodes[rank]
    if result.verdict is not Verdict.PASSED and result.reason not in SLOWNESS:
        return Final(result.verdict, result.reason, result.message)
    if node in judged.named:
        return judged.named[node]
    if node in judged.notes:
        return Final(Verdict.PASSED, None, f"passed; {judged.notes[node]}", noted=True)
    message = result.message
    if result.verdict is not Verdict.PASSED:
        message = (
            f"against the run's pairs no node of group {group.name} stands out (its agent "
            f"said: {result.reason}: {result.message})"
        )
    if judged.alone:
        message += (
            "; a group of two alone in the run: its one pair is its own reference, so only "
            "fabric.thresholds.absoluteBusbwGBps can find it slow"
        )
    return Final(Verdict.PASSED, None, message)


def _group_floors(
    groups: Sequence[GroupEvidence], thresholds: FabricThresholds
) -> dict[tuple[bool, int], float]:
    by_kind: dict[tuple[bool, int], list[float]] = {}
    for group in groups:
        if group.busbw is not None:
            by_kind.setdefault((group.cross, len(group.nodes)), []).append(group.busbw)
    return {kind: thresholds.floor(statistics.median(v)) for kind, v in by_kind.items()}


def not_formed(group: GroupEvidence) -> list[Final] | None:
    """The group did not form (the operator gave it up): nothing was measured, whatever an agent
    wrote as its pod was stopped (a rank that lost rank 0, say). Each keeps the operator's words
    where it has them."""
    gave_up = [
        r for r in group.results if r.reason is Reason.FABRIC_GANG_NOT_FORMED and not r.by_agent
    ]
    if not gave_up:
        return None
    return [
        Final(Verdict.NOT_RUN, Reason.FABRIC_GANG_NOT_FORMED, r.message)
        if r.reason is Reason.FABRIC_GANG_NOT_FORMED
        else Final(Verdict.NOT_RUN, Reason.FABRIC_GANG_NOT_FORMED, gave_up[0].message)
        for r in group.results
    ]


def judge(group: GroupEvidence, pair_floor: float, *, alone: bool = False) -> Judged:
    """Who the group's pairs name against the run's floor. Blame needs a reference: a group of
    three or more in which no pair reached the floor is slow as a whole and names no one; the
    one pair of a group of two is judged on its own (the link or either node)."""
    rounds = round_pairs(group.pairs)
    reached = any(p.busbw_gbps is not None and p.busbw_gbps >= pair_floor for p in rounds)
    if not rounds or (not reached and len(group.nodes) > 2):
        return Judged({}, {}, alone=alone)
    blames = blame(group.pairs, pair_floor)
    notes: dict[str, str] = {}
    paths: tuple[PathFinding, ...] = ()
    if group.cross:
        reading = cross_findings(
            group.name,
            blames,
            group.pairs,
            domains=group.domains or {},
            lone=group.lone,
            floor=pair_floor,
        )
        blames, notes, paths = list(reading.kept), reading.notes, reading.findings
    named = {b.node: Final(verdict_of(b.reason), b.reason, b.message) for b in blames}
    return Judged(named, notes, paths, alone)


def with_training(judged: Judged, blames: Sequence[Blame]) -> Judged:
    """What the group's training pairs name, added for the nodes the all-reduce did not name."""
    named = dict(judged.named)
    for found in blames:
        if found.node not in named and found.node not in judged.notes:
            named[found.node] = Final(verdict_of(found.reason), found.reason, found.message)
    return Judged(named, judged.notes, judged.paths, judged.alone)


def classify_group(
    group: GroupEvidence,
    pair_floor: float,
    group_floor: float | None,
    *,
    alone: bool = False,
    training: Sequence[Blame] = (),
) -> GroupOutcome:
    finals = not_formed(group) or rank0_unreachable(group)
    judged = bandwidth = Judged({}, {})
    if finals is None:
        bandwidth = judge(group, pair_floor, alone=alone)
        judged = with_training(bandwidth, training)
        finals = [settle(group, rank, r, judged) for rank, r in enumerate(group.results)]
    low = group.busbw is not None and group_floor is not None and group.busbw < group_floor
    # A slow group is the all-reduce's: a node named for its training alone does not explain it.
    trained = set(judged.named) - set(bandwidth.named)
    slow = (
        low
        and not judged.paths
        and not any(
            f.reason in SLOWNESS
            for n, f in zip(group.nodes, finals, strict=True)
            if n not in trained
        )
    )
    return GroupOutcome(
        group.name,
        group.domain,
        group.nodes,
        group.busbw,
        group_floor,
        slow,
        tuple(finals),
        judged.paths,
    )


def _worse(final: Final, known: Final | None) -> bool:
    if known is None or _WORST[final.verdict] > _WORST[known.verdict]:
        return True
    return _WORST[final.verdict] == _WORST[known.verdict] and final.noted and not known.noted


def _training(groups: Sequence[GroupEvidence], train: FabricTrain | None) -> dict[str, list[Blame]]:
    """What each group's training pairs name against the run's training floor."""
    trained = [t for g in groups if (t := g.training()) is not None]
    if train is None or not train.enabled or not trained:
        return {}
    floors = {cross: train.floor(train_reference(trained, cross)) for cross in (False, True)}
    return {t.name: judge_train(t, floors[t.cross]) for t in trained}


def classify(
    groups: Sequence[GroupEvidence],
    thresholds: FabricThresholds,
    train: FabricTrain | None = None,
) -> Classification:
    references: dict[bool, float | None] = {}
    counts: dict[bool, int] = {}
    for cross in (False, True):
        scoped = [p for g in groups if g.cross is cross for p in round_pairs(g.pairs)]
        references[cross], counts[cross] = reference_busbw(scoped), len(scoped)
    floors = _group_floors(groups, thresholds)
    trained = _training(groups, train)
    outcomes = tuple(
        classify_group(
            g,
            thresholds.floor(references[g.cross]),
            floors.get((g.cross, len(g.nodes))),
            alone=len(g.nodes) == 2 and counts[g.cross] == 1,
            training=trained.get(g.name, ()),
        )
        for g in groups
    )
    nodes: dict[str, Final] = {}
    for outcome in outcomes:
        for node, final in zip(outcome.nodes, outcome.finals, strict=True):
            if _worse(final, nodes.get(node)):
                nodes[node] = final
    compared = None
    if train is not None and train.enabled:
        named = {name: {b.node for b in blames} for name, blames in trained.items()}
        compared = classify_train(
            [t for g in groups if (t := g.training()) is not None], train, named
        )
    return Classification(
        references[False],
        thresholds.floor(references[False]),
        outcomes,
        nodes,
        references[True],
        compared,
    )


def as_reported(final: Final, reported: FabricFacts) -> bool:
    """The settled verdict is a pass the report already shows as its agent wrote it."""
    return (
        final.verdict is Verdict.PASSED
        and reported.by_agent
        and not reported.classified
        and (reported.verdict, reported.reason, reported.message)
        == (final.verdict, final.reason, final.message[:MESSAGE_LIMIT])
    )
