"""The report's baseline and history without a browser: which figures get a band, what the
baseline section says, how the trend lines are drawn and cut (tests/browser draws them)."""

from __future__ import annotations

import re

from gpuval_agent.baseline import candidates, judge
from gpuval_api.baseline.bands import Band, BaselineView
from gpuval_api.figures import BURN
from gpuval_api.machine import machine_view
from gpuval_api.views import FleetView, UnitView
from gpuval_report.baseline import MAX_TRENDS, baseline_section, history_section, sparkline
from gpuval_report.figures import BAND_COLOUR, distribution
from tests.support.baselines import measured
from tests.support.fleets import sample_fleet


def fleet(units: tuple[UnitView, ...], baseline: BaselineView | None = None) -> FleetView:
    return FleetView("v", "fleet", "node", "Succeeded", units, baseline=baseline)


def test_one_machine_gets_bands_of_the_per_gpu_figures_its_baseline_compared() -> None:
    result = judge(measured("box", gpus=8), candidates(None), 0.1)

    view = machine_view(result)

    assert view.baseline is not None and view.baseline.name == "nvidia-h200-x2-700w-gen5x16"
    assert set(view.baseline.bands) == {"burnTflops", "h2dGBps", "d2hGBps", "deviceCopyGBps"}
    band = view.baseline.bands["burnTflops"]
    assert (band.centre, band.limit, band.lower) == (706.421, round(0.9 * 706.421, 3), False)
    assert view.baseline.phrase(band.ratio(776.0)) == "1.10 of the H200 baseline"


def test_the_band_spans_the_floor_to_the_centre_plus_spread_and_names_the_centre() -> None:
    baseline = BaselineView("b", "H200", "Learned", 0.1, bands={"burnTflops": Band(700, 5, 630)})
    view = fleet((UnitView("n", "Passed", figures={"burnTflops": 640.0}),), baseline)

    figure = distribution(view, BURN, [])

    rects = [s for s in figure.layout.shapes if s.type == "rect"]
    assert [(r.x0, r.x1, r.fillcolor) for r in rects] == [(630, 705, BAND_COLOUR)]
    assert [a.text for a in figure.layout.annotations] == ["H200 baseline 700.0"]


def test_the_baseline_section_names_the_worst_unit_as_a_share_of_the_baseline() -> None:
    baseline = BaselineView("b", "H200", "Learned", 0.1, bands={"burnTflops": Band(700, 5, 630)})
    units = tuple(
        UnitView(n, "Passed", figures={"burnTflops": v}) for n, v in (("a", 686), ("b", 600))
    )

    html = baseline_section(fleet(units, baseline))

    assert "0.86 of the H200 baseline" in html and "<td>1 of 2</td>" in html
    assert "No baseline: no baseline for NVIDIA B200" in baseline_section(
        fleet(units, BaselineView(note="no baseline for NVIDIA B200 x8"))
    )
    assert baseline_section(fleet(units)) == ""


def test_a_trend_line_draws_oldest_to_newest_and_a_flat_one_mid_way() -> None:
    falling = sparkline([("r1", 100.0), ("r2", 90.0), ("r3", 80.0)], "TFLOP/s")
    flat = sparkline([("r1", 5.0), ("r2", 5.0)], "GB/s")

    points = re.search(r'points="([^"]+)"', falling)
    assert points is not None
    ys = [float(p.split(",")[1]) for p in points.group(1).split()]
    assert ys == sorted(ys)  # each run lower on the page than the one before
    assert "r3: 80.0 TFLOP/s" in falling
    assert re.search(r'points="3.0,12.0 97.0,12.0"', flat)


def test_history_lists_the_nodes_that_fell_most_first_and_cuts_a_large_fleet() -> None:
    view, roles = sample_fleet(healthy=3, baseline=True)
    html = history_section(view)
    assert html.index(roles["slow"]) < html.index(roles["decliner"]) < html.index("gpu-node-0")

    many = tuple(
        UnitView(
            f"n{i}",
            "Passed",
            history=(("r1", {"burnTflops": 700.0}), ("r2", {"burnTflops": 700.0 - i})),
        )
        for i in range(MAX_TRENDS + 5)
    )
    cut = history_section(fleet(many))
    assert cut.count('<svg class="trend"') == MAX_TRENDS
    assert "5 more nodes with a history are not shown" in cut
    assert history_section(fleet((UnitView("n", "Passed"),))) == ""
