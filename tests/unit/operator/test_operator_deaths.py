"""What an agent pod that ended without its agent's verdict says about its node
(gpuval_operator.run.deaths, through lifecycle.due_outcomes): evidence against the node makes it
Failed, a death alone never does. Pure, no cluster."""

from __future__ import annotations

from typing import Any

import pytest

from gpuval_api.reasons import Reason
from gpuval_operator.podfacts import killed_from_outside
from gpuval_operator.run.lifecycle import Outcome, due_outcomes
from tests.unit.operator.test_operator_state import T0, make_run, pod, report


def _ended(status: dict[str, Any], phase: str = "Failed", **run_facts: Any) -> Outcome:
    run = make_run("a")
    run.apply_pod(pod("a", phase, status=status), now=0.0)
    for key, value in run_facts.items():
        setattr(run.nodes["a"], key, value)
    [outcome] = due_outcomes(run, now=T0, monotonic=60.0, timeout=600, grace=10)
    return outcome


def _terminated(code: int, reason: str = "Error") -> dict[str, Any]:
    return {"containerStatuses": [{"state": {"terminated": {"exitCode": code, "reason": reason}}}]}


@pytest.mark.parametrize(
    ("code", "reason", "killed"),
    [(137, "Error", True), (143, "Error", True), (137, "OOMKilled", False), (2, "Error", False)],
)
def test_a_kill_from_outside_is_sigkill_or_sigterm_but_not_the_kubelets_oom_kill(
    code: int, reason: str, killed: bool
) -> None:
    assert killed_from_outside(code, reason) is killed


def test_a_sigkilled_agent_that_had_found_nothing_is_not_run_and_retried() -> None:
    outcome = _ended(_terminated(137))
    assert (outcome.verdict, outcome.reason) == ("NotRun", Reason.AGENT_KILLED)
    assert "no evidence against the node" in outcome.message and outcome.status is None


def test_a_sigkilled_agent_whose_running_report_listed_a_failure_fails_on_that_failure() -> None:
    run = make_run("a")
    failures = [{"check": "state", "reason": "KernelXidReboot", "message": "XID 79 on GPU 2"}]
    found = report(
        "a",
        phase="Running",
        verdict=None,
        reason="KernelXidReboot",
        message="state: XID 79 on GPU 2 (still running)",
        failures=failures,
    )
    assert not run.apply_report(found)  # no verdict yet: the agent still runs
    run.apply_pod(pod("a", "Failed", status=_terminated(137)), now=0.0)
    [outcome] = due_outcomes(run, now=T0, monotonic=60.0, timeout=600, grace=10)
    assert (outcome.verdict, outcome.reason) == ("Failed", Reason.KERNEL_XID_REBOOT)
    assert outcome.message.startswith("agent pod ") and "was killed with exit code 137" in (
        outcome.message
    )
    assert "XID 79 on GPU 2" in outcome.message
    # The report is made final without losing the failures the agent listed.
    assert outcome.status is not None and "failures" not in outcome.status
    assert (outcome.status["phase"], outcome.status["verdict"]) == ("Completed", "Failed")


def test_an_agent_that_exited_by_itself_without_a_verdict_fails_as_pod_failed() -> None:
    outcome = _ended(_terminated(1))
    assert (outcome.verdict, outcome.reason) == ("Failed", Reason.POD_FAILED)
    assert "failed with exit code 1 without writing a verdict" in outcome.message


def test_a_pod_the_scheduler_preempted_is_not_run_as_preempted_whether_it_ended_or_vanished() -> (
    None
):
    preempted = {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": "PreemptionByScheduler",
        "message": "preempted by default/train-1 on node gpu-0",
    }
    ended = _ended({**_terminated(2), "conditions": [preempted]})
    assert (ended.verdict, ended.reason) == ("NotRun", Reason.AGENT_PREEMPTED)
    run = make_run("a")
    run.apply_pod(pod("a"), now=0.0)
    run.apply_pod_deleted(pod("a", status={"conditions": [preempted]}), 0.0)
    [gone] = due_outcomes(run, now=T0, monotonic=0.0, timeout=600, grace=10)
    assert (gone.verdict, gone.reason) == ("NotRun", Reason.AGENT_PREEMPTED)
    assert "preempted for a pod of higher priority" in gone.message


def test_the_kubelets_preemption_for_a_critical_pod_is_a_preemption_too() -> None:
    kubelet = {"reason": "Preempting", "message": "Preempted in order to admit critical pod"}
    outcome = _ended(kubelet)
    assert outcome.reason is Reason.AGENT_PREEMPTED


def test_a_pod_refused_at_admission_is_not_run_and_on_a_shared_node_says_why() -> None:
    refused = {
        "reason": "UnexpectedAdmissionError",
        "message": "Allocate failed due to request for 32 replicas",
    }
    plain = _ended(refused)
    assert (plain.verdict, plain.reason) == ("NotRun", Reason.AGENT_NOT_STARTED)
    assert "(UnexpectedAdmissionError)" in plain.message
    shared = _ended(refused, sharing="time-slicing/4")
    assert (shared.verdict, shared.reason) == ("NotRun", Reason.GPU_SHARING_UNSUPPORTED)
    assert "shared (time-slicing/4)" in shared.message


def test_a_shared_nodes_pod_never_scheduled_is_not_run_as_replicas_held() -> None:
    run = make_run("a")
    waiting = {
        "conditions": [
            {"type": "PodScheduled", "status": "False", "message": "Insufficient nvidia.com/gpu"}
        ]
    }
    run.apply_pod(pod("a", "Pending", scheduled=False, status=waiting), now=0.0)
    run.nodes["a"].sharing = "time-slicing/4"
    [outcome] = due_outcomes(run, now=T0 + 600, monotonic=0.0, timeout=600, grace=10)
    assert (outcome.verdict, outcome.reason) == ("NotRun", Reason.GPU_REPLICAS_HELD)
    assert "every replica" in outcome.message and "Insufficient nvidia.com/gpu" in outcome.message


def test_what_the_agent_had_found_fails_the_node_however_its_pod_ended() -> None:
    run = make_run("a")
    found = report(
        "a",
        phase="Running",
        verdict=None,
        reason="BurnMismatch",
        message="burn: GPU 3 miscompared (still running)",
        failures=[{"check": "burn", "reason": "BurnMismatch", "message": "GPU 3 miscompared"}],
    )
    assert not run.apply_report(found)
    run.apply_pod(pod("a"), now=0.0)
    run.apply_pod_deleted(pod("a", status={"reason": "Evicted"}), 0.0)
    [outcome] = due_outcomes(run, now=T0, monotonic=0.0, timeout=600, grace=10)
    assert (outcome.verdict, outcome.reason) == ("Failed", Reason.BURN_MISMATCH)
    assert "was evicted after its checks found BurnMismatch" in outcome.message
