"""The /metrics families built at scrape time from the controllers' state."""

from __future__ import annotations

import asyncio

import aiohttp
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpuval_api.conditions import ConditionReason
from gpuval_api.fabric import build_planned_fabric_status
from gpuval_api.reasons import Reason
from gpuval_api.result import Verdict
from gpuval_devtools.controlplane import free_port
from gpuval_operator import names
from gpuval_operator.control.ingest import ChildIngest
from gpuval_operator.readmodel.metrics import make_registry, start_server
from gpuval_operator.readmodel.registry import Registry
from gpuval_operator.readmodel.validation import NodeResult, ValidationState
from gpuval_operator.run.breakerstate import SystemicFailure
from gpuval_operator.run.state import RunState


def sample_registry() -> Registry:
    registry = Registry()
    state = ValidationState("fleet", uniform=False, outliers=1, last_run_started=100.0)
    run = RunState(
        validation="fleet",
        run_id="1-aaaa",
        number=1,
        generation=1,
        trigger="created",
        started_at=100.0,
    )
    for n in ("a", "b", "c"):
        run.add(n, 8, names.report_name("fleet", "1-aaaa", n), names.pod_name("fleet", "1-aaaa", n))
    run.finish_node("a", Verdict.PASSED, None, "")
    run.finish_node("b", Verdict.FAILED, Reason.BURN_MISMATCH, "gpu 3")
    state.run = run
    state.latest["a"] = NodeResult(
        "1-aaaa",
        Verdict.PASSED,
        None,
        150.0,
        {"burnTflops": 800.0, "h2dGBps": 55.0},
        {},
        ((0, "burn_flops_per_second", 8e14),),
    )
    state.latest["b"] = NodeResult(
        "1-aaaa",
        Verdict.FAILED,
        Reason.ECC_UNCORRECTABLE,
        160.0,
        {},
        {},
        (),
        (("health", "EccUncorrectable"), ("burn", "BurnMismatch")),
    )
    registry["fleet"] = state
    return registry


def samples(per_gpu: bool) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(make_registry(sample_registry(), per_gpu=per_gpu)).decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_per_validation_and_per_node_series_in_base_units() -> None:
    got = samples(per_gpu=False)
    assert got[("gpuval_validation_nodes", (("state", "passed"), ("validation", "fleet")))] == 1
    assert got[("gpuval_validation_nodes", (("state", "running"), ("validation", "fleet")))] == 0
    assert got[("gpuval_validation_nodes", (("state", "pending"), ("validation", "fleet")))] == 1
    assert got[("gpuval_validation_uniform", (("validation", "fleet"),))] == 0
    assert got[("gpuval_node_passed", (("node", "a"), ("validation", "fleet")))] == 1
    assert got[("gpuval_node_passed", (("node", "b"), ("validation", "fleet")))] == 0
    assert (
        got[
            (
                "gpuval_node_failure_info",
                (("node", "b"), ("reason", "EccUncorrectable"), ("validation", "fleet")),
            )
        ]
        == 1
    )
    assert (
        got[("gpuval_node_burn_flops_per_second", (("node", "a"), ("validation", "fleet")))]
        == 800e12
    )
    assert (
        got[("gpuval_node_h2d_bytes_per_second", (("node", "a"), ("validation", "fleet")))] == 55e9
    )
    assert ("gpuval_operator_build_info", (("version", "0.1.0"),)) in got
    assert not any(name.startswith("gpuval_gpu_") for name, _ in got)


def test_per_gpu_series_only_when_enabled() -> None:
    got = samples(per_gpu=True)
    key = (
        "gpuval_gpu_burn_flops_per_second",
        (("gpu", "0"), ("node", "a"), ("validation", "fleet")),
    )
    assert got[key] == 8e14


def test_every_failed_check_of_a_node_is_a_series_not_only_its_first_reason() -> None:
    got = samples(per_gpu=False)
    check_failures = {
        dict(labels)["check"]: dict(labels)["reason"]
        for name, labels in got
        if name == "gpuval_node_check_failure_info"
    }
    # b failed health first; its burn failure must still be visible to the burn alert.
    assert check_failures == {"health": "EccUncorrectable", "burn": "BurnMismatch"}
    assert not any(
        name == "gpuval_node_check_failure_info" and dict(labels)["node"] == "a"
        for name, labels in got
    )


def test_fabric_series_come_from_settled_reports_and_a_not_run_node_has_none() -> None:
    state = ValidationState("fleet")
    ingest = ChildIngest(state, per_gpu=False)

    def report(node: str, run: str, verdict: str, reason: str | None, classified: bool) -> None:
        fabric = {
            **build_planned_fabric_status("g1", ["a", "b", "c"], node),
            "verdict": verdict,
            "reason": reason,
            "busbwGBps": 300.0,
            "classified": classified,
        }
        spec = {"node": node, "run": run}
        ingest.on_report({"metadata": {"name": node}, "spec": spec, "status": {"fabric": fabric}})

    report("a", "1-aaaa", "Passed", None, True)
    report("b", "1-aaaa", "Failed", "FabricSlowNode", True)
    report("c", "1-aaaa", "NotRun", "FabricGangNotFormed", True)
    report("a", "2-bbbb", "Failed", "FabricSlowLink", False)  # not settled yet: not read
    registry = Registry()
    registry["fleet"] = state
    text = generate_latest(make_registry(registry)).decode()
    assert 'gpuval_node_fabric_passed{node="a",validation="fleet"} 1.0' in text
    assert 'gpuval_node_fabric_passed{node="b",validation="fleet"} 0.0' in text
    assert (
        'gpuval_node_fabric_failure_info{node="b",reason="FabricSlowNode",validation="fleet"} 1.0'
        in text
    )
    assert 'node="c"' not in text
    assert 'gpuval_fabric_group_busbw_bytes_per_second{group="g1",validation="fleet"} 3e+11' in text


def test_held_node_actions_and_nodes_out_of_service_are_series() -> None:
    registry = sample_registry()
    registry.leading = True
    run = registry["fleet"].run
    assert run is not None
    run.breaker.held = {"b": ConditionReason.MAX_NODES_REACHED, "c": ConditionReason.SYSTEMIC}
    run.breaker.limit = 4
    run.breaker.systemic = [SystemicFailure("BurnMismatch", 3, 4)]
    registry.out_of_service.limit, registry.out_of_service.total = 10, 7
    registry.out_of_service.by_validation = {"fleet": 4}
    text = generate_latest(make_registry(registry)).decode()
    got = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    held = "gpuval_validation_node_actions_held"
    assert got[(held, (("cause", "MaxNodesReached"), ("validation", "fleet")))] == 1
    assert got[(held, (("cause", "Systemic"), ("validation", "fleet")))] == 1
    assert got[("gpuval_validation_nodes_out_of_service", (("validation", "fleet"),))] == 4
    assert got[("gpuval_validation_node_actions_limit", (("validation", "fleet"),))] == 4
    ratio = "gpuval_validation_systemic_failure_ratio"
    assert got[(ratio, (("reason", "BurnMismatch"), ("validation", "fleet")))] == 0.75
    assert got[("gpuval_operator_nodes_out_of_service", ())] == 7
    assert got[("gpuval_operator_nodes_out_of_service_limit", ())] == 10
    registry.leading = False
    standby = generate_latest(make_registry(registry)).decode()
    assert "gpuval_operator_nodes_out_of_service " not in standby, "a standby counts nothing"


def test_a_pass_its_agent_wrote_is_settled_once_the_current_runs_groups_are_compared() -> None:
    state = ValidationState("fleet")
    run = RunState("fleet", "1-aaaa", 1, 1, "created", 0.0)
    run.expect_fabric()
    state.begin(run)
    ingest = ChildIngest(state, per_gpu=False)
    fabric = {
        **build_planned_fabric_status("g1", ["a", "b"], "a"),
        "verdict": "Passed",
        "busbwGBps": 300.0,
    }
    body = {"metadata": {"name": "a"}, "spec": {"node": "a", "run": "1-aaaa"}}
    ingest.on_report({**body, "status": {"fabric": fabric}})
    assert "a" not in state.fabric_nodes, "the agent's own word before the run is compared"
    assert run.fabric is not None
    run.fabric.classified = True
    ingest.on_report({**body, "status": {"fabric": fabric}})
    assert state.fabric_nodes["a"].verdict is Verdict.PASSED
    assert state.fabric_groups == {"g1": 300.0}


def test_readyz_answers_503_with_the_reason_while_healthz_answers_ok() -> None:
    """Liveness (/healthz: the event loop answers) and readiness (/readyz: what `not_ready`
    says) are two endpoints, so the chart's two probes differ."""
    reason: list[str | None] = ["standby: the leader Lease last read 20s ago (lease duration 15s)"]

    async def probe() -> list[tuple[str, int, str]]:
        port = free_port()
        runner = await start_server(
            make_registry(Registry()), port, "127.0.0.1", not_ready=lambda: reason[0]
        )
        answers = []
        try:
            async with aiohttp.ClientSession() as session:
                for path in ("/healthz", "/readyz", "/readyz"):
                    async with session.get(f"http://127.0.0.1:{port}{path}") as answer:
                        answers.append((path, answer.status, await answer.text()))
                    if path == "/readyz":
                        reason[0] = None  # the standby read the Lease again
        finally:
            await runner.cleanup()
        return answers

    assert asyncio.run(probe()) == [
        ("/healthz", 200, "ok"),
        ("/readyz", 503, "standby: the leader Lease last read 20s ago (lease duration 15s)"),
        ("/readyz", 200, "ok"),
    ]
