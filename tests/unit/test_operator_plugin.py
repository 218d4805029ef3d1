"""kubectl gpuval's printing and its errors (the API round trip is in
tests/integration/test_kubectl_plugin.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuval_api.crd import GpuValidation
from gpuval_api.fabricview import FabricFinding
from gpuval_api.views import FailureView, FleetView, UnitView
from gpuval_operator import plugin
from tests.support.fleets import sample_fleet, validation


def test_status_names_failing_nodes_with_hints_the_untested_node_and_the_outlier() -> None:
    view, roles = sample_fleet(healthy=3)
    out = plugin.render_status(view, validation("fleet", "fleet-1-abcd", 6, []))

    assert out.splitlines()[0] == (
        "GpuValidation fleet: Failed, run fleet-1-abcd, 6 nodes (Passed 3, Failed 2, NotRun 1)"
    )
    assert f"  {roles['wrong']}  burn GPU 3  BurnMismatch: " in out
    assert "Not judged: 1" in out and roles["untested"] in out
    assert "Outliers: 1" in out and "60% of median 776.0" in out


def test_status_caps_each_section_and_says_how_many_more() -> None:
    failures = tuple(FailureView(f"n{i}", "burn", "BurnNaN", "NaN", "") for i in range(25))
    units = tuple(UnitView(f"n{i}", "Failed", failures=(failures[i],)) for i in range(25))
    view = FleetView("GpuValidation big", "fleet", "node", "Failed", units, failures=failures)
    out = plugin.render_status(view, GpuValidation.model_validate({"metadata": {"name": "big"}}))

    assert out.count("BurnNaN") == plugin.MAX_LINES
    assert "... and 5 more" in out


def test_status_shows_the_fabric_summary_and_the_nodes_the_fabric_named() -> None:
    named = FabricFinding("g1", "Failed", "FabricSlowNode", "slow in every pair", 180.0)
    units = (
        UnitView("n1", "Passed", fabric=FabricFinding("g1", "Passed", None, "", 361.0)),
        UnitView("n2", "Failed", reason="FabricSlowNode", fabric=named),
        UnitView("n3", "Passed"),
    )
    view = FleetView(
        "GpuValidation f", "fleet", "node", "Failed", units, fabric_summary="1/2 passed, 1 failed"
    )
    out = plugin.render_status(view, GpuValidation.model_validate({"metadata": {"name": "f"}}))
    assert "Fabric: 1/2 passed, 1 failed" in out
    assert "  n2  group g1  FabricSlowNode: slow in every pair" in out
    assert "n1  group" not in out


def test_list_prints_one_line_per_validation() -> None:
    out = plugin.render_list([validation("a", "a-1", 4, ["x"]), validation("b", "b-1", 2, [])])
    lines = out.splitlines()
    assert lines[0].split() == [
        "NAME",
        "PHASE",
        "NODES",
        "PASSED",
        "FAILED",
        "UNIFORM",
        "RUN",
        "STARTED",
    ]
    assert lines[1].split()[:5] == ["a", "Failed", "4", "3", "1"]
    assert plugin.render_list([]) == "No GpuValidations found."


def test_an_unreadable_kubeconfig_is_named_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope"
    assert plugin.main(["--kubeconfig", str(missing), "status"]) == 1
    assert (
        f"cannot use the kubeconfig: kubeconfig {missing}: no such file" in capsys.readouterr().err
    )


def test_a_report_that_cannot_be_written_names_the_path(tmp_path: Path) -> None:
    view, _ = sample_fleet(healthy=1)
    (tmp_path / "file").write_text("")
    with pytest.raises(plugin.PluginError, match=r"--html .*cannot write the report"):
        plugin.write_html(view, tmp_path / "file" / "report.html")
