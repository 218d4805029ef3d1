"""Pure: a GPU stack whose passing nodes are of two kinds (gpuval_api.baseline.learn's module doc).
The nodes learning left out are learned the same way on their own; where they agree among
themselves and are at least BIMODAL_SHARE of the nodes offered, the stack is bimodal: learning
takes the better mode or nothing, and says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuval_api import figures
from gpuval_api.baseline.pool import Converged, NodeFigures, Pool, converge, named_against
from gpuval_api.baselinemodel import BaselineKey

# The nodes left out are a second mode, not a few slow nodes, when they agree among themselves and
# are at least this share of the nodes offered: 3 slow nodes of 50 are outliers, 40 % is a kind.
BIMODAL_SHARE = 0.25
# Figures named per mode in what is said of a bimodal fleet.
MODE_FIGURES = 3
LEARNED_NOTHING = "learned nothing"
TINY = 1e-9


@dataclass(frozen=True, slots=True)
class Mode:
    """One of two groups of a bimodal fleet: its nodes and its judged figures' centres."""

    nodes: tuple[str, ...]
    centres: dict[str, float]


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
        return f"{len(mode.nodes)} nodes at {shown}"

    learned = (
        f"learned the better mode ({len(first.nodes)} nodes) and left the other's nodes out, "
        "named in the GpuBaseline"
        if chosen
        else f"{LEARNED_NOTHING}: a person chooses (a GpuBaseline written by hand or imported, or "
        "kubectl gpuval baseline learn with other settings)"
    )
    return f"{key.describe()} is bimodal: {said(first)} and {said(second)}; {learned}"


def second_mode(
    converged: Converged, everyone: dict[str, NodeFigures], fraction: float, offered: int
) -> Converged | None:
    """The nodes left out learned on their own, when they form a second mode (see the module
    doc); None when they are a few outliers, or disagree among themselves."""
    left = {e.node for e in converged.excluded}
    if converged.problem or len(left) < max(2, BIMODAL_SHARE * offered):
        return None
    second = converge(Pool({n: everyone[n] for n in left}), fraction)
    if second.problem or len(second.pool.nodes) < max(2, BIMODAL_SHARE * offered):
        return None
    return second


@dataclass(frozen=True, slots=True)
class Choice:
    """Of a bimodal stack: the mode to learn (its converged pool, every node left out, the
    rounds), both modes (that one first), and why nothing is to be learned ("" when one is)."""

    converged: Converged
    modes: tuple[Mode, Mode]
    problem: str


def choose(
    converged: Converged,
    second: Converged,
    everyone: dict[str, NodeFigures],
    fraction: float,
    min_nodes: int,
) -> Choice:
    """The better of two modes (see the module doc): the one the median kept first, or the one
    it left out, whose nodes are then named against it."""
    kept = Mode(tuple(sorted(converged.pool.nodes)), converged.centres())
    other = Mode(tuple(sorted(second.pool.nodes)), second.centres())
    better = better_of(other.centres, kept.centres, fraction)
    chosen, modes = converged, (kept, other)
    if better > 0:
        # The mode the median kept is the worse one: learn the other, name these.
        rest = Pool({n: everyone[n] for n in everyone if n not in second.pool.nodes})
        named = named_against(rest, second.centres(judged=False), converged.rounds + 1)
        rounds = converged.rounds + second.rounds
        chosen, modes = Converged(second.pool, named + second.excluded, rounds), (other, kept)
    problem = ""
    if better == 0:
        problem = "neither mode is better on most figures"
    elif len(chosen.pool.nodes) < min_nodes:
        problem = (
            f"the better mode has {len(chosen.pool.nodes)} nodes; baseline.minNodes is {min_nodes}"
        )
    return Choice(chosen, modes, problem)
