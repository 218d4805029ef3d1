"""The small words of a run's status that a person reads first (issue 43 part 8): what each one
says must be what happened, not a neighbouring case."""

from __future__ import annotations

from gpuval_api.baselinemodel import BaselineMode, BaselineSettings
from gpuval_api.conditions import GOOD_STATUS, ConditionType
from gpuval_api.views import FleetView
from gpuval_operator.baseline import judge
from gpuval_operator.run import rollup
from gpuval_operator.run.state import RunState
from gpuval_report.page import render_page


def _completed_run(settings: BaselineSettings) -> RunState:
    run = RunState("fleet", "1-beef", 1, 1, "created", 1000.0)
    for node in ("n1", "n2"):
        run.add(node, 8, f"report-{node}", f"pod-{node}")
    run.baseline = judge.start(settings, [])
    run.baseline.status = judge.run_status(run.baseline, [])
    run.completed_at = 2000.0
    return run


def _within_baseline(run: RunState) -> dict[str, str]:
    status = rollup.build_run_status(run, previous_conditions=[], now=3.0)
    return {c["type"]: c for c in status["conditions"]}["WithinBaseline"]


def test_with_baseline_mode_off_within_baseline_says_off_not_that_no_baseline_matched() -> None:
    off = _within_baseline(_completed_run(BaselineSettings(mode=BaselineMode.OFF)))
    learn = _within_baseline(_completed_run(BaselineSettings(mode=BaselineMode.LEARN)))

    assert (off["status"], off["reason"]) == ("Unknown", "BaselineOff")
    assert "spec.baseline.mode is Off" in off["message"]
    assert "matched" not in off["message"]
    # With a mode that judges, no baseline for the stack is still said as such.
    assert learn["reason"] == "NoBaseline" and "matched" in learn["message"]


def test_the_page_colours_a_condition_by_whether_it_is_good_not_by_its_status() -> None:
    """Issue 43 part 8: SystemicFailure=False and AgentPodsRefused=False are good news (white),
    NodeActionsHeld=True bad (the page's red rows); Unknown is neither."""
    rows = (
        ("Succeeded", "True", "AllNodesPassed", "ok"),
        ("SystemicFailure", "False", "NotSystemic", "no reason on most nodes"),
        ("AgentPodsRefused", "False", "NotRefused", "every pod admitted"),
        ("NodeActionsHeld", "True", "MaxNodesReached", "2 held"),
        ("NodesHealthy", "False", "NodesFailed", "1 failed"),
        ("WithinBaseline", "Unknown", "NoBaseline", "none matched"),
        ("Invalid", "False", "Valid", "valid"),
    )
    view = FleetView("GpuValidation f", "fleet", "node", "Completed", (), conditions=rows)
    page = render_page(view)
    start = page.index("<th>condition</th>")
    table = page[start : page.index("</table>", start)]
    marked = {
        row.split("<td>")[1].split("</td>")[0]: 'class="bad"' in row.split("<td>")[0]
        for row in table.split("<tr")[1:]
    }
    assert marked == {
        "Succeeded": False,
        "SystemicFailure": False,
        "AgentPodsRefused": False,
        "NodeActionsHeld": True,
        "NodesHealthy": True,
        "WithinBaseline": False,
        "Invalid": False,
    }
    # Every condition type the operator writes has its good status said once, in api/.
    assert set(GOOD_STATUS) == set(ConditionType)
