"""gpuval_api.views: the fleet and machine views kubectl gpuval and the HTML report share."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from gpuval_api.crd import GpuNodeReport, GpuValidation
from gpuval_api.figures import BURN, H2D
from gpuval_api.lenient import read_model
from gpuval_api.machine import machine_view
from gpuval_api.reasons import REASONS, Reason
from gpuval_api.views import (
    UnitView,
    figure_outliers,
    fleet_view,
    hint_for,
    node_unit,
    uniformity_rows,
)
from tests.support.fleets import SLOW, sample_fleet, simulated_result


def unit(name: str, verdict: str = "Passed", **figures: float) -> UnitView:
    return UnitView(name, verdict, figures=dict(figures))


def report(node: str, status: dict[str, Any] | None) -> GpuNodeReport:
    return GpuNodeReport.model_validate(
        {
            "metadata": {"name": node},
            "spec": {"validation": "v", "run": "r", "node": node},
            "status": status,
        }
    )


def test_an_outlier_is_below_ninety_percent_of_the_median_of_its_figure() -> None:
    burns = {"a": 100.0, "b": 100.0, "c": 100.0, "d": 90.0, "e": 89.9}
    units = [unit(name, burnTflops=value) for name, value in burns.items()]
    units.append(unit("f", h2dGBps=10))

    found = figure_outliers(units)

    # 90 is exactly 90 % of the median 100: not below it.
    assert [(o.unit, o.figure, o.median) for o in found] == [("e", BURN, 100.0)]
    assert found[0].ratio == pytest.approx(0.899)


def test_fewer_than_three_measured_units_give_no_outliers() -> None:
    assert figure_outliers([unit("a", h2dGBps=50), unit("b", h2dGBps=5)], [H2D]) == []


def test_unknown_verdicts_are_counted_under_their_own_name_and_listed_apart() -> None:
    view, roles = sample_fleet(healthy=2)

    assert view.counts == {"Passed": 2, "Failed": 2, "NotRun": 1}
    assert [u.name for u in view.others] == [roles["untested"]]
    assert roles["untested"] not in {f.unit for f in view.failures}


def test_a_failed_report_without_failures_still_shows_its_reason_with_the_hint() -> None:
    failed = node_unit(
        report(
            "n",
            {
                "phase": "Completed",
                "verdict": "Failed",
                "reason": "PodEvicted",
                "message": "evicted",
            },
        )
    )
    not_run = node_unit(
        report("m", {"phase": "Completed", "verdict": "NotRun", "reason": "PodUnschedulable"})
    )
    running = node_unit(report("k", {"phase": "Running"}))
    pending = node_unit(report("p", None))

    assert [(f.reason, f.hint) for f in failed.failures] == [
        ("PodEvicted", REASONS[Reason.POD_EVICTED].hint)
    ]
    assert not_run.failures == () and not_run.reason == "PodUnschedulable"
    assert (running.verdict, pending.verdict) == ("Running", "Pending")


def test_a_reason_this_version_does_not_know_has_no_hint_instead_of_an_error() -> None:
    assert hint_for("FabricGroupNeverFormed") == ""
    assert hint_for("BurnNaN") == REASONS[Reason.BURN_NAN].hint


def test_uniformity_rows_put_the_majority_value_first() -> None:
    units = [
        UnitView(n, "Passed", environment={"driverVersion": d})
        for n, d in (("a", "580"), ("b", "570"), ("c", "580"))
    ]

    (row,) = uniformity_rows(units, ["driverVersion", "kernel"])

    assert row.values == (("580", ("a", "c")), ("570", ("b",)))
    assert not row.uniform


def test_objects_from_a_newer_gpuval_are_read_without_their_unknown_fields() -> None:
    body = {
        "metadata": {"name": "fleet"},
        "spec": {"fabric": {"groupSize": 8}},
        "status": {"phase": "Failed", "fabric": {"groups": 3}, "nodes": {"total": 2, "notRun": 1}},
    }
    validation = read_model(GpuValidation, body)

    assert validation.status is not None and validation.status.nodes is not None
    assert validation.status.nodes.total == 2
    with pytest.raises(ValidationError):
        read_model(GpuValidation, {"metadata": {"name": "x"}, "status": {"nodes": {"total": "x"}}})


def test_a_fleet_view_takes_the_run_and_conditions_from_the_validation() -> None:
    view, _ = sample_fleet(healthy=1)
    assert view.run == "fleet-1-abcd" and view.kind == "fleet"
    assert [c[0] for c in view.conditions] == ["NodesHealthy"]
    empty = fleet_view(GpuValidation.model_validate({"metadata": {"name": "new"}}), [])
    assert (empty.phase, empty.units, empty.counts) == ("Pending", (), {})


def test_a_machine_view_has_one_unit_per_gpu_and_names_the_slow_one() -> None:
    view = machine_view(simulated_result("box", [{"kind": SLOW, "gpu": 5}]))

    assert [u.name for u in view.units] == [f"GPU {i}" for i in range(8)]
    assert view.counts == {"Passed": 7, "Failed": 1}
    assert [o.unit for o in view.outliers] == ["GPU 5"]
    assert {f.reason for f in view.failures} == {"LowThroughput", "ThermalSlowdown"}
    assert all("p2pGBps" in u.figures for u in view.units)
    assert [host for host, _ in view.nccl_curves] == ["box"]


def _fabric_report(node: str, pairs: list[dict[str, Any]]) -> GpuNodeReport:
    fabric = {
        "group": "g0",
        "rank": 0,
        "world": 4,
        "verdict": "Passed",
        "transport": "IB",
        "result": {"pairs": pairs},
    }
    return report(node, {"phase": "Completed", "verdict": "Passed", "fabric": fabric})


PAIRS = [
    {"round": 1, "a": "a", "b": "b", "bytes": 1 << 30, "busbwGBps": 40.0},
    {"round": 1, "a": "c", "b": "d", "bytes": 1 << 30, "busbwGBps": 48.0},
    {"round": 2, "a": "b", "b": "c", "bytes": 1 << 30, "busbwGBps": 40.0},
    {"round": 2, "a": "d", "b": "a", "bytes": 1 << 30, "busbwGBps": 48.0},
    {"round": 0, "a": "b", "b": "d", "bytes": 1 << 30, "busbwGBps": 41.0},
    {"round": "first", "a": "x", "b": "y"},  # a shape this version cannot read: left out
]


def test_fabric_pairs_are_listed_once_rounds_first_with_the_floor_the_spec_sets() -> None:
    reports = [_fabric_report(node, PAIRS) for node in "abcd"]
    spec = {"fabric": {"thresholds": {"fractionOfMedian": 0.95}}}
    view = fleet_view(
        GpuValidation.model_validate({"metadata": {"name": "v"}, "spec": spec}), reports
    )
    links = view.fabric_links
    assert [(link.round, link.a, link.b) for link in links] == [
        (1, "a", "b"),
        (1, "c", "d"),
        (2, "b", "c"),
        (2, "d", "a"),
        (0, "b", "d"),
    ]
    assert {u.fabric.transport for u in view.units if u.fabric} == {"IB"}
    # The reference: the median over nodes of each node's best pair of the rounds (a 48, b 40,
    # c 48, d 48; the confirmation is not part of it), times the fraction.
    assert view.fabric_median_gbps == pytest.approx(48.0)
    assert view.fabric_floor_gbps == pytest.approx(0.95 * 48.0)


def test_the_run_wide_median_in_the_status_is_the_one_pairs_are_judged_by() -> None:
    document = {"metadata": {"name": "v"}, "status": {"fabric": {"medianPairGBps": 50.0}}}
    view = fleet_view(GpuValidation.model_validate(document), [_fabric_report("a", PAIRS)])
    # The default fraction of the median is 0.9.
    assert (view.fabric_median_gbps, view.fabric_floor_gbps) == (50.0, pytest.approx(45.0))
    none = fleet_view(GpuValidation.model_validate({"metadata": {"name": "v"}}), [])
    assert (none.fabric_links, none.fabric_median_gbps, none.fabric_floor_gbps) == ([], None, None)


def test_without_a_run_wide_reference_each_node_counts_once_by_its_best_pair() -> None:
    def member(node: str, group: str, world: int, pairs: list[tuple[int, str, str, float]]) -> Any:
        result = {
            "pairs": [
                {"round": r, "a": a, "b": b, "bytes": 1 << 30, "busbwGBps": bw}
                for r, a, b, bw in pairs
            ]
        }
        fabric = {"group": group, "rank": 0, "world": world, "verdict": "Passed", "result": result}
        return report(node, {"phase": "Completed", "verdict": "Passed", "fabric": fabric})

    two = [(1, "a", "b", 10.0)]
    three = [(1, "c", "d", 40.0), (2, "d", "e", 50.0), (3, "e", "c", 60.0)]
    reports = [member(n, "g0", 2, two) for n in "ab"] + [member(n, "g1", 3, three) for n in "cde"]
    view = fleet_view(GpuValidation.model_validate({"metadata": {"name": "v"}}), reports)
    # Best pairs a 10, b 10, c 60, d 50, e 60, whichever members reported them: the median is 50.
    assert view.fabric_median_gbps == pytest.approx(50.0)
