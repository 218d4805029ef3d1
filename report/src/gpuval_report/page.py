"""One self-contained HTML page for a FleetView: counts, failures with hints, the hardware state,
outliers, the baseline the units were judged against, the plots (with the baseline's band), the
nodes' history, the fabric between nodes, the uniformity table and every unit's figures.

Self-contained means it opens with no network: plotly.js is inlined once in the head, the styles
are inline, and nothing is referenced by URL. Every text from the cluster is HTML-escaped.
"""

from __future__ import annotations

from datetime import UTC, datetime
from html import escape
from pathlib import Path

from plotly.offline import get_plotlyjs

from gpuval_api import is_bad
from gpuval_api.views import FIGURES, PASSED, FleetView, UniformityRow
from gpuval_report.baseline import baseline_section, history_section
from gpuval_report.fabric import fabric_section
from gpuval_report.failures import failures_html
from gpuval_report.figures import distribution, figure_html, nccl_sweep, verdict_colour
from gpuval_report.state import state_section
from gpuval_report.tables import table

STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em 2em; color: #212121; }
h1 { font-size: 1.6em; margin-bottom: .2em; } h2 { font-size: 1.25em; margin-top: 1.6em; }
.meta { color: #616161; }
.badge { display: inline-block; padding: .25em .7em; margin: .2em .4em .2em 0; border-radius: 1em;
         color: white; font-weight: 600; }
table { border-collapse: collapse; margin: .5em 0; }
th, td { border: 1px solid #e0e0e0; padding: .3em .6em; text-align: left; vertical-align: top; }
th { background: #f5f5f5; }
td:first-child { white-space: nowrap; }
tr.bad td { background: #ffebee; }
.plot { border: 1px solid #eceff1; margin: .6em 0; }
.none { color: #2e7d32; }
span.trend { white-space: nowrap; } svg.trend { vertical-align: middle; }
"""
# Units listed by name in one uniformity cell before the rest are only counted.
NAMES_SHOWN = 12


def _counts(view: FleetView) -> str:
    verdicts = list(view.counts)
    return "".join(
        f'<span class="badge" style="background:{verdict_colour(v, verdicts)}">'
        f"{escape(v)}: {n}</span>"
        for v, n in view.counts.items()
    )


def _failures(view: FleetView) -> str:
    if not view.failures:
        return '<p class="none">No failures.</p>'
    units = len({f.unit for f in view.failures})
    counted = (
        f"<p>{units} failing {view.unit_label}{'s' if units != 1 else ''}, "
        f"{len(view.failures)} findings.</p>"
    )
    more = (
        f"<p>{view.failing_omitted} more failing nodes are not listed in the status.</p>"
        if view.failing_omitted
        else ""
    )
    return counted + failures_html(view.failures, view.unit_label) + more


def _others(view: FleetView) -> str:
    """Units neither passed nor failed nor waiting: gpuval could not judge them (e.g. NotRun)."""
    rows = [
        [escape(u.name), escape(u.verdict), escape(u.reason or ""), escape(u.message)]
        for u in view.others
    ]
    if not rows:
        return ""
    listed = table([view.unit_label, "Verdict", "Reason", "Message"], rows)
    return f'<h2>Not judged</h2><div id="others">{listed}</div>'


def _device_health(view: FleetView) -> str:
    """The kubelet's word on claimed devices that are not Healthy (spec.agent.devices dra)."""
    rows = [
        [escape(d.unit), escape(d.resource_id), escape(d.health), escape(d.message)]
        for d in view.unhealthy_devices
    ]
    if not rows:
        return ""
    listed = table([view.unit_label, "device", "health", "message"], rows, [True] * len(rows))
    return f'<h2>Device health</h2><div id="device-health">{listed}</div>'


def _outliers(view: FleetView) -> str:
    outliers = view.outliers
    if not outliers:
        return (
            f'<p class="none">No {view.unit_label} below 90 % of the median of any figure '
            "(above it where lower is better).</p>"
        )
    rows = [
        [
            escape(o.unit),
            escape(o.figure.label),
            f"{o.value:.1f} {escape(o.figure.unit)}",
            f"{o.median:.1f}",
            o.against_median,
        ]
        for o in outliers
    ]
    return table([view.unit_label, "figure", "value", "median", "against the median"], rows)


def _names(names: tuple[str, ...]) -> str:
    shown = ", ".join(escape(n) for n in names[:NAMES_SHOWN])
    rest = len(names) - NAMES_SHOWN
    return f"{len(names)}: {shown}" + (f" and {rest} more" if rest > 0 else "")


def _uniformity(rows: list[UniformityRow]) -> str:
    if not rows:
        return "<p>No environment record.</p>"
    cells: list[list[str]] = []
    bad: list[bool] = []
    for row in rows:
        for index, (value, holders) in enumerate(row.values):
            cells.append([escape(row.field) if index == 0 else "", escape(value), _names(holders)])
            bad.append(index > 0)
    return table(["field", "value", "units"], cells, bad)


def _units(view: FleetView) -> str:
    headers = [view.unit_label, "Verdict", "Reason"] + [f"{f.label} ({f.unit})" for f in FIGURES]
    rows = [
        [escape(u.name), escape(u.verdict), escape(u.reason or "")]
        + [f"{u.figures[f.key]:.1f}" if f.key in u.figures else "" for f in FIGURES]
        for u in view.units
    ]
    return table(headers, rows, [u.verdict != PASSED for u in view.units])


def _plots(view: FleetView) -> str:
    outliers = view.outliers
    parts = []
    for figure in FIGURES:
        if any(figure.key in u.figures for u in view.units):
            mine = [o for o in outliers if o.figure == figure]
            fig = distribution(view, figure, mine)
            div = figure_html(fig, f"plot-{figure.key}")
            parts.append(f'<div class="plot" data-figure="{figure.key}">{div}</div>')
    sweep = nccl_sweep(view)
    if sweep is not None:
        div = figure_html(sweep, "plot-nccl-sweep")
        parts.append(f'<div class="plot" data-figure="nccl-sweep">{div}</div>')
    return "".join(parts) or "<p>Nothing was measured.</p>"


def render_page(view: FleetView, generated_at: datetime | None = None) -> str:
    """The whole page as one string."""
    moment = (generated_at or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M:%S UTC")
    conditions = table(
        ["condition", "status", "reason", "message"],
        [[escape(part) for part in cond] for cond in view.conditions],
        [is_bad(cond[0], cond[1]) for cond in view.conditions],
    )
    run = f", run {escape(view.run)}" if view.run else ""
    sections = [
        f"<h1>{escape(view.title)}</h1>",
        f'<p class="meta">{escape(view.phase)}{run}; {len(view.units)} {view.unit_label}s; '
        f"generated {moment} by gpuval</p>",
        f'<div id="counts">{_counts(view)}</div>',
        conditions if view.conditions else "",
        f'<h2>Failures</h2><div id="failures">{_failures(view)}</div>',
        _others(view),
        _device_health(view),
        state_section(view),
        f'<h2>Outliers</h2><div id="outliers">{_outliers(view)}</div>',
        baseline_section(view),
        f'<h2>Figures</h2><div id="plots">{_plots(view)}</div>',
        history_section(view),
        fabric_section(view),
        f'<h2>Uniformity</h2><div id="uniformity">{_uniformity(view.uniformity)}</div>',
        f"<h2>Every {view.unit_label}</h2><details><summary>{len(view.units)} "
        f'{view.unit_label}s</summary><div id="units">{_units(view)}</div></details>',
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(view.title)}: gpuval report</title><style>{STYLE}</style>"
        f'<script type="text/javascript">{get_plotlyjs()}</script></head>'
        f"<body>{''.join(sections)}</body></html>\n"
    )


def write_page(view: FleetView, path: Path) -> Path:
    """Write the page to `path` (parents created) and return it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_page(view), encoding="utf-8")
    return path
