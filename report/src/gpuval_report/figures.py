"""The report's plots, as plotly figures built from a FleetView.

A distribution per figure (one point per unit, hover names it) with the outliers and failing units
labelled on the plot, so a person sees who is slow without hovering, and the baseline's band when
the view was judged against one (from the BelowBaseline floor to the centre plus its spread, the
centre a line); the NCCL sweep as busbw against message size (the fabric's pairs are drawn by
gpuval_report.fabric). Colours follow the verdict; a verdict this version does not know gets a
colour of its own rather than being dropped.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go

from gpuval_api.baseline.bands import Band
from gpuval_api.views import (
    FAILED,
    OUTLIER_RATIO,
    PASSED,
    PENDING,
    RUNNING,
    Figure,
    FigureOutlier,
    FleetView,
    UnitView,
)

KNOWN_COLOURS = {
    PASSED: "#2e7d32",
    FAILED: "#c62828",
    RUNNING: "#1565c0",
    PENDING: "#9e9e9e",
}
OTHER_COLOURS = ("#ef6c00", "#6a1b9a", "#00838f", "#ad1457", "#4e342e")
BAND_COLOUR = "#00897b"  # the baseline's band and centre line
# Beyond this many sweeps the NCCL plot shows the median and the slowest ones, not every node.
MAX_CURVES = 12


def verdict_colour(verdict: str, known: Sequence[str] = ()) -> str:
    """A fixed colour for the known verdicts; unknown ones take the next free colour in order."""
    if verdict in KNOWN_COLOURS:
        return KNOWN_COLOURS[verdict]
    others = [v for v in known if v not in KNOWN_COLOURS]
    index = others.index(verdict) if verdict in others else len(others)
    return OTHER_COLOURS[index % len(OTHER_COLOURS)]


def layout(title: str, height: int) -> dict[str, Any]:
    return {
        "title": {"text": title, "x": 0.01},
        "height": height,
        "margin": {"l": 70, "r": 30, "t": 50, "b": 50},
        "template": "plotly_white",
        "legend": {"orientation": "h", "y": -0.25},
    }


def _jitter(index: int) -> float:
    """A fixed spread within a verdict's row (golden-ratio steps), so a page is reproducible."""
    return ((index * 0.618034) % 1.0 - 0.5) * 0.5


def _labels(
    figure: Figure, measured: Sequence[UnitView], outliers: Sequence[FigureOutlier]
) -> dict[str, str]:
    """Units named on the plot: outliers of this figure, and units a failure of this figure's
    check failed (a node failing its burn is named on the burn plot, not on every plot)."""
    labels = {o.unit: f"{o.unit} ({o.ratio:.0%} of median)" for o in outliers}
    for unit in measured:
        reasons = [f.reason for f in unit.failures if f.check == figure.check]
        if reasons and unit.name not in labels:
            labels[unit.name] = f"{unit.name} ({reasons[0]})"
    return labels


def distribution(view: FleetView, figure: Figure, outliers: Sequence[FigureOutlier]) -> go.Figure:
    """Every unit's value of `figure` as a point, one row per verdict, coloured by it; the median
    and the outlier bound as lines; outliers and units failing this check labelled by name."""
    verdicts = [v for v in view.counts if any(u.verdict == v for u in view.units)]
    measured = [u for u in view.units if figure.key in u.figures]
    rows = [v for v in verdicts if any(u.verdict == v for u in measured)]
    fig = go.Figure()
    position: dict[str, tuple[float, float]] = {}
    for row, verdict in enumerate(rows):
        units = [u for u in measured if u.verdict == verdict]
        for index, unit in enumerate(units):
            position[unit.name] = (unit.figures[figure.key], row + _jitter(index))
        fig.add_trace(
            go.Scatter(
                x=[position[u.name][0] for u in units],
                y=[position[u.name][1] for u in units],
                text=[u.name for u in units],
                mode="markers",
                name=verdict,
                marker={"color": verdict_colour(verdict, verdicts), "size": 10},
                hovertemplate=f"%{{text}}: %{{x:.1f}} {figure.unit}<extra>{verdict}</extra>",
            )
        )
    values = [u.figures[figure.key] for u in measured]
    if values:
        median = statistics.median(values)
        fig.add_vline(x=median, line={"color": "#90a4ae", "width": 1})
        fig.add_vline(
            x=OUTLIER_RATIO * median, line={"color": "#c62828", "dash": "dot", "width": 1}
        )
    axis = f"{figure.unit} (grey: median; dotted red: 90 % of the median"
    baseline = view.baseline
    band = baseline.bands.get(figure.key) if baseline is not None else None
    if baseline is not None and band is not None:
        _band(fig, band, baseline.title)
        axis += f"; band: the {baseline.title}, its floor to its centre"
    for index, (name, text) in enumerate(_labels(figure, measured, outliers).items()):
        unit_verdict = next(u.verdict for u in measured if u.name == name)
        x, y = position[name]
        fig.add_annotation(
            x=x,
            y=y,
            text=text,
            showarrow=True,
            arrowhead=2,
            ax=0,
            ay=-28 - 18 * (index % 3),
            font={"color": verdict_colour(unit_verdict, verdicts)},
        )
    fig.update_layout(**layout(f"{figure.label} per {view.unit_label} ({figure.unit})", 300))
    fig.update_xaxes(title_text=axis + ")")
    fig.update_yaxes(
        tickvals=list(range(len(rows))),
        ticktext=rows,
        range=[-0.7, len(rows) - 0.3],
        zeroline=False,
    )
    return fig


def _band(fig: go.Figure, band: Band, name: str) -> None:
    """The baseline's band, from the BelowBaseline floor to the centre plus its spread (a point
    left of it is below the baseline), and the centre as a line named on the plot."""
    fig.add_vrect(
        x0=band.floor,
        x1=band.centre + band.spread,
        fillcolor=BAND_COLOUR,
        opacity=0.15,
        line_width=0,
        layer="below",
    )
    fig.add_vline(x=band.centre, line={"color": BAND_COLOUR, "width": 2})
    fig.add_annotation(
        x=band.centre,
        y=1.0,
        yref="paper",
        yanchor="bottom",
        text=f"{name} {band.centre:.1f}",
        showarrow=False,
        font={"color": BAND_COLOUR},
    )


def _median_curve(
    curves: Sequence[tuple[str, tuple[tuple[int, float], ...]]],
) -> tuple[tuple[int, float], ...]:
    by_size: dict[int, list[float]] = {}
    for _, curve in curves:
        for size, busbw in curve:
            by_size.setdefault(size, []).append(busbw)
    return tuple((size, statistics.median(values)) for size, values in sorted(by_size.items()))


def nccl_sweep(view: FleetView) -> go.Figure | None:
    """NCCL all-reduce busbw against message size; for a large fleet the median and the units
    slowest at the largest size."""
    curves = list(view.nccl_curves)
    if not curves:
        return None
    shown = curves
    if len(curves) > MAX_CURVES:
        slowest = sorted(curves, key=lambda item: item[1][-1][1])[: MAX_CURVES - 1]
        shown = [(f"median of {len(curves)}", _median_curve(curves)), *slowest]
    units = {u.name: u for u in view.units}
    verdicts = list(view.counts)
    fig = go.Figure()
    for name, curve in shown:
        unit: UnitView | None = units.get(name)
        colour = verdict_colour(unit.verdict, verdicts) if unit else "#37474f"
        fig.add_trace(
            go.Scatter(
                x=[size for size, _ in curve],
                y=[busbw for _, busbw in curve],
                mode="lines+markers",
                name=name,
                line={"color": colour},
                hovertemplate=f"{name}: %{{y:.1f}} GB/s at %{{x:.3s}}B<extra></extra>",
            )
        )
    fig.update_layout(**layout("NCCL all-reduce bus bandwidth against message size", 380))
    fig.update_xaxes(type="log", title_text="message size (bytes)")
    fig.update_yaxes(title_text="busbw (GB/s)", rangemode="tozero")
    return fig


def figure_html(fig: go.Figure, div_id: str) -> str:
    """One figure as a div and its script; plotly.js itself is in the page head once."""
    html = fig.to_html(
        include_plotlyjs=False,
        full_html=False,
        div_id=div_id,
        config={"displaylogo": False, "responsive": True},
    )
    return str(html)
