"""The small words of a run's status that a person reads first (issue 43 part 8): what each one
says must be what happened, not a neighbouring case."""

from __future__ import annotations

from html import escape
from typing import Any

from gpuval_api.baselinemodel import BaselineMode, BaselineSettings
from gpuval_api.conditions import GOOD_STATUS, ConditionType
from gpuval_api.views import FleetView
from gpuval_kubectl import render
from gpuval_operator.baseline import judge
from gpuval_operator.run import rollup
from gpuval_operator.run.state import RunState
from gpuval_report.page import render_page
from tests.support.baselines import GPUS, measured
from tests.unit.operator.test_operator_baseline import report_facts


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


def test_a_replaced_gpu_is_named_in_the_status_the_plugin_and_the_page() -> None:
    """Issue 43 part 8: a history restart names the GPU that changed (each history entry keeps a
    token a GPU), and reaches status.baseline, `kubectl gpuval status` and the page, not only a
    Normal Event."""
    chain: list[dict[str, Any]] = []
    for n in range(3):
        chain = report_facts(measured("n1"), f"{n + 1}-beef", chain).history().carried(5)
    assert [len(e["gpuTokens"]) for e in chain] == [GPUS] * 3
    result = measured("n1")
    gpus = list(result.environment.gpus)
    gpus[3] = gpus[3].model_copy(update={"uuid": "GPU-a-new-one", "serial": "1650000000042"})
    environment = result.environment.model_copy(update={"gpus": gpus})
    history = report_facts(result.model_copy(update={"environment": environment}), "4-beef", chain)
    chain_now = history.history()

    assert chain_now.restarted is not None and chain_now.changed == "GPU 3"
    message = judge.restart_message("n1", chain_now.restarted, chain_now.gpus, chain_now.changed)
    assert message.startswith("n1: its GPUs changed (GPU 3 replaced, GPU identity ")
    assert [e["gpuTokens"][3] != chain[0]["gpuTokens"][3] for e in chain_now.carried(5)] == [True]

    run = _completed_run(BaselineSettings())
    assert run.baseline is not None
    run.baseline.restarted["n1"] = message
    status = judge.run_status(run.baseline, [])
    assert [(r.node, r.message) for r in status.history_restarted] == [("n1", message)]
    assert f"  history restarted: {message}" in render.baseline_lines(status)
    view = FleetView(
        "GpuValidation f", "fleet", "node", "Completed", (), history_restarted=(message,)
    )
    assert f"<li>{escape(message)}</li>" in render_page(view)
