"""Pure: a baseline learned from a run's passing nodes, SuperBench's way (its data diagnosis):
compute each figure's centre over the nodes kept, leave out every node with a figure off its
centre by more than the fraction, compute again, until no node is left out. A failed node is
never used, and every node left out is named with the figure that broke the rule.

The centre is the median of every sample (GPU, GPU pair, node pair) of the nodes kept, and the
spread 1.4826 x their median absolute deviation, both robust to the outliers being looked for.

A fleet of two kinds: the nodes left out are learned the same way on their own, and where they
agree (a second cluster of at least BIMODAL_SHARE of the nodes offered, two or more) the fleet is
bimodal. Which mode is kept first follows the median, so with most nodes slow it is the slow one:
learning then never chooses silently. It learns the better mode (better by more than the fraction
on more judged figures than it is worse), leaves the other out (naming its nodes) and says so
(`Learned.bimodal`); where neither mode is better, or the better one has fewer than minNodes
nodes, it learns nothing and says why. A platform engineer never gets the slow mode as the
baseline without a word.
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
from gpuval_api.baselinemodel import (
    MAX_EXCLUDED,
    MAX_FIGURES,
    BaselineKey,
    BaselineSource,
    ExcludedNode,
    FigureBaseline,
    GpuBaselineSpec,
    SourceKind,
    StackVersions,
)
from gpuval_api.checks import MAX_FIGURE
from gpuval_api.figures import Scope

MAD_TO_SIGMA = 1.4826  # the MAD of a normal distribution is 0.6745 sigma
MAX_ROUNDS = 20
# The nodes left out are a second mode, not a few slow nodes, when they agree among themselves and
# are at least this share of the nodes offered: 3 slow nodes of 50 are outliers, 40 % is a kind.
BIMODAL_SHARE = 0.25
# Figures named per mode in what is said of a bimodal fleet.
MODE_FIGURES = 3
LEARNED_NOTHING = "learned nothing"


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
    where a `Sample` each took 13 KiB (docs/operator.md, "Baselines and history"). Which GPU a
    value came from is not kept: learning does not use it.
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


@dataclass(frozen=True, slots=True)
class Mode:
    """One of two groups of a bimodal fleet: its nodes and its judged figures' centres."""

    nodes: tuple[str, ...]
    centres: dict[str, float]


@dataclass(frozen=True, slots=True)
class Learned:
    """The outcome for one key: the baseline (None when too few nodes agree, `problem` says
    why), the nodes kept, the passing nodes left out and the failed nodes never used; for a
    bimodal fleet its two modes (the one learned, or the first kept, first) and what was said."""

    key: BaselineKey
    spec: GpuBaselineSpec | None
    kept: tuple[str, ...]
    excluded: tuple[ExcludedNode, ...]
    failed: tuple[str, ...]
    problem: str = ""
    rounds: int = 0
    modes: tuple[Mode, ...] = ()
    bimodal: str = ""


def robust(values: Sequence[float]) -> tuple[float, float]:
    """(median, 1.4826 x median absolute deviation)."""
    centre = statistics.median(values)
    return centre, MAD_TO_SIGMA * statistics.median(abs(v - centre) for v in values)


@dataclass
class _Pool:
    """The figures of the nodes still kept, each in the figure's commonest settings."""

    nodes: dict[str, NodeFigures]
    settings: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        counts: dict[str, Counter[str]] = {}
        for node in self.nodes.values():
            for f in node.figures:
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


def _offs(
    pool: _Pool, node: NodeFigures, centres: dict[str, float]
) -> list[tuple[float, str, float]]:
    """How far off its centre each figure of the node is, as (off, figure, value): its furthest
    value, but for a fabric pair its nearest one (a node slow in one pair and fine in another is
    not the slow one; the fabric names slow links itself)."""
    found: dict[str, tuple[float, str, float]] = {}
    for figure, values, _ in pool.counted(node):
        centre = centres.get(figure)
        if not centre:
            continue
        nearest = figures.baseline_scope(figure) is Scope.FABRIC
        for value in values:
            off = abs(value / centre - 1)
            have = found.get(figure)
            if have is None or (off < have[0] if nearest else off > have[0]):
                found[figure] = (off, figure, value)
    return list(found.values())


def _breaking(
    pool: _Pool, centres: dict[str, float], fraction: float, round_: int
) -> list[ExcludedNode]:
    """Per node kept, its figure furthest off its centre when that is more than `fraction`."""
    found = []
    for node in pool.nodes.values():
        offs = [o for o in _offs(pool, node, centres) if o[0] > fraction]
        if offs:
            _, figure, value = max(offs, key=lambda o: o[0])
            found.append(
                ExcludedNode(
                    node=node.node,
                    figure=figure,
                    value=min(value, MAX_FIGURE),
                    centre=centres[figure],
                    round=round_,
                )
            )
    return found


def _figures(pool: _Pool) -> list[FigureBaseline]:
    out = []
    for figure, (values, names) in pool.by_figure().items():
        centre, spread = robust(values)
        out.append(
            FigureBaseline(
                figure=figure,
                unit=figures.baseline_unit(figure),
                centre=round(centre, 3),
                spread=round(spread, 3),
                nodes=len(names),
                samples=len(values),
                measured_with=pool.settings[figure],
            )
        )
    return sorted(out, key=lambda f: figures.baseline_order(f.figure))[:MAX_FIGURES]


@dataclass
class _Settled:
    """A pool after the rounds: the nodes kept, those left out, the rounds, why it failed."""

    pool: _Pool
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


def _settle(pool: _Pool, fraction: float) -> _Settled:
    """Leave out the nodes off a centre by more than `fraction`, round by round, until none is
    (see the module doc)."""
    excluded: list[ExcludedNode] = []
    rounds = 0
    for rounds in range(1, MAX_ROUNDS + 1):
        centres = {fig: robust(values)[0] for fig, (values, _) in pool.by_figure().items()}
        breaking = _breaking(pool, centres, fraction, rounds)
        if not breaking:
            return _Settled(pool, excluded, rounds)
        if len(breaking) * 2 > len(pool.nodes):
            problem = (
                f"in round {rounds}, {len(breaking)} of {len(pool.nodes)} nodes were more than "
                f"{fraction:g} off a centre: the nodes disagree too much for one baseline"
            )
            return _Settled(pool, excluded, rounds, problem)
        excluded.extend(breaking)
        pool = _Pool({n: f for n, f in pool.nodes.items() if n not in {e.node for e in breaking}})
    return _Settled(
        pool, excluded, rounds, f"the nodes left out did not settle in {MAX_ROUNDS} rounds"
    )


def _better(first: dict[str, float], second: dict[str, float], fraction: float) -> int:
    """1 when `first` is better than `second` by more than `fraction` on more judged figures than
    it is worse, -1 the other way round, 0 when neither is."""
    score = 0
    for name in first.keys() & second.keys():
        ratio = figures.of_baseline(name).ratio(first[name], second[name])
        score += (ratio > 1 + fraction) - (ratio < 1 - fraction)
    return (score > 0) - (score < 0)


def _modes_text(key: BaselineKey, first: Mode, second: Mode, chosen: bool) -> str:
    """What is said of a bimodal fleet: both modes' nodes and the figures on which they differ
    most, and what was learned (`chosen`: the first mode, the better)."""
    names = sorted(
        first.centres.keys() & second.centres.keys(),
        key=lambda n: abs(math.log(second.centres[n] / first.centres[n])),
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


def _second_mode(
    settled: _Settled, everyone: dict[str, NodeFigures], fraction: float, offered: int
) -> _Settled | None:
    """The nodes left out learned on their own, when they form a second mode (see the module
    doc); None when they are a few outliers, or disagree among themselves."""
    left = {e.node for e in settled.excluded}
    if settled.problem or len(left) < max(2, BIMODAL_SHARE * offered):
        return None
    second = _settle(_Pool({n: everyone[n] for n in left}), fraction)
    if second.problem or len(second.pool.nodes) < max(2, BIMODAL_SHARE * offered):
        return None
    return second


def _named_against(pool: _Pool, centres: dict[str, float], round_: int) -> list[ExcludedNode]:
    """Each node of `pool` with its figure furthest off `centres` (the other mode's nodes, left
    out of the mode learned)."""
    found = []
    for node in pool.nodes.values():
        offs = _offs(pool, node, centres)
        if offs:
            _, figure, value = max(offs, key=lambda o: o[0])
            found.append(
                ExcludedNode(
                    node=node.node,
                    figure=figure,
                    value=min(value, MAX_FIGURE),
                    centre=centres[figure],
                    round=round_,
                )
            )
    return found


def learn(
    nodes: Iterable[NodeFigures],
    key: BaselineKey,
    *,
    fraction: float,
    min_nodes: int,
    source: BaselineSource | None = None,
    versions: StackVersions | None = None,
) -> Learned:
    """Learn `key`'s baseline from the nodes of that key that passed (see the module doc)."""
    mine = [n for n in nodes if n.key == key]
    failed = tuple(sorted(n.node for n in mine if not n.passed))
    everyone = {n.node: n for n in mine if n.passed}
    offered = len(everyone)
    settled = _settle(_Pool(dict(everyone)), fraction)
    pool, excluded, rounds, problem = (
        settled.pool,
        settled.excluded,
        settled.rounds,
        settled.problem,
    )
    modes: tuple[Mode, ...] = ()
    bimodal = ""
    second = _second_mode(settled, everyone, fraction, offered)
    if second is not None:
        first_mode = Mode(tuple(sorted(pool.nodes)), settled.centres())
        other = Mode(tuple(sorted(second.pool.nodes)), second.centres())
        better = _better(other.centres, first_mode.centres, fraction)
        if better > 0:
            # The mode the median kept is the worse one: learn the other, name these.
            rest = _Pool({n: everyone[n] for n in everyone if n not in second.pool.nodes})
            excluded = (
                _named_against(rest, second.centres(judged=False), rounds + 1) + second.excluded
            )
            pool, rounds = second.pool, rounds + second.rounds
            modes = (other, first_mode)
        else:
            modes = (first_mode, other)
        if better == 0:
            problem = "neither mode is better on most figures"
        elif len(pool.nodes) < min_nodes:
            problem = (
                f"the better mode has {len(pool.nodes)} nodes; baseline.minNodes is {min_nodes}"
            )
        bimodal = _modes_text(key, modes[0], modes[1], chosen=not problem)
        if problem:
            problem = f"{bimodal} ({problem})"
    if not problem and len(pool.nodes) < min_nodes:
        problem = (
            f"{len(pool.nodes)} of {offered} passing nodes agree within {fraction:g} of the "
            f"centres; baseline.minNodes is {min_nodes}"
        )
    kept = tuple(sorted(pool.nodes))
    spec = None
    learned_figures = _figures(pool) if not problem else []
    wide = [
        f
        for f in learned_figures
        if figures.baseline_judged(f.figure) and f.spread > fraction * f.centre
    ]
    if wide:
        problem = (
            f"the spread of {wide[0].figure} ({wide[0].spread:g} around {wide[0].centre:g}) is "
            f"more than {fraction:g} of its centre: the nodes disagree too much for one baseline"
        )
        learned_figures = []
    if learned_figures:
        base = source or BaselineSource(kind=SourceKind.LEARNED)
        description = base.description + (f"; {bimodal}" if bimodal else "")
        spec = GpuBaselineSpec(
            key=key,
            figures=learned_figures,
            source=base.model_copy(
                update={
                    "description": description[:1024],
                    "fraction": fraction,
                    "nodes_offered": offered,
                    "excluded": excluded[:MAX_EXCLUDED],
                    "excluded_omitted": max(0, len(excluded) - MAX_EXCLUDED),
                }
            ),
            learned_with=versions or StackVersions(),
        )
    elif not problem:
        problem = "the nodes measured no figure a baseline holds"
    return Learned(key, spec, kept, tuple(excluded), failed, problem, rounds, modes, bimodal)


def keys(nodes: Iterable[NodeFigures]) -> list[BaselineKey]:
    """The distinct keys of the nodes, commonest first."""
    counts = Counter(n.key.model_dump_json() for n in nodes if n.key is not None)
    return [BaselineKey.model_validate_json(k) for k, _ in counts.most_common()]
