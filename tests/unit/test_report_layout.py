"""How the HTML report stays readable on a large fleet, without a browser: failures grouped per
node, check and reason; nodes that share a value share one label; labels that would touch are put
on different levels (tests/browser measures the drawn page)."""

from __future__ import annotations

from gpuval_api.figures import BURN, H2D
from gpuval_api.views import FailureView, FigureOutlier, UnitView
from gpuval_report.failures import failures_html, gpu_ranges, group_failures
from gpuval_report.figures import (
    CHAR_PX,
    LABEL_GAP_PX,
    MAX_LABELS,
    PLOT_PX,
    Label,
    label_levels,
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

    assert [level for level, _ in placed] == [0, 1, 2, 0]
    assert [anchor for _, anchor in placed] == ["left", "left", "left", "right"]
    # The estimate leaves room: the two level-0 labels are apart by more than the gap.
    right_of_first = 10.0 / 100.0 * PLOT_PX + CHAR_PX * 30
    left_of_far = PLOT_PX - CHAR_PX * 30
    assert left_of_far - right_of_first > LABEL_GAP_PX
