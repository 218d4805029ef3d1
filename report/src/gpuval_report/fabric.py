"""The page's fabric section: what the run's fabric phase found between nodes.

The picture is the pairs: every pair all-reduce of every group as a bar, red where it failed or is
below the floor the operator judges pairs by (spec.fabric.thresholds against the run's median
pair, whose rounds set the median and whose confirmations are held to the same floor), so a slow
node shows as the red bars that share it and a slow link as one red bar between two nodes whose
other bars are green. Beside it the nodes the fabric named, with reason, transport and group
busbw; the slow network paths between topology domains it found (status.fabric.slowPaths: a slow
domain, or a slow path between two, no node blamed); every fabric node in a folded table.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

import plotly.graph_objects as go

from gpuval_api.fabric.summary import MAX_LISTED_GROUPS, FabricPathEntry
from gpuval_api.fabric.view import FabricLink
from gpuval_api.views import FAILED, PASSED, FleetView, UnitView
from gpuval_report.figures import KNOWN_COLOURS, figure_html, layout
from gpuval_report.tables import table

# Beyond this many pairs the plot shows the slowest ones (a fleet of 1,000 groups has ~9,000).
MAX_LINKS = 40


def _label(link: FabricLink) -> str:
    kind = "confirmation" if link.round == 0 else f"round {link.round}"
    return f"{link.a} ↔ {link.b} ({kind})"


def slow_links(links: Sequence[FabricLink], floor: float | None) -> list[FabricLink]:
    """Pairs that failed or measured below the run's floor, slowest first."""
    bound = floor or 0.0
    slow = [link for link in links if link.busbw_gbps is None or link.busbw_gbps < bound]
    return sorted(slow, key=lambda link: link.busbw_gbps or 0.0)


def pairs_figure(view: FleetView) -> go.Figure | None:
    """The pair bandwidths as bars (the slowest MAX_LINKS of a large run), median and bound."""
    links = view.fabric_links
    if not links:
        return None
    shown = links
    title = "Fabric pair all-reduce bus bandwidth"
    if len(links) > MAX_LINKS:
        shown = sorted(links, key=lambda link: link.busbw_gbps or 0.0)[:MAX_LINKS]
        title += f": the {MAX_LINKS} slowest of {len(links)} pairs"
    slow = set(slow_links(links, view.fabric_floor_gbps))
    fig = go.Figure(
        go.Bar(
            x=[_label(link) for link in shown],
            y=[link.busbw_gbps or 0.0 for link in shown],
            marker={"color": [KNOWN_COLOURS[FAILED if x in slow else PASSED] for x in shown]},
            customdata=[[link.group, link.error or ""] for link in shown],
            hovertemplate="%{x}: %{y:.1f} GB/s, group %{customdata[0]} %{customdata[1]}"
            "<extra></extra>",
        )
    )
    if view.fabric_median_gbps is not None and view.fabric_floor_gbps is not None:
        fig.add_hline(y=view.fabric_median_gbps, line={"color": "#90a4ae", "width": 1})
        fig.add_hline(
            y=view.fabric_floor_gbps, line={"color": "#c62828", "dash": "dot", "width": 1}
        )
    fig.update_layout(**layout(title, 420))
    fig.update_xaxes(
        tickangle=-30,
        automargin=True,
        title_text="pairs (grey line: the run's median pair; dotted red: its floor)",
    )
    fig.update_yaxes(title_text="busbw (GB/s)", rangemode="tozero")
    return fig


def _row(unit: UnitView) -> list[str]:
    finding = unit.fabric
    assert finding is not None
    busbw = "" if finding.busbw_gbps is None else f"{finding.busbw_gbps:.1f}"
    return [
        escape(unit.name),
        escape(finding.group),
        escape(finding.verdict or "planned"),
        f"<b>{escape(finding.reason)}</b>" if finding.reason else "",
        escape(finding.transport or ""),
        busbw,
        escape(finding.message),
    ]


HEADERS = ["node", "group", "fabric verdict", "reason", "transport", "group busbw GB/s", "message"]


PATH_HEADERS = ["path", "tested through", "reason", "slowest pair GB/s", "floor GB/s", "message"]


def _gbps(value: float | None) -> str:
    return "failed" if value is None else f"{value:.1f}"


def _path_row(path: FabricPathEntry) -> list[str]:
    where = f"out of {path.domains[0]}" if len(path.domains) == 1 else " ↔ ".join(path.domains)
    return [
        escape(where),
        escape(", ".join(path.nodes)),
        f"<b>{escape(str(path.reason))}</b>",
        _gbps(path.busbw_gbps),
        "" if path.floor_gbps is None else f"{path.floor_gbps:.1f}",
        escape(path.message),
    ]


def paths_html(view: FleetView) -> str:
    """The slow network paths between topology domains, or "" when the fabric found none."""
    if not view.fabric_paths:
        return ""
    rows = [_path_row(path) for path in view.fabric_paths]
    more = view.fabric_paths_omitted
    omitted = (
        f'<p class="none">and {more} more slow paths beyond the {MAX_LISTED_GROUPS} the status '
        "lists</p>"
        if more
        else ""
    )
    return (
        f"<h3>Slow network paths between topology domains: "
        f"{len(rows) + more}</h3>"
        "<p>Found by the groups across domains, through the nodes named; no node is blamed.</p>"
        f'<div id="fabric-paths">{table(PATH_HEADERS, rows, [True] * len(rows))}</div>{omitted}'
    )


def fabric_section(view: FleetView) -> str:
    """The section's HTML, or "" for a run without a fabric phase."""
    units = [u for u in view.units if u.fabric is not None]
    if not units and not view.fabric_summary:
        return ""
    parts = [f"<p><b>{escape(view.fabric_summary)}</b></p>" if view.fabric_summary else ""]
    figure = pairs_figure(view)
    if figure is not None:
        div = figure_html(figure, "plot-fabric-pairs")
        parts.append(f'<div class="plot" data-figure="fabric-pairs">{div}</div>')
    named = [u for u in units if u.fabric and u.fabric.verdict not in (PASSED, None)]
    if named:
        rows = [_row(u) for u in named]
        failed = [u.fabric is not None and u.fabric.verdict == FAILED for u in named]
        parts.append(f'<div id="fabric-named">{table(HEADERS, rows, failed)}</div>')
    else:
        parts.append('<p class="none">The fabric named no node.</p>')
    parts.append(paths_html(view))
    if units:
        parts.append(
            f"<details><summary>{len(units)} nodes in the fabric</summary>"
            f'<div id="fabric-nodes">{table(HEADERS, [_row(u) for u in units])}</div></details>'
        )
    return f'<h2>Fabric</h2><div id="fabric">{"".join(parts)}</div>'
