"""Pure: the run-wide comparison of the groups' training phases (spec.fabric.train), beside the
all-reduce's (fabric.verdicts calls it and settles each node).

- A domain group's training pairs are judged again against the run's training floor: the
  fraction `fabric.train.fractionOfMedian` of the run's reference, the median over nodes of each
  node's best training pair (tokens/s per GPU; the domain groups' pairs, the cross-domain groups'
  have their own), with the all-reduce's pair method (gpuval_api.fabric.isolation.blame, its
  TRAINING measure), provided one pair of the group reached the floor: the nodes it names fail
  (FabricTrainSlowNode, FabricSlowLink), the one slow pair of a group of two is FabricSlowPair on
  both (NotRun). What the all-reduce named against a node comes first. In a cross-domain group no
  representative is named for its training: each passed inside its domain, and what is slow
  between domains is the path (the all-reduce's to find).
- A group whose run is below the fraction of the median of the run's groups of its kind and
  experiment (shape, nodes, GPUs: FabricTrainResult.key) and whose training named no node is a
  slow training group: listed in the status, no node blamed.
- The groups' losses are their fingerprints, compared with `gpuval_api.training.loss_mismatches`
  as the nodes' are: within one experiment and stack bit for bit against the majority, across
  stacks within `fabric.train.lossTolerance`. A group that differs is listed with the first step
  that differs; no node is blamed for it (a group cannot tell which of its nodes computes
  differently; each node's own `train` check fingerprint can).

Nothing here calls the API (tests/unit/operator/test_operator_fabric_train.py).
"""

from __future__ import annotations

import statistics
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpuval_api.fabric.isolation import TRAINING, Blame, blame, reference, round_pairs
from gpuval_api.fabric.train import FabricTrain
from gpuval_api.training import LossMismatch, loss_mismatches, shown
from gpuval_operator.fabric.facts import FabricTrainFacts


@dataclass(frozen=True, slots=True)
class TrainGroup:
    """One group's training phase, as the comparison sees it."""

    name: str
    nodes: tuple[str, ...]
    facts: FabricTrainFacts
    domain: str | None = None
    cross: bool = False


@dataclass(frozen=True, slots=True)
class TrainGroupOutcome:
    name: str
    domain: str | None
    nodes: tuple[str, ...]
    figure: float | None  # tokens/s per GPU
    step_seconds: float | None
    floor: float | None
    slow: bool  # below its floor with no node named for its training
    mismatch: LossMismatch | None = None


@dataclass(frozen=True, slots=True)
class TrainClassification:
    median_pair: float | None  # the domain groups' training pairs' reference
    pair_floor: float
    groups: tuple[TrainGroupOutcome, ...]
    cross_median_pair: float | None = None

    @property
    def slow(self) -> list[TrainGroupOutcome]:
        return [g for g in self.groups if g.slow]

    @property
    def mismatched(self) -> list[TrainGroupOutcome]:
        return [g for g in self.groups if g.mismatch is not None]


def train_reference(groups: Iterable[TrainGroup], cross: bool) -> float | None:
    """The run's training reference over the groups of one kind (domain or cross-domain)."""
    return reference(p for g in groups if g.cross is cross for p in round_pairs(g.facts.pairs))


def judge_train(group: TrainGroup, floor: float) -> list[Blame]:
    """Who the group's training pairs name against the run's floor (none in a cross-domain group,
    none in a group of three or more whose every pair is below it: slow as a whole)."""
    rounds = round_pairs(group.facts.pairs)
    reached = any(p.figure is not None and p.figure >= floor for p in rounds)
    if group.cross or not rounds or (not reached and len(group.nodes) > 2):
        return []
    return blame(group.facts.pairs, floor, TRAINING)


def _group_floors(
    groups: Sequence[TrainGroup], config: FabricTrain
) -> dict[tuple[bool, str], float]:
    by_kind: dict[tuple[bool, str], list[float]] = {}
    for group in groups:
        if group.facts.figure is not None:
            by_kind.setdefault((group.cross, group.facts.key), []).append(group.facts.figure)
    return {kind: config.floor(statistics.median(v)) for kind, v in by_kind.items()}


def classify_train(
    groups: Sequence[TrainGroup],
    config: FabricTrain,
    named: Mapping[str, Collection[str]],
) -> TrainClassification:
    """Each group's training outcome (`named`: group -> the nodes its training named)."""
    floors = _group_floors(groups, config)
    found = {
        m.node: m
        for m in loss_mismatches(
            {g.name: g.facts.losses for g in groups if g.facts.losses is not None},
            config.loss_tolerance,
        )
    }
    outcomes = []
    for group in groups:
        floor = floors.get((group.cross, group.facts.key))
        figure = group.facts.figure
        low = figure is not None and floor is not None and figure < floor
        outcomes.append(
            TrainGroupOutcome(
                group.name,
                group.domain,
                group.nodes,
                figure,
                group.facts.step_seconds,
                floor,
                low and not named.get(group.name),
                found.get(group.name),
            )
        )
    domain, cross = train_reference(groups, False), train_reference(groups, True)
    return TrainClassification(domain, config.floor(domain), tuple(outcomes), cross)


def mismatch_message(found: LossMismatch) -> str:
    """One line about a group whose losses differ (LossMismatch.message speaks of nodes)."""
    if found.reference_stack is None:
        return (
            f"the group's training losses differ from step {found.step} of {found.steps} on: "
            f"{shown(found.value)} where {found.peers} groups of the same size and stack "
            f"({found.stack}) computed {shown(found.expected)}; fixed seeds and deterministic "
            "settings give every such group bit-identical losses: one of its nodes, or the "
            "all-reduce between them, computes differently (each node's own train check "
            "fingerprint tells which node)"
        )
    return (
        f"the group's training loss at step {found.step} of {found.steps} is "
        f"{shown(found.value)}, beyond fabric.train.lossTolerance of {shown(found.expected)} "
        f"that {found.peers} groups of another stack computed (this group: {found.stack}; "
        f"reference: {found.reference_stack})"
    )
