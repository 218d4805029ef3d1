"""The report's fabric section without a browser: which pairs are drawn red, and how a run with
thousands of pairs is cut to its slowest (tests/browser draws the same section in chromium)."""

from __future__ import annotations

from gpuval_api.fabric.view import FabricFinding, FabricLink
from gpuval_api.views import FleetView, UnitView
from gpuval_report.fabric import MAX_LINKS, fabric_section, pairs_figure, slow_links


def view_of(links: list[FabricLink], floor: float | None = 45.0) -> FleetView:
    finding = FabricFinding("g", "Passed", links=tuple(links))
    return FleetView(
        title="v",
        kind="fleet",
        unit_label="node",
        phase="Succeeded",
        units=(UnitView("a", "Passed", fabric=finding),),
        fabric_median_gbps=None if floor is None else floor / 0.9,
        fabric_floor_gbps=floor,
    )


def test_a_pair_below_the_floor_or_failed_is_slow_and_the_slowest_comes_first() -> None:
    links = [
        FabricLink("g", 1, "a", "b", 50.0),
        FabricLink("g", 1, "c", "d", 44.9),
        FabricLink("g", 2, "b", "c", None, "c: hung"),
        FabricLink("g", 0, "c", "a", 30.0),
    ]
    view = view_of(links)
    slow = slow_links(view.fabric_links, view.fabric_floor_gbps)
    assert [(link.a, link.b) for link in slow] == [("b", "c"), ("c", "a"), ("c", "d")]


def test_a_large_run_draws_only_its_slowest_pairs_and_says_so() -> None:
    links = [FabricLink("g", 1, f"n{i}", f"n{i + 1}", 100.0 + i) for i in range(3 * MAX_LINKS)]
    figure = pairs_figure(view_of(links, floor=None))
    assert figure is not None
    bars = figure.data[0]
    assert len(bars.y) == MAX_LINKS and min(bars.y) == 100.0 and max(bars.y) < 100.0 + MAX_LINKS
    assert f"the {MAX_LINKS} slowest of {3 * MAX_LINKS} pairs" in figure.layout.title.text


def test_a_run_without_a_fabric_phase_has_no_section() -> None:
    plain = FleetView(
        title="v",
        kind="fleet",
        unit_label="node",
        phase="Succeeded",
        units=(UnitView("a", "Passed"),),
    )
    assert fabric_section(plain) == ""
    assert 'id="fabric"' in fabric_section(view_of([FabricLink("g", 1, "a", "b", 50.0)]))
