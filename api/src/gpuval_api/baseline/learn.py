"""Pure: a baseline learned from a run's passing nodes, SuperBench's way (its data diagnosis):
compute each figure's centre over the nodes kept, leave out every node with a figure off its
centre by more than the fraction, compute again, until no node is left out. A failed node is
never used, and every node left out is named with the figure that broke the rule.

The centre is the median of every sample (GPU, GPU pair, node pair) of the nodes kept, and the
spread 1.4826 x their median absolute deviation, both robust to the outliers being looked for.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from gpuval_api.baseline import figures
from gpuval_api.baseline.figures import Sample, Scope
from gpuval_api.baseline.model import (
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

MAD_TO_SIGMA = 1.4826  # the MAD of a normal distribution is 0.6745 sigma
MAX_ROUNDS = 20


@dataclass(frozen=True, slots=True)
class NodeFigures:
    """What learning reads of one node: its key, whether it passed, its samples."""

    node: str
    key: BaselineKey | None
    passed: bool
    samples: tuple[Sample, ...]


@dataclass(frozen=True, slots=True)
class Learned:
    """The outcome for one key: the baseline (None when too few nodes agree, `problem` says
    why), the nodes kept, the passing nodes left out and the failed nodes never used."""

    key: BaselineKey
    spec: GpuBaselineSpec | None
    kept: tuple[str, ...]
    excluded: tuple[ExcludedNode, ...]
    failed: tuple[str, ...]
    problem: str = ""
    rounds: int = 0


def robust(values: Sequence[float]) -> tuple[float, float]:
    """(median, 1.4826 x median absolute deviation)."""
    centre = statistics.median(values)
    return centre, MAD_TO_SIGMA * statistics.median(abs(v - centre) for v in values)


@dataclass
class _Pool:
    """The samples of the nodes still kept, per figure, in the figure's commonest settings."""

    nodes: dict[str, NodeFigures]
    settings: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        counts: dict[str, Counter[str]] = {}
        for node in self.nodes.values():
            for s in node.samples:
                counts.setdefault(s.figure, Counter())[s.measured_with] += 1
        self.settings = {fig: c.most_common(1)[0][0] for fig, c in counts.items()}

    def samples(self, node: NodeFigures) -> Iterable[Sample]:
        """A node's samples that count: the figure's settings, and for a fabric pair a partner
        still kept (a slow partner must not drag a good node out)."""
        for s in node.samples:
            if s.measured_with != self.settings.get(s.figure):
                continue
            if s.peer_node is not None and s.peer_node not in self.nodes:
                continue
            yield s

    def by_figure(self) -> dict[str, tuple[list[float], set[str]]]:
        """Figure -> (its values, the nodes they came from); a fabric pair, which both its
        nodes report, counts once."""
        found: dict[str, tuple[list[float], set[str]]] = {}
        pairs: set[tuple[str, str]] = set()
        for node in self.nodes.values():
            for s in self.samples(node):
                values, names = found.setdefault(s.figure, ([], set()))
                names.add(node.node)
                if s.peer_node is not None:
                    pair = (min(node.node, s.peer_node), max(node.node, s.peer_node))
                    if pair in pairs:
                        continue
                    pairs.add(pair)
                values.append(s.value)
        return found


def _offs(pool: _Pool, node: NodeFigures, centres: dict[str, float]) -> list[tuple[float, Sample]]:
    """How far off its centre each figure of the node is: its furthest sample, but for a fabric
    pair its nearest one (a node slow in one pair and fine in another is not the slow one; the
    fabric names slow links itself)."""
    by_figure: dict[str, list[tuple[float, Sample]]] = {}
    for s in pool.samples(node):
        centre = centres.get(s.figure)
        if centre:
            by_figure.setdefault(s.figure, []).append((abs(s.value / centre - 1), s))
    pick = {Scope.FABRIC: min}
    return [
        pick.get(figures.scope(figure), max)(offs, key=lambda o: o[0])
        for figure, offs in by_figure.items()
    ]


def _breaking(
    pool: _Pool, centres: dict[str, float], fraction: float, round_: int
) -> list[ExcludedNode]:
    """Per node kept, its figure furthest off its centre when that is more than `fraction`."""
    found = []
    for node in pool.nodes.values():
        offs = [o for o in _offs(pool, node, centres) if o[0] > fraction]
        worst = max(offs, key=lambda o: o[0]) if offs else None
        if worst is not None:
            s = worst[1]
            found.append(
                ExcludedNode(
                    node=node.node,
                    figure=s.figure,
                    value=min(s.value, MAX_FIGURE),
                    centre=centres[s.figure],
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
                unit=figures.unit(figure),
                centre=round(centre, 3),
                spread=round(spread, 3),
                nodes=len(names),
                samples=len(values),
                measured_with=pool.settings[figure],
            )
        )
    return sorted(out, key=lambda f: figures.order(f.figure))[:MAX_FIGURES]


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
    pool = _Pool({n.node: n for n in mine if n.passed})
    offered = len(pool.nodes)
    excluded: list[ExcludedNode] = []
    problem = ""
    rounds = 0
    for rounds in range(1, MAX_ROUNDS + 1):
        centres = {fig: robust(values)[0] for fig, (values, _) in pool.by_figure().items()}
        breaking = _breaking(pool, centres, fraction, rounds)
        if not breaking:
            break
        if len(breaking) * 2 > len(pool.nodes):
            problem = (
                f"in round {rounds}, {len(breaking)} of {len(pool.nodes)} nodes were more than "
                f"{fraction:g} off a centre: the nodes disagree too much for one baseline"
            )
            break
        excluded.extend(breaking)
        pool = _Pool({n: f for n, f in pool.nodes.items() if n not in {e.node for e in breaking}})
    else:
        problem = f"the nodes left out did not settle in {MAX_ROUNDS} rounds"
    if not problem and len(pool.nodes) < min_nodes:
        problem = (
            f"{len(pool.nodes)} of {offered} passing nodes agree within {fraction:g} of the "
            f"centres; baseline.minNodes is {min_nodes}"
        )
    kept = tuple(sorted(pool.nodes))
    spec = None
    learned_figures = _figures(pool) if not problem else []
    wide = [
        f for f in learned_figures if figures.judged(f.figure) and f.spread > fraction * f.centre
    ]
    if wide:
        problem = (
            f"the spread of {wide[0].figure} ({wide[0].spread:g} around {wide[0].centre:g}) is "
            f"more than {fraction:g} of its centre: the nodes disagree too much for one baseline"
        )
        learned_figures = []
    if learned_figures:
        base = source or BaselineSource(kind=SourceKind.LEARNED)
        spec = GpuBaselineSpec(
            key=key,
            figures=learned_figures,
            source=base.model_copy(
                update={
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
    return Learned(key, spec, kept, tuple(excluded), failed, problem, rounds)


def keys(nodes: Iterable[NodeFigures]) -> list[BaselineKey]:
    """The distinct keys of the nodes, commonest first."""
    counts = Counter(n.key.model_dump_json() for n in nodes if n.key is not None)
    return [BaselineKey.model_validate_json(k) for k, _ in counts.most_common()]
