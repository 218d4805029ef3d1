"""Pure: the baseline rules. A node's figures against the baseline of its GPU stack
(BelowBaseline: below (1 - fraction) x the centre; for a lower-is-better figure above
(1 + fraction) x the centre plus its tolerance), and a run whose nodes are mostly below on
the same figure (systemic: the stack, not the nodes). Nothing here calls the API; the agent
(`gpuval-agent run --baseline`) and the operator call the same functions."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gpuval_api import figures
from gpuval_api.baseline.samples import Sample
from gpuval_api.baselinecomparison import BaselineComparison, FigureRatio, Match
from gpuval_api.baselinemodel import BaselineKey, GpuBaselineSpec
from gpuval_api.figures import FABRIC_PAIR, Scope

# A named baseline: (GpuBaseline name, spec).
Candidate = tuple[str, GpuBaselineSpec]


def source_text(spec: GpuBaselineSpec) -> str:
    source = spec.source
    return f"{source.kind}: {source.description}" if source.description else str(source.kind)


def choose(key: BaselineKey, candidates: Sequence[Candidate]) -> tuple[Candidate, Match] | None:
    """The first candidate with the node's key, else the first with its GPU (model, power limit,
    link; another GPU count): the order of `candidates` is the order of preference."""
    exact = next((c for c in candidates if c[1].key == key), None)
    if exact is not None:
        return exact, Match.EXACT
    same_gpu = next((c for c in candidates if c[1].key.same_gpu(key)), None)
    return (same_gpu, Match.GPU) if same_gpu is not None else None


@dataclass(frozen=True, slots=True)
class Below:
    """One value worse than the baseline's limit (below its floor; above its ceiling where lower
    is better): what a BelowBaseline finding says."""

    figure: str
    value: float
    centre: float
    fraction: float
    label: str
    sample: Sample

    @property
    def check(self) -> str:
        return figures.baseline_check(self.figure)

    @property
    def message(self) -> str:
        where = self.sample.where()
        figure = figures.of_baseline(self.figure)
        unit = figure.unit
        said = f"{where + ': ' if where else ''}{self.figure} {self.value:.1f} {unit} is "
        if not figure.lower:
            return (
                f"{said}{self.value / self.centre:.2f} of the {self.label} baseline "
                f"{self.centre:.1f} (below {1 - self.fraction:.2f} of it: fraction "
                f"{self.fraction:g})"
            )
        limit = figure.limit(self.centre, self.fraction)
        tolerance = f" + {figure.tolerance:g} {unit}" if figure.tolerance else ""
        return (
            f"{said}above the {self.label} baseline's ceiling {limit:.1f} (lower is better: at "
            f"most {1 + self.fraction:.2f} of its centre {self.centre:.1f}{tolerance}; fraction "
            f"{self.fraction:g})"
        )


def _figure(
    name: str, samples: list[Sample], spec: GpuBaselineSpec, match: Match, fraction: float
) -> tuple[FigureRatio, list[Below]]:
    figure = figures.of_baseline(name)
    worst = (
        max(samples, key=lambda s: s.value) if figure.lower else min(samples, key=lambda s: s.value)
    )
    entry = FigureRatio(
        figure=name,
        unit=figure.unit,
        better=figure.better,
        value=round(worst.value, 3),
        where=worst.where(),
    )
    base = spec.figure(name)
    if base is None:
        return entry.model_copy(update={"note": "the baseline has no such figure"}), []
    scope = figure.scope
    if match is Match.GPU and scope is not Scope.GPU:
        note = f"the baseline is for {spec.key.gpu_count} GPUs: per-GPU figures only"
        return entry.model_copy(update={"note": note}), []
    measured = {s.measured_with for s in samples}
    if measured != {base.measured_with}:
        mine = ", ".join(sorted(measured))
        note = f"measured with {mine}; the baseline with {base.measured_with}"
        return entry.model_copy(update={"note": note}), []
    limit = figure.limit(base.centre, fraction)
    judged = figures.baseline_judged(name)
    below = [s for s in samples if figure.beyond(s.value, limit)] if judged else []
    label = spec.key.label
    update = {
        "centre": base.centre,
        "spread": base.spread,
        "ceiling" if figure.lower else "floor": round(limit, 3),
        "ratio": round(figure.ratio(worst.value, base.centre), 4),
        "judged": judged,
        "below": len(below),
        "note": "" if judged else "kept for the picture; NCCL is judged from 1 GiB up",
    }
    found = [Below(name, s.value, base.centre, fraction, label, s) for s in below]
    return entry.model_copy(update=update), found


def compare(
    samples: Sequence[Sample],
    node_key: BaselineKey | None,
    candidates: Sequence[Candidate],
    fraction: float,
    why_no_key: str = "",
) -> tuple[BaselineComparison, list[Below]]:
    """The node's figures against the baseline that matches its key, and every value below."""
    if node_key is None:
        note = f"no baseline applies: {why_no_key or 'the node has no key'}"
        return BaselineComparison(fraction=fraction, note=note), []
    chosen = choose(node_key, candidates)
    if chosen is None:
        known = "; ".join(spec.key.describe() for _, spec in candidates) or "none"
        note = f"no baseline for {node_key.describe()} (baselines: {known})"
        return BaselineComparison(node_key=node_key, fraction=fraction, note=note), []
    (name, spec), match = chosen
    by_figure: dict[str, list[Sample]] = {}
    for sample in samples:
        by_figure.setdefault(sample.figure, []).append(sample)
    ratios: list[FigureRatio] = []
    below: list[Below] = []
    for figure in sorted(by_figure, key=figures.baseline_order):
        entry, found = _figure(figure, by_figure[figure], spec, match, fraction)
        ratios.append(entry)
        below.extend(found)
    comparison = BaselineComparison(
        name=name,
        label=spec.key.label,
        key=spec.key,
        node_key=node_key,
        match=match,
        source=source_text(spec),
        fraction=fraction,
        figures=ratios,
    )
    return comparison, below


@dataclass(frozen=True, slots=True)
class SystemicBelowBaseline:
    """One figure on which most judged nodes of a run are below their baseline."""

    figure: str
    below: tuple[str, ...]
    judged: int
    median_ratio: float

    @property
    def message(self) -> str:
        lower = figures.of_baseline(self.figure).lower
        side = "above their baseline's ceiling" if lower else "below their baseline"
        stand = "ratio" if lower else "of it"
        return (
            f"{len(self.below)} of {self.judged} judged nodes are {side} on "
            f"{self.figure} (median {self.median_ratio:.2f} {stand}): a fleet-wide cause (driver, "
            "firmware, settings), not the nodes"
        )


# One node's judged figure: (node, figure, ratio to the centre, below the floor).
JudgedFigure = tuple[str, str, float, bool]


def systemic_below(
    comparisons: Iterable[tuple[str, BaselineComparison | None]],
    systemic_fraction: float,
    min_nodes: int = 3,
) -> list[SystemicBelowBaseline]:
    """The figures on which more than `systemic_fraction` of the judged nodes (at least
    `min_nodes` of them) are below their baseline, in reading order."""
    return systemic_below_of(
        (
            (node, entry.figure, entry.ratio, entry.below > 0)
            for node, comparison in comparisons
            for entry in (comparison.figures if comparison is not None else [])
            if entry.judged and entry.ratio is not None
        ),
        systemic_fraction,
        min_nodes,
    )


def systemic_below_of(
    judged: Iterable[JudgedFigure], systemic_fraction: float, min_nodes: int = 3
) -> list[SystemicBelowBaseline]:
    """`systemic_below` over each node's judged figures as plain tuples (what the operator keeps of
    a comparison: it holds no result documents)."""
    by_figure: dict[str, list[tuple[str, float, bool]]] = {}
    for node, figure, ratio, below in judged:
        by_figure.setdefault(figure, []).append((node, ratio, below))
    found = []
    for figure in sorted(by_figure, key=figures.baseline_order):
        entries = by_figure[figure]
        below_nodes = tuple(sorted(node for node, _, below in entries if below))
        if len(entries) >= min_nodes and len(below_nodes) > systemic_fraction * len(entries):
            ratio = statistics.median(ratio for _, ratio, _ in entries)
            found.append(SystemicBelowBaseline(figure, below_nodes, len(entries), ratio))
    return found


def fabric_below(samples: Sequence[Sample], spec: GpuBaselineSpec, fraction: float) -> Below | None:
    """A node's fabric pairs against the baseline's `fabric.pair`: below only when its best pair
    is (one slow pair is a link, which the fabric phase names; a slow node is slow with every
    partner). Pairs measured otherwise (size, transport) do not compare."""
    base = spec.figure(FABRIC_PAIR.baseline)
    mine = [
        s
        for s in samples
        if s.figure == FABRIC_PAIR.baseline
        and base is not None
        and s.measured_with == base.measured_with
    ]
    if base is None or not mine:
        return None
    best = max(mine, key=lambda s: s.value)
    if best.value >= (1 - fraction) * base.centre:
        return None
    return Below(FABRIC_PAIR.baseline, best.value, base.centre, fraction, spec.key.label, best)
