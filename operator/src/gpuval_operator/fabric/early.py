"""Pure: the members whose settled fabric verdict is already certain while other groups still run.

The run-wide comparison (`fabric.verdicts.classify`) judges each group's pairs against a floor
taken from the whole run's pairs, so in general a node's verdict waits for the last group. But
the floor has a ceiling: a group still to finish can raise the run's reference (the median over
nodes of each node's best pair) at most as far as if each of its nodes' best pair were above
every figure seen (`pair_floor_ceiling`: each such node counted as +inf). A domain group whose
every pair, confirmations included, is at or above that ceiling has no slow pair against any
floor the run can still come to: `isolation.blame` names none of its nodes, and classify will
settle each member exactly as `settle` does with nothing named. Their verdicts, and their node
actions, need not wait for the last group: at 10,000 nodes that spreads most passing nodes'
writes over the rounds instead of 10,000 node writes after the last result (docs/operator/fabric.md,
"How the fabric scales").

Not early (they wait for the comparison):
- a cross-domain group, and any node that is or may yet be a representative: its verdict is the
  worse of two groups' (`excluded`, from `fabric.plan.possible_representatives`);
- a group of two: whether its pair is the only one of its kind in the run is known at the end;
- a group with any result other than a pass or slowness (not formed, rank 0 unreachable, a hang,
  a transport fallback), and one with a pair that failed or has no rounds;
- anything while at least half the run's nodes still wait for their groups: the ceiling is then
  unbounded;
- with spec.fabric.train, a group whose training pairs are not all at or above the training
  floor's ceiling (the same bound over the training pairs), or that has no training result.

Nothing here calls the API (tests/unit/operator/test_operator_fabric_early.py).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Collection, Iterable, Sequence

from gpuval_api import Verdict
from gpuval_api.fabric import FabricThresholds
from gpuval_api.fabric.isolation import Pair, best_pairs, round_pairs
from gpuval_api.fabric.train import FabricTrain
from gpuval_operator.fabric.verdicts import SLOWNESS, Final, GroupEvidence, Judged, settle


def _ceiling(pairs: Iterable[Pair], pending_nodes: int) -> float | None:
    """The highest reference the run can still come to (None: no ceiling yet)."""
    best = best_pairs(pairs)
    values = [*best.values(), *([math.inf] * pending_nodes)]
    if not values:
        return None
    median = statistics.median(values)
    return None if math.isinf(median) else median


def pair_floor_ceiling(
    done: Sequence[GroupEvidence], pending_nodes: int, thresholds: FabricThresholds
) -> float:
    """The highest pairs' floor the run can still come to, from the domain groups `done` and
    the number of nodes in domain groups that have no results yet (+inf: no ceiling yet)."""
    ceiling = _ceiling((p for g in done for p in g.pairs), pending_nodes)
    return math.inf if ceiling is None else thresholds.floor(ceiling)


def train_floor_ceiling(
    done: Sequence[GroupEvidence], pending_nodes: int, train: FabricTrain
) -> float:
    """The same bound over the training pairs (spec.fabric.train): +inf, no ceiling yet."""
    pairs = (p for g in done if g.train is not None for p in g.train.pairs)
    ceiling = _ceiling(pairs, pending_nodes)
    return math.inf if ceiling is None else train.floor(ceiling)


def _all_at(pairs: Iterable[Pair], ceiling: float) -> bool:
    return all(p.figure is not None and p.figure >= ceiling for p in pairs)


def certain(group: GroupEvidence, ceiling: float, train_ceiling: float | None = None) -> bool:
    """No pair of the group can be slow, and nothing but slowness was found in it
    (`train_ceiling`: with spec.fabric.train, nor can a training pair)."""
    trained = train_ceiling is None or (
        group.train is not None
        and bool(round_pairs(group.train.pairs))
        and _all_at(group.train.pairs, train_ceiling)
    )
    return (
        not group.cross
        and len(group.nodes) > 2
        and len(group.results) == len(group.nodes)
        and bool(round_pairs(group.pairs))
        and _all_at(group.pairs, ceiling)
        and all(r.verdict is Verdict.PASSED or r.reason in SLOWNESS for r in group.results)
        and trained
    )


def early_finals(
    done: Sequence[GroupEvidence],
    pending_nodes: int,
    thresholds: FabricThresholds,
    excluded: Collection[str] = (),
    train: FabricTrain | None = None,
) -> dict[str, Final]:
    """Each member of a `done` domain group whose verdict the comparison can no longer change,
    with the verdict it will settle to, but the nodes `excluded` (`train`: spec.fabric.train)."""
    ceiling = pair_floor_ceiling(done, pending_nodes, thresholds)
    train_ceiling = None
    if train is not None and train.enabled:
        train_ceiling = train_floor_ceiling(done, pending_nodes, train)
        if math.isinf(train_ceiling):
            return {}
    if math.isinf(ceiling):
        return {}
    nothing = Judged({}, {})
    return {
        node: settle(group, rank, result, nothing)
        for group in done
        if certain(group, ceiling, train_ceiling)
        for rank, (node, result) in enumerate(zip(group.nodes, group.results, strict=True))
        if node not in excluded
    }
