"""The page's baseline and history sections.

Baseline: which GpuBaseline the units were judged against and where it came from, and per figure
the worst unit's value as a share of it ("0.98 of the H200 baseline") with how many units fell
below its floor; the bands themselves are drawn on the figures' plots (gpuval_report.figures).
History: a node's key figures over its recent runs as small trend lines (inline SVG, no script),
the nodes that fell most against their own past first.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from html import escape

from gpuval_api.views import FIGURES, FleetView, UnitView
from gpuval_report.tables import table

# Beyond this many nodes with a history, the trend table shows those that fell most.
MAX_TRENDS = 40
_WIDTH, _HEIGHT, _PAD = 100, 24, 3


def baseline_section(view: FleetView) -> str:
    """The section's HTML; "" when the view was not judged against a baseline."""
    baseline = view.baseline
    if baseline is None:
        return ""
    if not baseline.bands:
        note = baseline.note or "the baseline holds none of the figures measured"
        return f'<h2>Baseline</h2><div id="baseline"><p>No baseline: {escape(note)}</p></div>'
    rows: list[list[str]] = []
    bad: list[bool] = []
    for figure in FIGURES:
        band = baseline.bands.get(figure.key)
        measured = [u for u in view.units if figure.key in u.figures]
        if band is None or not measured:
            continue
        pick = max if figure.lower else min
        worst = pick(measured, key=lambda u: u.figures[figure.key])
        value = worst.figures[figure.key]
        below = sum(1 for u in measured if band.beyond(u.figures[figure.key]))
        rows.append(
            [
                escape(figure.label),
                escape(worst.name),
                f"{value:.1f} {escape(figure.unit)}",
                f"{band.centre:.1f} ± {band.spread:.1f}",
                f"{'at most' if band.lower else 'at least'} {band.limit:.1f}",
                escape(baseline.phrase(band.ratio(value))),
                f"{below} of {len(measured)}",
            ]
        )
        bad.append(below > 0)
    headers = ["figure", f"worst {view.unit_label}", "value", "baseline", "limit", "ratio", "worse"]
    intro = (
        f"<p>Judged against <b>{escape(baseline.name)}</b> ({escape(baseline.source)}): "
        f"BelowBaseline below {1 - baseline.fraction:.2f} of a figure's centre (above "
        f"{1 + baseline.fraction:.2f} of it where lower is better).</p>"
    )
    return f'<h2>Baseline</h2><div id="baseline">{intro}{table(headers, rows, bad)}</div>'


def sparkline(points: Sequence[tuple[str, float]], unit: str) -> str:
    """An inline SVG trend line of (run, value), oldest first; the last point marked."""
    values = [v for _, v in points]
    low, high = min(values), max(values)
    step = (_WIDTH - 2 * _PAD) / max(len(values) - 1, 1)

    def height(v: float) -> float:
        share = (v - low) / (high - low) if high > low else 0.5  # a flat line sits mid-way
        return _HEIGHT - _PAD - share * (_HEIGHT - 2 * _PAD)

    xy = [(_PAD + i * step, height(v)) for i, v in enumerate(values)]
    line = " ".join(f"{x:.1f},{y:.1f}" for x, y in xy)
    title = "; ".join(f"{run}: {v:.1f} {unit}" for run, v in points)
    x, y = xy[-1]
    return (
        f'<svg class="trend" width="{_WIDTH}" height="{_HEIGHT}" '
        f'viewBox="0 0 {_WIDTH} {_HEIGHT}"><title>{escape(title)}</title>'
        f'<polyline points="{line}" fill="none" stroke="#455a64" stroke-width="1.5"/>'
        f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5" fill="#00897b"/></svg>'
    )


def _fall(unit: UnitView) -> float:
    """The lowest ratio of a figure's last value to the median of its earlier ones."""
    ratios = [1.0]
    for figure in FIGURES:
        series = [f[figure.key] for _, f in unit.history if figure.key in f]
        if len(series) >= 2 and statistics.median(series[:-1]) > 0:
            ratios.append(series[-1] / statistics.median(series[:-1]))
    return min(ratios)


def history_section(view: FleetView) -> str:
    """The trend of every node that has a history (at most MAX_TRENDS, those that fell most
    first); "" when none has."""
    units = sorted((u for u in view.units if len(u.history) >= 2), key=_fall)
    restarted = _restarted(view)
    if not units:
        return f'<h2>History</h2><div id="history">{restarted}</div>' if restarted else ""
    shown = [f for f in FIGURES if any(f.key in h for u in units for _, h in u.history)]
    rows = []
    for unit in units[:MAX_TRENDS]:
        cells = [escape(unit.name), f"{_fall(unit):.2f}"]
        for figure in shown:
            points = [(run, f[figure.key]) for run, f in unit.history if figure.key in f]
            if len(points) < 2:
                cells.append("")
                continue
            cells.append(
                f'<span class="trend">{sparkline(points, figure.unit)} {points[-1][1]:.1f}</span>'
            )
        rows.append(cells)
    headers = [view.unit_label, "fall"] + [f"{f.label} ({f.unit})" for f in shown]
    intro = (
        f"<p>Each {view.unit_label}'s figures over its recent runs, this run last; fall: the "
        "lowest ratio of a figure's last value to the median of its earlier runs.</p>"
    )
    more = len(units) - MAX_TRENDS
    tail = f"<p>{more} more nodes with a history are not shown.</p>" if more > 0 else ""
    body = f"{intro}{table(headers, rows)}{tail}{restarted}"
    return f'<h2>History</h2><div id="history">{body}</div>'


def _restarted(view: FleetView) -> str:
    """The nodes whose GPUs were replaced: their history started again with this run."""
    if not view.history_restarted:
        return ""
    items = "".join(f"<li>{escape(text)}</li>" for text in view.history_restarted)
    more = view.history_restarted_omitted
    tail = f"<p>{more} more nodes started a new history.</p>" if more else ""
    return (
        '<div id="history-restarted"><p>GPUs replaced since the kept runs: these nodes\' '
        f"history starts again from this run.</p><ul>{items}</ul>{tail}</div>"
    )
