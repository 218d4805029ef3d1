"""The report's plots, as plotly figures built from a FleetView.

A distribution per figure (one point per unit, hover names it) with the outliers and failing units
labelled on the plot (units sharing a value share one label; the labels on levels above the rows,
so none covers another), so a person sees who is slow without hovering, and the baseline's band
when the view was judged against one (from the BelowBaseline floor to the centre plus its spread,
the centre a line); the NCCL sweep as busbw against message size (the fabric's pairs are drawn by
gpuval_report.fabric). Colours follow the verdict; a verdict this version does not know gets a
colour of its own rather than being dropped.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import plotly.graph_objects as go

from gpuval_api.baseline.bands import Band
from gpuval_api.figures import Figure
from gpuval_api.views import (
    FAILED,
    OUTLIER_RATIO,
    PASSED,
    PENDING,
    RUNNING,
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
# Labels on a distribution plot: at most this many (the worst), each naming this many units, and
# at most this many characters (a name is cut to fit: a cloud's node names run to 50 and more).
MAX_LABELS = 8
NAMES_PER_LABEL = 2
MAX_LABEL_CHARS = 80
# Estimates for laying labels out without a browser (label_levels): the page's 12 px sans-serif
# averages under 7 px a character; the plots are 1,100 px wide or more in a 1,280 px window.
CHAR_PX = 7.0
PLOT_PX = 1000.0
LABEL_GAP_PX = 12.0
# The plot's height is laid out here, not by plotly, so that a label's level is the same height
# on the page whatever the height of the point it names: the rows of points, then above them a
# lane of label levels. Margins are fixed (plotly's automatic margins would take the legend's
# room out of the rows, by an amount this code cannot know).
MARGIN = {"l": 70, "r": 30, "t": 50, "b": 100}
ROW_PX = 70  # per verdict row (and 0.4 of a row of padding)
MIN_ROWS_PX = 160
LEVEL_PX = 22  # from one level of labels to the next; a 12 px label is 18 px high
LABEL_RISE_PX = 12  # from the top of the rows to the lowest level
LABEL_TEXT_PX = 18
LEGEND_BELOW_PX = 58  # the legend's top below the plot area, under the x axis' ticks and title
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


@dataclass(frozen=True)
class Label:
    """One annotation: the units it names (grouped when they share a value), where it points."""

    x: float
    y: float
    text: str
    verdict: str
    ratio: float  # of the median: the worst are labelled first
    units: int


def plot_labels(
    figure: Figure,
    measured: Sequence[UnitView],
    outliers: Sequence[FigureOutlier],
    position: Mapping[str, tuple[float, float]],
) -> tuple[list[Label], int]:
    """The labels of one plot and how many named units did not get one.

    Named: outliers of this figure, and units a failure of this figure's check failed (a node
    failing its burn is named on the burn plot, not on every plot). Units that share a verdict,
    a shown value and why they are named share one label ("a, b and 4 more (60% of median)"):
    on a 1,000-node fleet a fault hits several nodes alike, and one label each would be drawn on
    top of each other. The worst MAX_LABELS groups are labelled; the rest are counted.
    """
    why = {o.unit: o.against_median for o in outliers}
    for unit in measured:
        reasons = [f.reason for f in unit.failures if f.check == figure.check]
        if reasons and unit.name not in why:
            why[unit.name] = reasons[0]
    values = [u.figures[figure.key] for u in measured]
    median = statistics.median(values) if values else 0.0
    groups: dict[tuple[str, str, str], list[UnitView]] = {}
    for unit in measured:
        if unit.name in why:
            key = (unit.verdict, f"{unit.figures[figure.key]:.1f}", why[unit.name])
            groups.setdefault(key, []).append(unit)
    labels = []
    for (verdict, _, reason), units in groups.items():
        names = sorted(u.name for u in units)
        # Above the group's highest point, so the label clears every point it names.
        x = position[names[0]][0]
        y = max(position[n][1] for n in names)
        text = label_text(names, reason)
        labels.append(Label(x, y, text, verdict, x / median if median else 0.0, len(names)))
    labels.sort(key=lambda label: (label.ratio, label.text))
    return labels[:MAX_LABELS], sum(label.units for label in labels[MAX_LABELS:])


def label_text(names: Sequence[str], reason: str) -> str:
    """'a, b and 4 more (60% of median)', naming fewer units, or cutting the one name, to stay
    within MAX_LABEL_CHARS."""
    for shown in range(min(NAMES_PER_LABEL, len(names)), 0, -1):
        rest = len(names) - shown
        tail = f"{f' and {rest} more' if rest > 0 else ''} ({reason})"
        text = ", ".join(names[:shown]) + tail
        if len(text) <= MAX_LABEL_CHARS:
            return text
    room = max(1, MAX_LABEL_CHARS - len(tail) - 1)
    return names[0][:room] + "…" + tail


@dataclass(frozen=True)
class Placed:
    """Where a label is drawn: its level in the lane above the rows (0 the lowest), which side
    of its box its arrow starts from, and the x of that end (in the figure's units; the point's
    own x unless the box had to slide to stay inside the plot)."""

    level: int
    anchor: str  # "left": the box grows rightwards from `tail`; "right": leftwards
    tail: float


def label_levels(labels: Sequence[Label], lo: float, hi: float) -> list[Placed]:
    """Each label's place, so that no two labels on one level share pixels. A label grows
    rightwards from its point where it fits, else leftwards (sliding in where neither fits);
    one that would touch a label already placed goes a level up. Those growing rightwards are
    placed from the right (the rightmost lowest), the others from the left, so an arrow rising
    to a higher level passes beside the labels below it, not through them.

    Every level is one height on the page whatever the height of the point (`Lane` lays the
    plot out). Widths are estimated (CHAR_PX per character) on a plot PLOT_PX wide, the
    narrowest the page draws at the width it is read at: a wider plot moves the ends of the
    boxes, which are in the figure's units, further apart, while the boxes keep their width.
    """
    span = (hi - lo) or 1.0
    boxes: list[tuple[float, float, str]] = []
    for label in labels:
        x = (label.x - lo) / span * PLOT_PX
        width = min(CHAR_PX * len(label.text), PLOT_PX)
        if x + width <= PLOT_PX or x < width:
            start = min(x, PLOT_PX - width)
            boxes.append((start, start + width, "left"))
        else:
            boxes.append((x - width, x, "right"))

    def placing_order(i: int) -> tuple[bool, float]:
        left, right, anchor = boxes[i]
        return (anchor == "right", -left if anchor == "left" else right)

    taken: list[list[tuple[float, float]]] = []
    placed: dict[int, Placed] = {}
    for i in sorted(range(len(labels)), key=placing_order):
        left, right, anchor = boxes[i]
        level = 0
        while level < len(taken) and any(
            left < other_right + LABEL_GAP_PX and other_left < right + LABEL_GAP_PX
            for other_left, other_right in taken[level]
        ):
            level += 1
        if level == len(taken):
            taken.append([])
        taken[level].append((left, right))
        tail = left if anchor == "left" else right
        placed[i] = Placed(level, anchor, lo + tail / PLOT_PX * span)
    return [placed[i] for i in range(len(labels))]


@dataclass(frozen=True)
class Lane:
    """The plot's vertical layout: its rows of points, then the lane of label levels."""

    rows: int
    levels: int

    @property
    def rows_px(self) -> float:
        return max(MIN_ROWS_PX, ROW_PX * (self.rows + 0.4))

    @property
    def unit_px(self) -> float:
        """Pixels per row: the rows span -0.7 to rows - 0.3 on the y axis."""
        return self.rows_px / (self.rows + 0.4)

    @property
    def lane_px(self) -> float:
        if not self.levels:
            return 0.0
        return LABEL_RISE_PX + LEVEL_PX * (self.levels - 1) + LABEL_TEXT_PX + LABEL_GAP_PX / 2

    @property
    def area_px(self) -> float:
        return self.rows_px + self.lane_px

    @property
    def height(self) -> int:
        return round(self.area_px + MARGIN["t"] + MARGIN["b"])

    @property
    def top(self) -> float:
        """The y axis' top (in rows)."""
        return self.rows - 0.3 + self.lane_px / self.unit_px

    def level_y(self, level: int) -> float:
        """The y (in rows) of the bottom of a label on `level`."""
        return self.rows - 0.3 + (LABEL_RISE_PX + LEVEL_PX * level) / self.unit_px


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
    axis = f"{figure.unit} (grey: median; dotted red: 90 % of the median"
    baseline = view.baseline
    band = baseline.bands.get(figure.key) if baseline is not None else None
    lo, hi = _x_range(values, () if band is None else band.edges)
    if baseline is not None and band is not None:
        _band(fig, band, baseline.title)
        edge = "ceiling" if band.lower else "floor"
        axis += f"; band: the {baseline.title}, its {edge} to its centre"
    labels: list[Label] = []
    placed: list[Placed] = []
    unlabelled = 0
    if values:
        median = statistics.median(values)
        fig.add_vline(x=median, line={"color": "#90a4ae", "width": 1})
        fig.add_vline(
            x=figure.limit(median, 1 - OUTLIER_RATIO),
            line={"color": "#c62828", "dash": "dot", "width": 1},
        )
        labels, unlabelled = plot_labels(figure, measured, outliers, position)
        placed = label_levels(labels, lo, hi)
    lane = Lane(len(rows), max((p.level + 1 for p in placed), default=0))
    for label, place in zip(labels, placed, strict=True):
        # The arrow's tail in the axes' units: every label of a level at one height, whatever
        # the height of its point.
        fig.add_annotation(
            x=label.x,
            y=label.y,
            text=label.text,
            showarrow=True,
            arrowhead=2,
            axref="x",
            ayref="y",
            ax=place.tail,
            ay=lane.level_y(place.level),
            xanchor=place.anchor,
            yanchor="bottom",
            font={"color": verdict_colour(label.verdict, verdicts)},
        )
    area = lane.area_px
    if unlabelled:
        # Beside the legend, under the plot: the top margin holds the title and the baseline's
        # name.
        fig.add_annotation(
            x=1,
            y=-LEGEND_BELOW_PX / area,
            xref="paper",
            yref="paper",
            xanchor="right",
            yanchor="top",
            showarrow=False,
            text=f"and {unlabelled} more named under Failures and Outliers",
        )
    fig.update_layout(
        **layout(f"{figure.label} per {view.unit_label} ({figure.unit})", lane.height)
    )
    fig.update_layout(
        margin={**MARGIN, "autoexpand": False},
        legend={"orientation": "h", "y": -LEGEND_BELOW_PX / area, "yanchor": "top"},
    )
    fig.update_xaxes(title_text=axis + ")", range=[lo, hi])
    fig.update_yaxes(
        tickvals=list(range(len(rows))),
        ticktext=rows,
        range=[-0.7, lane.top],
        zeroline=False,
    )
    return fig


def _band(fig: go.Figure, band: Band, name: str) -> None:
    """The baseline's band, from the BelowBaseline floor to the centre plus its spread (a point
    left of it is below the baseline; where lower is better, from the centre less its spread to
    the ceiling, a point right of it is above), and the centre as a line named on the plot."""
    x0, x1 = band.edges
    fig.add_vrect(
        x0=x0,
        x1=x1,
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


def _x_range(values: Sequence[float], band: Sequence[float] = ()) -> tuple[float, float]:
    """The x axis: every value, the outlier bound and the baseline's band, with a margin (fixed,
    so label_levels knows where each point is drawn)."""
    if not values:
        return 0.0, 1.0
    lo = min(*values, OUTLIER_RATIO * statistics.median(values), *band)
    hi = max([*values, *band])
    pad = 0.05 * ((hi - lo) or abs(hi) or 1.0)
    return lo - pad, hi + pad


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
