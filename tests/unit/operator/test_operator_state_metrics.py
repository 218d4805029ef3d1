"""The operator's series of the state check (issue 19, part 5), read from the reports through their
one parse (ReportFacts): per node, label sets bounded by the catalogue, per-GPU detail left in
the report."""

from __future__ import annotations

from typing import Any

from prometheus_client import generate_latest

from gpuval_operator.control.ingest import ChildIngest
from gpuval_operator.readmodel.metrics import make_registry
from gpuval_operator.readmodel.registry import Registry
from gpuval_operator.readmodel.validation import ValidationState
from gpuval_operator.run.statefacts import StateFacts


def _state_check(findings: list[tuple[str, str, int | None]], **metrics: float) -> dict[str, Any]:
    return {
        "name": "state",
        "verdict": "Failed",
        "findings": [
            {"reason": r, "severity": s, "gpu": g, "message": "m", "hint": "h"}
            for r, s, g in findings
        ],
        "metrics": metrics,
    }


def _report(node: str, verdict: str, result: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": f"fleet-1-aaaa-{node}"},
        "spec": {"node": node, "run": "1-aaaa", "validation": "fleet"},
        "status": {
            "phase": "Completed",
            "verdict": verdict,
            "completedAt": "2026-12-01T10:00:00Z",
            "result": result,
        },
    }


BROKEN = _state_check(
    [
        ("NvlinkDown", "Error", 1),
        ("NvlinkDown", "Error", 5),
        ("IbPortErrors", "Warning", None),
        ("ErrorCountersGrew", "Error", 3),
        ("MadeUpByANewerAgent", "Error", 0),
    ],
    nvlinksDown=2,
    ibPortsDown=0,
    **{"countersGrown.burn": 1, "countersGrown.bandwidth": 0, "countersGrown.nope": 9},
)


def test_a_nodes_state_findings_links_down_and_counters_grown_are_series() -> None:
    state = ValidationState("fleet")
    ingest = ChildIngest(state, per_gpu=False)
    ingest.on_report(_report("bad", "Failed", {"checks": [BROKEN]}))
    ingest.on_report(_report("ok", "Passed", {"checks": [_state_check([], nvlinksDown=0)]}))
    registry = Registry()
    registry["fleet"] = state
    text = generate_latest(make_registry(registry)).decode()

    bad = 'node="bad",'
    assert (
        f'gpuval_node_state_findings{{{bad}reason="NvlinkDown",severity="Error",'
        'validation="fleet"} 2.0' in text
    )
    assert (
        f'gpuval_node_state_finding_info{{{bad}reason="IbPortErrors",severity="Warning",'
        'validation="fleet"} 1.0' in text
    )
    # A reason this operator does not know reads as CheckError: the label set stays bounded.
    assert 'reason="MadeUpByANewerAgent"' not in text
    assert f'gpuval_node_state_finding_info{{{bad}reason="CheckError"' in text
    assert f'gpuval_node_nvlinks_down{{{bad}validation="fleet"}} 2.0' in text
    assert f'gpuval_node_ib_ports_down{{{bad}validation="fleet"}} 0.0' in text
    assert f'gpuval_node_state_counters_grown{{check="burn",{bad}validation="fleet"}} 1.0' in text
    assert 'check="nope"' not in text
    assert 'gpuval_node_nvlinks_down{node="ok",validation="fleet"} 0.0' in text
    assert 'gpuval_node_state_finding_info{node="ok"' not in text
    assert "gpu=" not in text  # per-GPU detail stays in the report


def test_a_report_without_a_state_check_has_no_state_series_and_alike_nodes_share_one_object() -> (
    None
):
    assert StateFacts.parse({"checks": [{"name": "burn"}]}) is None
    assert StateFacts.parse(None) is None
    first = StateFacts.parse({"checks": [_state_check([], nvlinksDown=0)]})
    again = StateFacts.parse({"checks": [_state_check([], nvlinksDown=0)]})
    assert first is not None and first is again
