"""Pure: a GPU stack whose passing nodes are of two kinds (gpuval_api.baseline.learn's module doc).

Two modes are found by a gap test on each judged figure, whatever the modes' sizes: the nodes'
own values of the figure (the median of each node's samples, on a log scale so that a ratio is a
distance) are sorted, and of the splits that leave at least BIMODAL_SHARE of the nodes (two or
more) on either side, the one at the widest gap is taken. It is two modes when that gap, the
slowest node of the better group against the fastest of the other, is

- wider than MODE_GAP x the fraction (half of it): a baseline learned in the middle would then lie
  more than a quarter of the fraction from both groups, and let a node of the better one lose more
  than 1.25 x the fraction before failing (halves at 1.0 and 0.9 learned 0.95 and let a fast node
  lose 14 %), and
- wider than GAP_SPREADS (3) robust spreads (1.4826 x the median absolute deviation) of either
  group: a gap of that size inside one noisy group is not a second mode.

A spread of nodes (no gap) is never two modes, nor a few slow nodes (fewer than BIMODAL_SHARE:
3 of 50 are outliers, 40 % is a kind). The figure split at the widest gap names the two groups.
The fabric pairs are left to the fabric, which names slow links itself: a node's pairs are as
slow as its partners.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from gpuval_api import figures
from gpuval_api.baseline.pool import (
    MAD_TO_SIGMA,
    Converged,
    NodeFigures,
    Pool,
    converge,
    named_against,
)
from gpuval_api.baselinemodel import BaselineKey

BIMODAL_SHARE = 0.25
MODE_GAP = 0.5
GAP_SPREADS = 3.0
# Figures and nodes named per mode in what is said of a bimodal fleet.
MODE_FIGURES = 3
MODE_NODES = 6
LEARNED_NOTHING = "learned nothing"
TINY = 1e-9
# How a person chooses a mode of a bimodal stack (what learning said before it found one too).
PERSON_CHOOSES = (
    "a person chooses: kubectl gpuval baseline learn learns the better mode, or a GpuBaseline "
    "written by hand or imported"
)


@dataclass(frozen=True, slots=True)
class Mode:
    """One of two groups of a bimodal fleet: its nodes and its judged figures' centres."""

    nodes: tuple[str, ...]
    centres: dict[str, float]


@dataclass(frozen=True, slots=True)
class Split:
    """Two modes found by the gap test: the better group first, the figure split, its gap."""

    modes: tuple[Mode, Mode]
    figure: str
    gap: float


def _spread(values: Sequence[float]) -> float:
    centre = statistics.median(values)
    return MAD_TO_SIGMA * statistics.median(abs(v - centre) for v in values)


def widest_gap(
    values: dict[str, float], least: int, fraction: float
) -> tuple[float, set[str]] | None:
    """The gap test on one figure (see the module doc) over each node's value: (the gap on a
    log scale, the nodes above it), or None when there are no two modes."""
    ordered = sorted((math.log(v), n) for n, v in values.items() if v > 0)
    logs = [v for v, _ in ordered]
    splits = range(least, len(logs) - least + 1)
    if not splits:
        return None
    at = max(splits, key=lambda k: logs[k] - logs[k - 1])
    gap = logs[at] - logs[at - 1]
    wide = max(_spread(logs[:at]), _spread(logs[at:]))
    if gap <= math.log1p(MODE_GAP * fraction) or gap <= GAP_SPREADS * wide:
        return None
    return gap, {n for _, n in ordered[at:]}


def two_modes(everyone: dict[str, NodeFigures], fraction: float) -> Split | None:
    """The two modes of a stack's passing nodes, the better first; None when it has one."""
    pool = Pool(dict(everyone))
    per_figure: dict[str, dict[str, float]] = {}
    for node in pool.nodes.values():
        for figure, values, peers in pool.counted(node):
            if values and figures.baseline_judged(figure) and not peers:
                per_figure.setdefault(figure, {})[node.node] = statistics.median(values)
    least = max(2, math.ceil(BIMODAL_SHARE * len(everyone)))
    found = [
        (gap, figure, upper)
        for figure, values in per_figure.items()
        if (split := widest_gap(values, least, fraction)) is not None
        for gap, upper in [split]
    ]
    if not found:
        return None
    gap, figure, upper = max(found, key=lambda f: (f[0], f[1]))
    lower = set(per_figure[figure]) - upper
    high, low = (_mode(everyone, group) for group in (upper, lower))
    better = figures.of_baseline(figure).ratio(high.centres[figure], low.centres[figure]) > 1
    return Split((high, low) if better else (low, high), figure, gap)


def _mode(everyone: dict[str, NodeFigures], nodes: set[str]) -> Mode:
    pool = Pool({n: everyone[n] for n in sorted(nodes)})
    return Mode(tuple(sorted(nodes)), Converged(pool, [], 0).centres())


def better_of(first: dict[str, float], second: dict[str, float], fraction: float) -> int:
    """1 when `first` is better than `second` by more than `fraction` on more judged figures than
    it is worse, -1 the other way round, 0 when neither is."""
    score = 0
    for name in first.keys() & second.keys():
        ratio = figures.of_baseline(name).ratio(first[name], second[name])
        score += (ratio > 1 + fraction) - (ratio < 1 - fraction)
    return (score > 0) - (score < 0)


def modes_text(key: BaselineKey, first: Mode, second: Mode, chosen: bool) -> str:
    """What is said of a bimodal fleet: both modes' nodes and the figures on which they differ
    most, and what was learned (`chosen`: the first mode, the better)."""
    names = sorted(
        first.centres.keys() & second.centres.keys(),
        # A count where lower is better may have a centre of 0: TINY keeps the ratio finite.
        key=lambda n: abs(math.log((second.centres[n] + TINY) / (first.centres[n] + TINY))),
        reverse=True,
    )[:MODE_FIGURES]

    def said(mode: Mode) -> str:
        shown = ", ".join(
            f"{n} {round(mode.centres[n], 1):g} {figures.baseline_unit(n)}" for n in names
        )
        listed = ", ".join(mode.nodes[:MODE_NODES])
        more = len(mode.nodes) - MODE_NODES
        listed += f" and {more} more" if more > 0 else ""
        return f"{len(mode.nodes)} nodes ({listed}) at {shown}"

    learned = (
        f"learned the better mode ({len(first.nodes)} nodes) and left the other's nodes out, "
        "named in the GpuBaseline"
        if chosen
        else f"{LEARNED_NOTHING} until {PERSON_CHOOSES}"
    )
    return f"{key.describe()} is bimodal: {said(first)} and {said(second)}; {learned}"


@dataclass(frozen=True, slots=True)
class Choice:
    """Of a bimodal stack a person asked to learn: the better mode's converged pool (every node
    left out named, the other mode's too), and why nothing is to be learned ("" when it is)."""

    converged: Converged
    problem: str


def choose(
    split: Split, everyone: dict[str, NodeFigures], fraction: float, min_nodes: int
) -> Choice:
    """The better mode learned on its own, the other's nodes named against it (kubectl gpuval
    baseline learn: a person's choice; the operator learns nothing of a bimodal stack)."""
    better, worse = split.modes
    converged = converge(Pool({n: everyone[n] for n in better.nodes}), fraction)
    rest = Pool({n: everyone[n] for n in everyone if n not in converged.pool.nodes})
    left = {e.node for e in converged.excluded}
    named = [
        e
        for e in named_against(rest, converged.centres(judged=False), converged.rounds + 1)
        if e.node not in left
    ]
    chosen = Converged(converged.pool, converged.excluded + named, converged.rounds)
    problem = converged.problem
    if not problem and better_of(better.centres, worse.centres, fraction) <= 0:
        problem = f"neither mode is better by more than {fraction:g} on most figures"
    elif not problem and len(chosen.pool.nodes) < min_nodes:
        problem = (
            f"the better mode has {len(chosen.pool.nodes)} nodes; baseline.minNodes is {min_nodes}"
        )
    return Choice(chosen, problem)
