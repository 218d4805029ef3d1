"""What a validation's controller does next, for every phase of its life: pure decisions, no
cluster (gpuval_operator.run.lifecycle)."""

from __future__ import annotations

from typing import Any

import pytest

from gpuval_api import keys
from gpuval_api.crd import NodeTrigger, RetryPolicy, RunTrigger
from gpuval_api.reasons import Reason
from gpuval_api.report import build_termination_message
from gpuval_operator import names
from gpuval_operator.podfacts import PodFacts
from gpuval_operator.run.lifecycle import (
    Decision,
    RunFacts,
    Step,
    decide,
    due_outcomes,
    next_wave,
    retry_wanted,
)
from gpuval_operator.run.state import Phase, RunState

T0 = 1767225600.0


def _decide(**overrides: Any) -> Decision:
    args: dict[str, Any] = {
        "valid": True,
        "generation": 2,
        "run": RunFacts(generation=2, completed=False),
        "scheduled": False,
        "next_run_at": None,
        "now": 1000.0,
    }
    args.update(overrides)
    return decide(**args)


def test_a_new_validation_starts_its_first_run() -> None:
    assert _decide(run=None) == Decision(Step.START, RunTrigger.CREATED)


def test_an_active_run_of_this_generation_is_driven() -> None:
    assert _decide() == Decision(Step.EXECUTE)


def test_a_spec_change_mid_run_supersedes_and_restarts() -> None:
    decision = _decide(run=RunFacts(generation=1, completed=False))
    assert decision == Decision(Step.RESTART, RunTrigger.SPEC_CHANGED)


def test_a_spec_change_after_a_completed_run_starts_a_new_one() -> None:
    decision = _decide(run=RunFacts(generation=1, completed=True))
    assert decision == Decision(Step.START, RunTrigger.SPEC_CHANGED)


def test_a_completed_one_off_run_waits_for_a_spec_change() -> None:
    assert _decide(run=RunFacts(generation=2, completed=True)) == Decision(Step.WAIT)


def test_a_completed_scheduled_run_first_plans_its_next_tick() -> None:
    decision = _decide(run=RunFacts(2, True), scheduled=True, next_run_at=None)
    assert decision == Decision(Step.PLAN_TICK)


def test_a_scheduled_run_waits_for_its_tick_then_starts() -> None:
    waiting = _decide(run=RunFacts(2, True), scheduled=True, next_run_at=1500.0, now=1000.0)
    assert waiting == Decision(Step.WAIT, until=1500.0)
    due = _decide(run=RunFacts(2, True), scheduled=True, next_run_at=1500.0, now=1500.0)
    assert due == Decision(Step.START, RunTrigger.SCHEDULE)


@pytest.mark.parametrize(
    ("run", "supersede"),
    [(None, False), (RunFacts(2, True), False), (RunFacts(2, False), True)],
    ids=["no run", "completed run", "active run"],
)
def test_an_invalid_spec_is_marked_and_an_active_run_superseded_first(
    run: RunFacts | None, supersede: bool
) -> None:
    assert _decide(valid=False, run=run) == Decision(Step.INVALID, supersede=supersede)


def make_run(*nodes: str) -> RunState:
    run = RunState(
        validation="v", run_id="1-aaaa", number=1, generation=1, trigger="created", started_at=0
    )
    for n in nodes:
        run.add(n, 8, names.report_name("v", "1-aaaa", n), names.pod_name("v", "1-aaaa", n))
    return run


def ended_pod(node: str, phase: str, terminated: dict[str, Any]) -> PodFacts:
    return PodFacts.parse(
        {
            "metadata": {
                "name": names.pod_name("v", "1-aaaa", node),
                "labels": {keys.LABEL_RUN: "1-aaaa"},
                "annotations": {keys.ANNOTATION_NODE: node},
                "creationTimestamp": "2026-01-01T00:00:00Z",
            },
            "spec": {"nodeName": node},
            "status": {
                "phase": phase,
                "containerStatuses": [{"state": {"terminated": terminated}}],
            },
        }
    )


def test_a_verdict_in_the_termination_message_is_taken_when_the_report_never_arrived() -> None:
    run = make_run("a")
    status = {
        "phase": "Completed",
        "verdict": "Passed",
        "message": "8 GPUs passed driver, health, burn",
        "summary": {"gpuCount": 8, "burnTflops": 700.0},
        "failures": [],
    }
    message = build_termination_message(status)
    run.apply_pod(ended_pod("a", "Succeeded", {"exitCode": 0, "message": message}), now=100.0)
    assert due_outcomes(run, now=T0, monotonic=105.0, timeout=600, grace=10) == []
    [outcome] = due_outcomes(run, now=T0, monotonic=110.0, timeout=600, grace=10)
    assert outcome.verdict == "Passed" and outcome.reason is None
    assert outcome.status is not None and outcome.status["summary"]["burnTflops"] == 700.0
    assert "termination message" in outcome.message


def test_a_failed_verdict_from_the_termination_message_keeps_its_reason() -> None:
    run = make_run("a")
    status = {"phase": "Completed", "verdict": "Failed", "reason": "BurnMismatch", "message": "x"}
    message = build_termination_message(status)
    run.apply_pod(ended_pod("a", "Failed", {"exitCode": 1, "message": message}), now=0.0)
    [outcome] = due_outcomes(run, now=T0, monotonic=60.0, timeout=600, grace=10)
    assert outcome.verdict == "Failed" and outcome.reason is Reason.BURN_MISMATCH


def test_a_termination_message_that_is_not_a_verdict_is_ignored() -> None:
    run = make_run("a")
    terminated = {"exitCode": 1, "message": "Traceback (most recent call last): ..."}
    run.apply_pod(ended_pod("a", "Failed", terminated), now=0.0)
    [outcome] = due_outcomes(run, now=T0, monotonic=60.0, timeout=600, grace=10)
    assert outcome.status is None and outcome.reason is Reason.POD_FAILED


def test_an_oom_killed_agent_says_so_and_what_to_raise() -> None:
    run = make_run("a")
    run.apply_pod(ended_pod("a", "Failed", {"exitCode": 137, "reason": "OOMKilled"}), now=0.0)
    [outcome] = due_outcomes(run, now=T0, monotonic=60.0, timeout=600, grace=10)
    assert outcome.reason is Reason.POD_OOM_KILLED and outcome.verdict == "NotRun"
    assert "OOM-killed with exit code 137" in outcome.message and "limits.memory" in outcome.message


def test_a_wave_fills_the_free_slots_with_planned_nodes_only() -> None:
    run = make_run("a", "b", "c", "d")
    for node in ("a", "b", "c"):
        run.nodes[node].planned = True
    run.nodes["a"].phase = Phase.RUNNING
    assert [r.node for r in next_wave(run, limit=2)] == ["b"]
    assert [r.node for r in next_wave(run, limit=4)] == ["b", "c"]
    assert next_wave(run, limit=1) == []


def test_nodes_that_arrive_after_a_completed_run_reopen_it_unless_a_tick_is_due() -> None:
    done = RunFacts(generation=2, completed=True)
    assert _decide(run=done, arrivals=True) == Decision(Step.EXTEND)
    ticked = _decide(run=done, arrivals=True, scheduled=True, next_run_at=900.0, now=1000.0)
    assert ticked == Decision(Step.START, RunTrigger.SCHEDULE)
    assert _decide(arrivals=True) == Decision(Step.EXECUTE)  # an active run takes them itself


def test_a_node_not_run_is_retried_until_its_attempts_are_spent() -> None:
    from gpuval_api.crd import RetryPolicy  # noqa: PLC0415

    run = make_run("a")
    run.finish_for("a", Reason.POD_UNSCHEDULABLE, "busy")
    record = run.nodes["a"]
    assert retry_wanted(record, RetryPolicy(attempts=2))
    record.next_attempt(names.pod_name("v", "1-aaaa", "a", 2), 50.0, NodeTrigger.RETRY)
    assert record.phase is Phase.PENDING and record.attempt == 2 and record.stale_report
    assert record.pod.endswith("-a2") and record.planned
    assert list(run.pending(now=49.0)) == [] and list(run.pending(now=50.0)) == [record]
    run.finish_for("a", Reason.POD_UNSCHEDULABLE, "busy again")
    assert not retry_wanted(record, RetryPolicy(attempts=2))
    assert run.counts()["notRun"] == 1


def _running(node: str, started: bool = True) -> RunState:
    run = RunState(
        validation="v", run_id="1-a", number=1, generation=1, trigger="created", started_at=0
    )
    record = run.add(node, 8, f"r-{node}", f"p-{node}")
    record.phase, record.started, record.pod_created = Phase.RUNNING, started, T0
    return run


def test_a_node_not_ready_for_less_than_the_grace_goes_on_and_past_it_is_not_run() -> None:
    run = _running("gpu-1")
    run.nodes["gpu-1"].not_ready = (T0 + 100, "NodeStatusUnknown: Kubelet stopped posting")
    args: dict[str, Any] = {"monotonic": 0.0, "timeout": 3600, "grace": 10}
    assert due_outcomes(run, now=T0 + 150, not_ready_grace=120, **args) == []
    [outcome] = due_outcomes(run, now=T0 + 220, not_ready_grace=120, **args)
    assert (outcome.verdict, outcome.reason) == ("NotRun", Reason.NODE_NOT_READY)
    assert outcome.delete_pod
    assert outcome.message == (
        "node gpu-1 was NotReady for 120s (NodeStatusUnknown: Kubelet stopped posting) while its "
        "agent ran: not tested, tried again once Ready"
    )


def test_a_node_deleted_mid_run_says_deleted_failed_once_its_agent_started() -> None:
    started, waiting = _running("gpu-1"), _running("gpu-2", started=False)
    for run in (started, waiting):
        next(iter(run.nodes.values())).node_gone = True
    args: dict[str, Any] = {"now": T0, "monotonic": 0.0, "timeout": 3600, "grace": 10}
    [gone] = due_outcomes(started, **args)
    [untested] = due_outcomes(waiting, **args)
    assert (gone.reason, gone.message) == (
        Reason.NODE_GONE,
        "node gpu-1 was deleted during the run",
    )
    assert untested.reason is Reason.NODE_GONE_UNTESTED and untested.verdict == "NotRun"


def test_a_node_whose_sharing_gives_no_pod_a_whole_gpu_is_not_retried_in_the_run() -> None:
    run = _running("gpu-1")
    run.finish_for("gpu-1", Reason.GPU_SHARING_UNSUPPORTED, "mps")
    assert not retry_wanted(run.nodes["gpu-1"], RetryPolicy(attempts=3))
    other = _running("gpu-2")
    other.finish_for("gpu-2", Reason.AGENT_PREEMPTED, "preempted")
    assert retry_wanted(other.nodes["gpu-2"], RetryPolicy(attempts=3))


def test_a_node_not_ready_waits_for_its_next_attempt_one_node_timeout_at_most() -> None:
    run = _running("gpu-1")
    record = run.nodes["gpu-1"]
    record.phase, record.planned = Phase.PENDING, True
    record.not_before, record.not_ready = T0 + 10, (T0, "NodeStatusUnknown")
    assert next_wave(run, limit=4, now=T0 + 20) == [], "no pod for a NotReady node"
    args: dict[str, Any] = {"monotonic": 0.0, "timeout": 600, "grace": 10, "not_ready_grace": 5}
    assert due_outcomes(run, now=T0 + 609, **args) == []
    [outcome] = due_outcomes(run, now=T0 + 610, **args)
    assert (outcome.reason, outcome.delete_pod) == (Reason.NODE_NOT_READY, False)
    assert "while its agent was to start" in outcome.message
    record.not_ready = None  # Ready again
    assert next_wave(run, limit=4, now=T0 + 20) == [record]
