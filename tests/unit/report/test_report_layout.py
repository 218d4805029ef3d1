"""How the HTML report stays readable on a large fleet, without a browser: failures grouped per
node, check and reason; nodes that share a value share one label; labels that would touch are put
on different levels (tests/browser measures the drawn page)."""

from __future__ import annotations

from itertools import pairwise

from gpuval_api.figures import BURN, H2D
from gpuval_api.views import FailureView, FigureOutlier, UnitView
from gpuval_report.failures import failures_html, gpu_ranges, group_failures
from gpuval_report.figures import (
    CHAR_PX,
    LABEL_GAP_PX,
    MAX_LABEL_CHARS,
    MAX_LABELS,
    PLOT_PX,
    Label,
    Lane,
    label_levels,
    label_text,
    plot_labels,
)


def _finding(
    unit: str, gpu: int | None, direction: str, reason: str = "LowBandwidth"
) -> FailureView:
    return FailureView(unit, "bandwidth", reason, f"GPU {gpu} {direction}: slow", "check PCIe", gpu)


def test_a_node_whose_gpus_all_failed_two_ways_is_one_group_per_reason() -> None:
    failures = [_finding("a", g, d) for g in range(8) for d in ("h2d", "d2h")]
    failures.append(_finding("a", None, "all at once", "PcieDegraded"))
    failures.append(_finding("b", 3, "h2d"))

    groups = group_failures(failures)

    assert [(g.unit, g.reason, len(g.findings)) for g in groups] == [
        ("a", "LowBandwidth", 16),
        ("a", "PcieDegraded", 1),
        ("b", "LowBandwidth", 1),
    ]
    assert groups[0].gpus == tuple(range(8)) and groups[1].gpus == ()


def test_the_failures_table_has_a_row_per_group_and_keeps_every_message_folded() -> None:
    failures = [_finding("a", g, d) for g in range(8) for d in ("h2d", "d2h")]
    html = failures_html(failures, "node")

    assert html.count("<tr>") == 2  # the header and one group
    assert "0-7" in html and "and 15 more like it" in html
    assert html.count("GPU 7 d2h: slow") == 1


def test_gpu_ranges_read_as_a_person_writes_them() -> None:
    assert gpu_ranges([0, 1, 2, 3, 5, 7, 6]) == "0-3, 5-7"
    assert gpu_ranges([4]) == "4"
    assert gpu_ranges([]) == ""


def _unit(name: str, value: float, verdict: str = "Passed") -> UnitView:
    return UnitView(name, verdict, figures={H2D.key: value})


def test_nodes_that_share_a_value_share_one_label_naming_two_and_counting_the_rest() -> None:
    slow = [_unit(f"gpu-node-{i:04d}", 26.7, "Failed") for i in range(6)]
    healthy = [_unit(f"ok-{i}", 53.4) for i in range(100)]
    measured = slow + healthy
    outliers = [FigureOutlier(H2D, u.name, 26.7, 53.4) for u in slow]
    position = {u.name: (u.figures[H2D.key], 1.0) for u in measured}

    labels, unlabelled = plot_labels(H2D, measured, outliers, position)

    assert [label.text for label in labels] == [
        "gpu-node-0000, gpu-node-0001 and 4 more (50% of median)"
    ]
    assert labels[0].units == 6 and unlabelled == 0


def test_only_the_worst_groups_are_labelled_and_the_rest_counted() -> None:
    slow = [_unit(f"n{i}", 10.0 + i, "Failed") for i in range(MAX_LABELS + 3)]
    healthy = [_unit(f"ok-{i}", 100.0) for i in range(50)]
    outliers = [FigureOutlier(BURN, u.name, u.figures[H2D.key], 100.0) for u in slow]
    position = {u.name: (u.figures[H2D.key], 0.0) for u in slow + healthy}

    labels, unlabelled = plot_labels(H2D, slow + healthy, outliers, position)

    assert len(labels) == MAX_LABELS and unlabelled == 3
    assert labels[0].text.startswith("n0 ")


def test_labels_that_would_touch_go_to_different_levels_and_far_ones_share_one() -> None:
    def label(x: float, text: str) -> Label:
        return Label(x, 0.0, text, "Failed", 0.5, 1)

    near = [label(10.0, "a" * 30), label(10.5, "b" * 30), label(11.0, "c" * 30)]
    far = label(100.0, "d" * 30)

    placed = label_levels([*near, far], 0.0, 100.0)

    # The rightmost of the near ones lowest, so the arrows of the higher ones pass left of it.
    assert [p.level for p in placed] == [2, 1, 0, 0]
    assert [p.anchor for p in placed] == ["left", "left", "left", "right"]
    assert [p.tail for p in placed] == [10.0, 10.5, 11.0, 100.0]
    # The estimate leaves room: the two level-0 labels are apart by more than the gap.
    right_of_first = 11.0 / 100.0 * PLOT_PX + CHAR_PX * 30
    left_of_far = PLOT_PX - CHAR_PX * 30
    assert left_of_far - right_of_first > LABEL_GAP_PX


def test_a_label_too_wide_for_either_side_slides_inside_the_plot() -> None:
    wide = Label(50.0, 0.0, "x" * 100, "Failed", 0.5, 1)  # 700 px on a 1,000 px plot
    (placed,) = label_levels([wide], 0.0, 100.0)
    assert placed.anchor == "left"
    assert placed.tail == (PLOT_PX - CHAR_PX * 100) / PLOT_PX * 100.0


def test_a_label_names_fewer_nodes_or_cuts_a_name_to_stay_short() -> None:
    long = [f"gpu-{i:04d}.rack-00.eu-central-1.compute.internal" for i in range(5)]
    assert label_text(long, "60% of median") == (
        "gpu-0000.rack-00.eu-central-1.compute.internal and 4 more (60% of median)"
    )
    text = label_text(["n" * 253], "BurnMismatch")
    assert len(text) == MAX_LABEL_CHARS and text.endswith("… (BurnMismatch)")
    assert label_text(["a", "b", "c"], "BurnMismatch") == "a, b and 1 more (BurnMismatch)"


def test_every_level_of_labels_is_one_height_above_the_rows_whatever_its_points() -> None:
    lane = Lane(rows=2, levels=3)
    tops = [lane.level_y(level) for level in range(3)]
    # Above the top row's highest jittered point (1.25), a level apart in pixels, inside the axis.
    assert tops[0] > 1.25
    assert [round((b - a) * lane.unit_px, 6) for a, b in pairwise(tops)] == [22.0, 22.0]
    assert tops[-1] + 18 / lane.unit_px <= lane.top
