"""Pure: a baseline as the pages draw it. A page's figures are the report summary's (the worst
GPU's burn in the first precision, copies, peer, NCCL busbw at the largest size); each gets the
band of the baseline figure it is: the centre, the spread and the BelowBaseline limit (a floor,
or a ceiling for a figure where lower is better)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpuval_api import figures
from gpuval_api.baseline.rules import source_text
from gpuval_api.baselinecomparison import BaselineComparison, Match
from gpuval_api.baselinemodel import GpuBaselineSpec
from gpuval_api.figures import Scope


@dataclass(frozen=True, slots=True)
class Band:
    """One figure's baseline on a page."""

    centre: float
    spread: float
    limit: float  # the floor, or the ceiling where lower is better
    lower: bool = False  # lower is better

    def ratio(self, value: float) -> float:
        """How `value` stands to the centre, below 1 worse (as the comparison's ratio)."""
        if not self.lower:
            return value / self.centre
        return self.centre / value if value > 0 else 1.0

    def beyond(self, value: float) -> bool:
        """Whether `value` is worse than the limit."""
        return value > self.limit if self.lower else value < self.limit

    @property
    def edges(self) -> tuple[float, float]:
        """The band as drawn: from the limit to the good side of the spread."""
        if self.lower:
            return (max(0.0, self.centre - self.spread), self.limit)
        return (self.limit, self.centre + self.spread)


@dataclass(frozen=True, slots=True)
class BaselineView:
    """The baseline a page was judged against (or why there was none)."""

    name: str = ""
    label: str = ""
    source: str = ""
    fraction: float = 0.0
    note: str = ""
    bands: Mapping[str, Band] = field(default_factory=dict)  # page figure key -> band

    @property
    def title(self) -> str:
        """'H200 baseline'."""
        return f"{self.label or self.name} baseline"

    def phrase(self, ratio: float) -> str:
        """'0.98 of the H200 baseline'."""
        return f"{ratio:.2f} of the {self.title}"


def page_figures(precision: str, nccl_bytes: int | None) -> dict[str, str]:
    """Page figure key (status.summary's) -> the baseline's figure name, for the registry's page
    figures that have a baseline (the burn in `precision`, NCCL at `nccl_bytes`)."""
    found = {}
    for figure in figures.page_figures():
        name = figure.baseline_name(precision, nccl_bytes)
        if name is not None:
            found[figure.key] = name
    return found


def of_comparison(
    comparison: BaselineComparison, precision: str, nccl_bytes: int | None
) -> BaselineView:
    """One machine's page: the bands of the figures its comparison compared."""
    if comparison.name is None:
        return BaselineView(fraction=comparison.fraction, note=comparison.note)
    compared = {f.figure: f for f in comparison.figures}
    bands = {}
    for key, name in page_figures(precision, nccl_bytes).items():
        entry = compared.get(name)
        if entry is None or entry.centre is None:
            continue
        lower = figures.of_baseline(name).lower
        limit = entry.ceiling if lower else entry.floor
        if limit is not None:
            bands[key] = Band(entry.centre, entry.spread or 0.0, limit, lower)
    return BaselineView(
        comparison.name, comparison.label, comparison.source, comparison.fraction, "", bands
    )


def of_spec(
    name: str,
    spec: GpuBaselineSpec,
    *,
    fraction: float,
    precision: str,
    nccl_bytes: int | None,
    match: Match = Match.EXACT,
) -> BaselineView:
    """A fleet's page: the bands of a GpuBaseline (per-GPU figures only for a GPU-only match)."""
    bands = {}
    for key, figure in page_figures(precision, nccl_bytes).items():
        entry = spec.figure(figure)
        if entry is None or (
            match is Match.GPU and figures.baseline_scope(figure) is not Scope.GPU
        ):
            continue
        figure_of = figures.of_baseline(figure)
        limit = figure_of.limit(entry.centre, fraction)
        bands[key] = Band(entry.centre, entry.spread, limit, figure_of.lower)
    label = spec.key.label
    return BaselineView(name, label, source_text(spec), fraction, "", bands)
