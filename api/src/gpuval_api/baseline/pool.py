"""Pure: the rounds of learning (gpuval_api.baseline.learn), SuperBench's way: each figure's centre
over the nodes kept, every node with a figure off its centre by more than the fraction left out,
again until none is. What learning holds of each node (`NodeFigures`) is kept small: learning reads
every node of a run.
"""

from __future__ import annotations

import math
import statistics
import sys
from array import array
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from gpuval_api import figures
from gpuval_api.baseline.samples import Sample
from gpuval_api.baselinemodel import LARGEST, BaselineKey, ExcludedNode
from gpuval_api.figures import Scope

MAD_TO_SIGMA = 1.4826  # the MAD of a normal distribution is 0.6745 sigma
MAX_ROUNDS = 20


@dataclass(frozen=True, slots=True)
class FigureValues:
    """One figure of one node in one setting: its values, and for a fabric figure each value's
    other node."""

    figure: str
    measured_with: str
    values: Sequence[float]
    peers: tuple[str, ...] = ()  # a fabric figure's other node per value; () for the others


# (figure, measured_with, how many values, whether a fabric figure) per figure of a node, in
# order: nodes of one GPU stack share one (see NodeFigures).
Layout = tuple[tuple[str, str, int, bool], ...]
_LAYOUTS: dict[Layout, Layout] = {}
MAX_LAYOUTS = 1024


def _shared(layout: Layout) -> Layout:
    if len(_LAYOUTS) >= MAX_LAYOUTS:
        return layout
    return _LAYOUTS.setdefault(layout, layout)


class NodeFigures:
    """What learning reads of one node: its key, whether it passed, its figures.

    Learning holds one of these for every node of a run (10,000 at fleet scale), so a node keeps
    its values in one float array and a layout (which figure, setting and count each stretch
    of it is) that the nodes of a GPU stack share: about 1 KiB for an 8-GPU node's 101 values,
    where a `Sample` each took 13 KiB (docs/operator/baselines.md, "Baselines and history"). Which
    GPU a value came from is not kept: learning does not use it.
    """

    __slots__ = ("key", "layout", "node", "passed", "peers", "values")

    def __init__(
        self, node: str, key: BaselineKey | None, passed: bool, samples: Iterable[Sample]
    ) -> None:
        self.node, self.key, self.passed = node, key, passed
        groups: dict[tuple[str, str, bool], tuple[list[float], list[str]]] = {}
        for s in samples:
            fabric = s.peer_node is not None
            values, peers = groups.setdefault((s.figure, s.measured_with, fabric), ([], []))
            values.append(s.value)
            if s.peer_node is not None:
                peers.append(s.peer_node)
        self.values = array("d")
        found: list[str] = []
        layout = []
        for (figure, setting, fabric), (values, peers) in groups.items():
            layout.append((sys.intern(figure), sys.intern(setting), len(values), fabric))
            self.values.extend(values)
            found += peers
        self.layout: Layout = _shared(tuple(layout))
        self.peers = tuple(found)

    @property
    def figures(self) -> Iterator[FigureValues]:
        """The node's figures, one per figure and setting."""
        at = peer_at = 0
        for figure, setting, count, fabric in self.layout:
            peers = self.peers[peer_at : peer_at + count] if fabric else ()
            yield FigureValues(figure, setting, self.values[at : at + count], peers)
            at += count
            peer_at += count if fabric else 0

    @property
    def samples(self) -> list[Sample]:
        """The node's values as samples (without the GPU they came from)."""
        return [
            Sample(f.figure, v, f.measured_with, peer_node=f.peers[i] if f.peers else None)
            for f in self.figures
            for i, v in enumerate(f.values)
        ]

    def __repr__(self) -> str:
        return f"NodeFigures({self.node!r}, passed={self.passed}, values={len(self.values)})"


def robust(values: Sequence[float]) -> tuple[float, float]:
    """(median, 1.4826 x median absolute deviation)."""
    centre = statistics.median(values)
    return centre, MAD_TO_SIGMA * statistics.median(abs(v - centre) for v in values)


@dataclass
class Pool:
    """The figures of the nodes still kept, each in the figure's commonest settings; the
    figures left out of learning (`dropped`: figure -> why) count no more."""

    nodes: dict[str, NodeFigures]
    dropped: dict[str, str] = field(default_factory=dict)
    settings: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        counts: dict[str, Counter[str]] = {}
        for node in self.nodes.values():
            for f in node.figures:
                if f.figure in self.dropped:
                    continue
                counts.setdefault(f.figure, Counter())[f.measured_with] += len(f.values)
        self.settings = {fig: c.most_common(1)[0][0] for fig, c in counts.items()}

    def counted(self, node: NodeFigures) -> Iterator[tuple[str, Sequence[float], tuple[str, ...]]]:
        """A node's values that count, per figure, with a fabric value's other node: the
        figure's settings, and for a fabric pair a partner still kept (a slow partner must not
        drag a good node out)."""
        for f in node.figures:
            if f.measured_with != self.settings.get(f.figure):
                continue
            if not f.peers:
                yield f.figure, f.values, ()
                continue
            kept = [
                (v, peer) for v, peer in zip(f.values, f.peers, strict=True) if peer in self.nodes
            ]
            if kept:
                yield f.figure, [v for v, _ in kept], tuple(peer for _, peer in kept)

    def by_figure(self) -> dict[str, tuple[array[float], set[str]]]:
        """Figure -> (its values, the nodes they came from); a fabric pair, which both its
        nodes report, counts once. The values are float arrays: with a float object each, learning
        from 10,000 8-GPU nodes peaked at 69.8 MiB, with arrays at 46.1 MiB (tracemalloc)."""
        found: dict[str, tuple[array[float], set[str]]] = {}
        pairs: set[tuple[str, str]] = set()
        for node in self.nodes.values():
            for figure, values, peers in self.counted(node):
                kept, names = found.setdefault(figure, (array("d"), set()))
                names.add(node.node)
                if not peers:
                    kept.extend(values)
                    continue
                for value, peer in zip(values, peers, strict=True):
                    pair = (min(node.node, peer), max(node.node, peer))
                    if pair not in pairs:
                        pairs.add(pair)
                        kept.append(value)
        return found


def offsets(
    pool: Pool, node: NodeFigures, centres: dict[str, float]
) -> list[tuple[float, str, float]]:
    """How far off its centre each figure of the node is, as (off, figure, value): its furthest
    value, but for a fabric pair its nearest one (a node slow in one pair and fine in another is
    not the slow one; the fabric names slow links itself)."""
    found: dict[str, tuple[float, str, float]] = {}
    for name, values, _ in pool.counted(node):
        centre = centres.get(name)
        figure = figures.of_baseline(name)
        if centre is None or (centre <= 0 and not figure.lower):
            continue
        nearest = figure.scope is Scope.FABRIC
        for value in values:
            off = _off(figure, value, centre)
            have = found.get(name)
            if have is None or (off < have[0] if nearest else off > have[0]):
                found[name] = (off, name, value)
    return list(found.values())


def _off(figure: figures.Figure, value: float, centre: float) -> float:
    """How far `value` is off `centre`, as a fraction of it, either way; where lower is better
    the figure's tolerance is not counted, and against a centre of 0 (a count the nodes do not
    have) a value beyond the tolerance is off without end."""
    gap = max(0.0, abs(value - centre) - figure.tolerance)
    if centre > 0:
        return gap / centre
    return math.inf if gap > 0 else 0.0


def breaking_nodes(
    pool: Pool, centres: dict[str, float], fraction: float, round_: int
) -> list[ExcludedNode]:
    """Per node kept, its figure furthest off its centre when that is more than `fraction`."""
    found = []
    for node in pool.nodes.values():
        offs = [o for o in offsets(pool, node, centres) if o[0] > fraction]
        if offs:
            _, figure, value = max(offs, key=lambda o: o[0])
            found.append(
                ExcludedNode(
                    node=node.node,
                    figure=figure,
                    value=min(value, LARGEST),
                    centre=centres[figure],
                    round=round_,
                )
            )
    return found


@dataclass
class Converged:
    """A pool after the rounds: the nodes kept, those left out, the rounds, why it failed."""

    pool: Pool
    excluded: list[ExcludedNode]
    rounds: int
    problem: str = ""

    def centres(self, judged: bool = True) -> dict[str, float]:
        """The centres of the nodes kept: of the judged figures (or of every one)."""
        return {
            figure: robust(values)[0]
            for figure, (values, _) in self.pool.by_figure().items()
            if figures.baseline_judged(figure) or not judged
        }


def converge(pool: Pool, fraction: float) -> Converged:
    """Leave out the nodes off a centre by more than `fraction`, round by round, until none is
    (see the module doc)."""
    excluded: list[ExcludedNode] = []
    rounds = 0
    for rounds in range(1, MAX_ROUNDS + 1):
        centres = {fig: robust(values)[0] for fig, (values, _) in pool.by_figure().items()}
        breaking = breaking_nodes(pool, centres, fraction, rounds)
        if not breaking:
            return Converged(pool, excluded, rounds)
        if len(breaking) * 2 > len(pool.nodes):
            noisy = noisy_figures(pool, centres, fraction, rounds)
            if noisy and len(noisy) < len(centres):
                # Learning of the other figures goes on without these (learn's `left_out`).
                pool = Pool(pool.nodes, {**pool.dropped, **noisy})
                continue
            problem = (
                f"in round {rounds}, {len(breaking)} of {len(pool.nodes)} nodes were more than "
                f"{fraction:g} off a centre: the nodes disagree too much for one baseline"
            )
            return Converged(pool, excluded, rounds, problem)
        excluded.extend(breaking)
        gone = {e.node for e in breaking}
        pool = Pool({n: f for n, f in pool.nodes.items() if n not in gone}, pool.dropped)
    return Converged(
        pool, excluded, rounds, f"the nodes left out did not converge in {MAX_ROUNDS} rounds"
    )


def noisy_figures(
    pool: Pool, centres: dict[str, float], fraction: float, round_: int
) -> dict[str, str]:
    """The figures on which more than half the nodes kept are off the centre by more than
    `fraction`, each with why: the nodes disagree on that figure, not on every one, so learning
    leaves it out and goes on with the others."""
    off: Counter[str] = Counter()
    for node in pool.nodes.values():
        off.update(figure for o, figure, _ in offsets(pool, node, centres) if o > fraction)
    return {
        figure: (
            f"in round {round_}, {count} of {len(pool.nodes)} nodes were more than {fraction:g} "
            f"off its centre {centres[figure]:g}: the nodes disagree too much on it"
        )
        for figure, count in off.items()
        if count * 2 > len(pool.nodes)
    }


def named_against(pool: Pool, centres: dict[str, float], round_: int) -> list[ExcludedNode]:
    """Each node of `pool` with its figure furthest off `centres` (the other mode's nodes, left
    out of the mode learned)."""
    found = []
    for node in pool.nodes.values():
        offs = offsets(pool, node, centres)
        if offs:
            _, figure, value = max(offs, key=lambda o: o[0])
            found.append(
                ExcludedNode(
                    node=node.node,
                    figure=figure,
                    value=min(value, LARGEST),
                    centre=centres[figure],
                    round=round_,
                )
            )
    return found
