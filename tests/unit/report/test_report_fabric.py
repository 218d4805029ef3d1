"""The report's fabric section without a browser: which pairs are drawn red, and how a run with
thousands of pairs is cut to its slowest (tests/browser draws the same section in chromium)."""

from __future__ import annotations

from gpuval_api.crd import GpuValidation
from gpuval_api.fabric.view import FabricFinding, FabricLink
from gpuval_api.views import FleetView, UnitView, fleet_of_units
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


def test_the_section_shows_a_slow_domain_and_a_slow_path_from_the_status() -> None:
    def path(domains: list[str], reason: str, busbw: float | None) -> dict[str, object]:
        return {
            "group": "fabric-1-x0",
            "domains": domains,
            "nodes": [f"rep-{d}" for d in domains],
            "reason": reason,
            "busbwGBps": busbw,
            "floorGBps": 300.0,
            "message": f"the network path {'-'.join(domains)} is slow",
        }

    fabric = {
        "summary": "8/8 passed",
        "slowPaths": [
            path(["rack-1"], "FabricSlowDomain", 120.0),
            path(["rack-2", "rack-3"], "FabricSlowPath", None),
        ],
        "slowPathsOmitted": 3,
    }
    validation = GpuValidation.model_validate(
        {"metadata": {"name": "v"}, "status": {"fabric": fabric}}
    )
    finding = FabricFinding("fabric-1-x0", "Passed", links=(FabricLink("g", 1, "a", "b", 350.0),))
    html = fabric_section(fleet_of_units(validation, [UnitView("a", "Passed", fabric=finding)]))

    paths = html.split('id="fabric-paths"', 1)[1]
    assert "Slow network paths between topology domains: 5" in html
    assert "<td>out of rack-1</td><td>rep-rack-1</td><td><b>FabricSlowDomain</b></td>" in paths
    assert "<td>120.0</td><td>300.0</td>" in paths
    assert "<td>rack-2 ↔ rack-3</td><td>rep-rack-2, rep-rack-3</td>" in paths
    assert "<td>failed</td>" in paths and "the network path rack-2-rack-3 is slow" in paths
    assert "and 3 more slow paths beyond the 5 the status lists" in html
