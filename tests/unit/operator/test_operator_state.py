"""Per-node state from the facts of pods and reports; which nodes ended without a verdict."""

from __future__ import annotations

from typing import Any

from gpuval_api import keys
from gpuval_api.reasons import Reason
from gpuval_operator import names
from gpuval_operator.control.ingest import ChildIngest
from gpuval_operator.podfacts import PodFacts
from gpuval_operator.readmodel.validation import ValidationState
from gpuval_operator.run.facts import ReportFacts, failed_checks
from gpuval_operator.run.lifecycle import due_outcomes
from gpuval_operator.run.state import Phase, RunState


def make_run(*nodes: str) -> RunState:
    run = RunState(
        validation="v", run_id="1-aaaa", number=1, generation=1, trigger="created", started_at=0
    )
    for n in nodes:
        run.add(n, 8, names.report_name("v", "1-aaaa", n), names.pod_name("v", "1-aaaa", n))
    return run


def pod(node: str, phase: str = "Running", **extra: Any) -> PodFacts:
    return PodFacts.parse(pod_object(node, phase, **extra))


def pod_object(node: str, phase: str = "Running", **extra: Any) -> dict[str, Any]:
    """The agent pod of `node` as the API server gives it (the fields the operator reads)."""
    status: dict[str, Any] = {"phase": phase, **extra.pop("status", {})}
    if phase == "Running":
        status.setdefault("containerStatuses", [{"name": "agent", "state": {"running": {}}}])
    obj = {
        "metadata": {
            "name": names.pod_name("v", "1-aaaa", node),
            "labels": {keys.LABEL_RUN: "1-aaaa"},
            "annotations": {keys.ANNOTATION_NODE: node},
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": {"nodeName": node} if extra.pop("scheduled", True) else {},
        "status": status,
    }
    return obj


def report(
    node: str, phase: str = "Completed", verdict: str | None = "Passed", **status: Any
) -> ReportFacts:
    return ReportFacts.parse(
        {
            "metadata": {"name": names.report_name("v", "1-aaaa", node)},
            "spec": {"validation": "v", "run": "1-aaaa", "node": node},
            "status": {"phase": phase, "verdict": verdict, **status},
        }
    )


T0 = 1767225600.0  # the pods' creationTimestamp


def test_a_completed_report_gives_the_verdict() -> None:
    run = make_run("a")
    run.apply_pod(pod("a"), now=0)
    assert run.apply_report(report("a", verdict="Failed", reason="BurnMismatch", message="gpu 3"))
    record = run.nodes["a"]
    assert record.phase is Phase.FAILED and record.reason == "BurnMismatch"
    assert run.finished == ["a"] and run.all_done()


def test_a_verdict_written_over_a_settled_one_is_the_nodes_and_reopens_the_run() -> None:
    # One reading of a report for the status and the metrics (issue 20): the metrics read the
    # report as it is now, so the run does too, and the node's actions follow it again.
    run = make_run("a", "b")
    run.apply_report(report("a", verdict="Failed", reason="BurnMismatch", message="gpu 3"))
    run.apply_report(report("b"))
    run.finished, run.completed_at = [], 100.0
    assert run.apply_report(report("a", verdict="Passed", message="overruled"))
    record = run.nodes["a"]
    assert (record.phase, record.reason, record.message) == (Phase.PASSED, None, "overruled")
    assert run.finished == ["a"] and run.completed_at is None and run.all_done()
    assert run.counts()["passed"] == 2 and run.counts()["failed"] == 0


def test_the_same_verdict_in_other_words_changes_nothing() -> None:
    run = make_run("a")
    run.apply_report(report("a", verdict="Failed", reason="BurnMismatch", message="gpu 3"))
    run.finished, run.completed_at = [], 100.0
    assert not run.apply_report(report("a", verdict="Failed", reason="BurnNaN", message="nan"))
    assert run.nodes["a"].reason == "BurnMismatch" and run.completed_at == 100.0
    assert run.finished == []


def test_a_node_awaiting_its_fabric_verdict_is_the_fabrics_to_settle() -> None:
    run = make_run("a")
    run.expect_fabric()
    run.apply_report(report("a"))
    assert run.nodes["a"].awaiting_fabric
    assert not run.apply_report(report("a", verdict="Failed", reason="FabricSlowNode"))
    assert run.nodes["a"].phase is Phase.PASSED and run.nodes["a"].awaiting_fabric


def test_a_running_report_or_another_runs_report_gives_no_verdict() -> None:
    run = make_run("a")
    assert not run.apply_report(report("a", phase="Running", verdict=None))
    other = report("a")
    other.run = "0-zzzz"
    assert not run.apply_report(other)
    assert run.nodes["a"].phase is Phase.PENDING


def test_a_failed_pod_without_report_fails_the_node_after_the_grace_period() -> None:
    run = make_run("a")
    failed = pod(
        "a",
        "Failed",
        status={"containerStatuses": [{"state": {"terminated": {"exitCode": 2}}}]},
    )
    run.apply_pod(failed, now=100.0)
    assert due_outcomes(run, now=T0, monotonic=105.0, timeout=600, grace=10) == []
    [failure] = due_outcomes(run, now=T0, monotonic=110.0, timeout=600, grace=10)
    assert failure.reason is Reason.POD_FAILED and "exit code 2" in failure.message
    assert not failure.delete_pod


def test_an_oom_killed_container_is_not_run_as_oom_killed_and_a_sigkill_as_killed() -> None:
    run = make_run("a", "b")
    terminated = {"exitCode": 137, "reason": "OOMKilled"}
    run.apply_pod(
        pod("a", "Failed", status={"containerStatuses": [{"state": {"terminated": terminated}}]}),
        now=0.0,
    )
    killed = {"exitCode": 137, "reason": "Error"}
    run.apply_pod(
        pod("b", "Failed", status={"containerStatuses": [{"state": {"terminated": killed}}]}),
        now=0.0,
    )
    failures = {f.node: f for f in due_outcomes(run, now=T0, monotonic=60.0, timeout=600, grace=10)}
    assert failures["a"].reason is Reason.POD_OOM_KILLED
    assert "OOM-killed with exit code 137" in failures["a"].message
    # Exit code 137 alone is any SIGKILL: without findings it is no evidence against the node.
    assert failures["b"].reason is Reason.AGENT_KILLED and failures["b"].verdict == "NotRun"
    assert "killed from outside with exit code 137" in failures["b"].message


def test_an_evicted_pod_fails_the_node_as_evicted() -> None:
    run = make_run("a")
    run.apply_pod(pod("a", "Failed", status={"reason": "Evicted"}), now=0.0)
    [failure] = due_outcomes(run, now=T0, monotonic=60.0, timeout=600, grace=10)
    assert failure.reason is Reason.POD_EVICTED


def test_timeout_is_unschedulable_when_never_scheduled_and_timed_out_otherwise() -> None:
    run = make_run("a", "b")
    never = pod(
        "a",
        "Pending",
        scheduled=False,
        status={
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "message": "0/3 nodes: Insufficient nvidia.com/gpu",
                }
            ]
        },
    )
    run.apply_pod(never, now=0.0)
    run.apply_pod(pod("b", "Running"), now=0.0)
    assert due_outcomes(run, now=T0 + 599, monotonic=0.0, timeout=600, grace=10) == []
    failures = {
        f.node: f for f in due_outcomes(run, now=T0 + 600, monotonic=0.0, timeout=600, grace=10)
    }
    assert failures["a"].reason is Reason.POD_UNSCHEDULABLE
    assert "Insufficient nvidia.com/gpu" in failures["a"].message
    assert failures["b"].reason is Reason.TIMED_OUT
    assert all(f.delete_pod and f.check_node for f in failures.values())
    # Busy GPUs are no evidence against the node; a hung agent is.
    assert failures["a"].verdict == "NotRun" and failures["b"].verdict == "Failed"


def test_a_scheduled_pod_whose_container_never_started_is_not_run_naming_why() -> None:
    run = make_run("a", "b")
    pulling = {"containerStatuses": [{"state": {"waiting": {"reason": "ImagePullBackOff"}}}]}
    creating = {"containerStatuses": [{"state": {"waiting": {"reason": "ContainerCreating"}}}]}
    run.apply_pod(pod("a", "Pending", status=pulling), now=0.0)
    run.apply_pod(pod("b", "Pending", status=creating), now=0.0)
    due = due_outcomes(run, now=T0 + 600, monotonic=0, timeout=600, grace=10)
    found = {o.node: o for o in due}
    assert (
        found["a"].reason is Reason.IMAGE_PULL_FAILED and "ImagePullBackOff" in found["a"].message
    )
    assert found["b"].reason is Reason.AGENT_NOT_STARTED
    assert {o.verdict for o in found.values()} == {"NotRun"}


def test_a_pod_deleted_by_someone_else_asks_for_a_node_check() -> None:
    run = make_run("a", "b")
    run.apply_pod(pod("a"), now=0.0)
    run.apply_pod(pod("b"), now=0.0)
    run.nodes["b"].deleted_by_us = True
    run.apply_pod_deleted(pod("a"), 0.0)
    run.apply_pod_deleted(pod("b"), 0.0)
    [failure] = due_outcomes(run, now=T0, monotonic=0.0, timeout=600, grace=10)
    assert failure.node == "a" and failure.check_node


def test_a_pod_that_ended_then_was_deleted_is_an_end_not_a_deletion() -> None:
    # kube-controller-manager deletes the oldest ended pods past its threshold (12,500 by
    # default): a pod of a 10,000-node run may go before its report is read. Its end decides,
    # after the grace for the report, as for a pod that ended and stayed: not "deleted before
    # it finished".
    ended = {"containerStatuses": [{"state": {"terminated": {"exitCode": 1}}}]}
    stayed, seen_ending, deleted_ended = make_run("a"), make_run("a"), make_run("a")
    for run in (stayed, seen_ending, deleted_ended):
        run.apply_pod(pod("a"), now=0.0)
    stayed.apply_pod(pod("a", "Failed", status=ended), now=1.0)
    seen_ending.apply_pod(pod("a", "Failed", status=ended), now=1.0)
    seen_ending.apply_pod_deleted(pod("a", "Failed", status=ended), 2.0)
    # Its end not seen (the watch lagged): the deleted pod's last state says it ended.
    deleted_ended.apply_pod_deleted(pod("a", "Failed", status=ended), 1.0)
    for run in (seen_ending, deleted_ended):
        assert not run.nodes["a"].pod_gone
        assert due_outcomes(run, now=T0, monotonic=5.0, timeout=600, grace=10) == []
    [expected] = due_outcomes(stayed, now=T0, monotonic=11.0, timeout=600, grace=10)
    assert expected.reason is not Reason.POD_DELETED
    for run in (seen_ending, deleted_ended):
        [found] = due_outcomes(run, now=T0, monotonic=11.0, timeout=600, grace=10)
        assert (found.reason, found.verdict, found.message) == (
            expected.reason,
            expected.verdict,
            expected.message,
        )


def test_a_pod_gone_from_a_relist_is_a_deletion_unless_it_was_seen_ending() -> None:
    # The pods' watch was down (an API server restart) and the relist no longer has them: one
    # that still ran was deleted; one seen ending went after its end (the pod GC).
    state = ValidationState("v")
    state.run = run = make_run("a", "b")
    ingest = ChildIngest(state, per_gpu=False)
    ingest.on_pod_event("ADDED", pod_object("a"))
    ingest.on_pod_event("ADDED", pod_object("b"))
    ingest.on_pod_event("MODIFIED", pod_object("b", "Succeeded"))
    ingest.on_pods_page([], True, True)
    assert run.nodes["a"].pod_gone
    assert not run.nodes["b"].pod_gone
    assert run.nodes["b"].terminal_since is not None


def test_counts_follow_phases() -> None:
    run = make_run("a", "b", "c", "d")
    run.apply_pod(pod("b"), now=0.0)
    run.apply_pod(pod("c"), now=0.0)
    run.apply_report(report("c", verdict="Failed", reason="XidError"))
    run.apply_pod(pod("d"), now=0.0)
    run.apply_report(report("d"))
    assert run.counts() == {
        "total": 4,
        "pending": 1,
        "waiting": 0,
        "running": 1,
        "passed": 1,
        "failed": 1,
        "notRun": 0,
    }
    assert [r.node for r in run.failed()] == ["c"]


def test_report_facts_keep_summary_and_environment_but_not_the_document() -> None:
    view = ReportFacts.parse(
        {
            "metadata": {"name": "r", "annotations": {"gpuval.dev/gpus": "8"}},
            "spec": {"node": "a", "run": "1-aaaa"},
            "status": {
                "phase": "Completed",
                "verdict": "Passed",
                "summary": {"burnTflops": 800.5, "gpuCount": 8, "h2dGBps": 55.1},
                "result": {
                    "environment": {
                        "driverVersion": "580.159.04",
                        "gpuCount": 8,
                        "gpus": [
                            {"name": "NVIDIA H200", "vbios": "96.00"},
                            {"name": "NVIDIA H200", "vbios": "96.01"},
                        ],
                    },
                    "checks": [
                        {"name": "burn", "gpus": [{"index": 0, "metrics": {"tflops": 800.5}}]}
                    ],
                },
            },
        },
        per_gpu=True,
    )
    assert view.gpus == 8
    assert view.summary == {"burnTflops": 800.5, "h2dGBps": 55.1}
    assert view.environment["gpuProduct"] == "NVIDIA H200"
    assert view.environment["vbios"] == "96.00,96.01"
    assert view.environment["gpuCount"] == "8"
    assert view.gpu_figures == ((0, "burn_flops_per_second", 800.5e12),)


def test_only_nodes_whose_report_exists_wait_for_a_wave() -> None:
    run = make_run("a", "b")
    assert list(run.pending()) == []
    run.nodes["a"].planned = True
    run.apply_report(report("b", phase="Pending", verdict=None))
    assert {r.node for r in run.pending()} == {"a", "b"}


def test_a_pod_deleted_through_the_eviction_api_fails_its_node_as_evicted() -> None:
    run = make_run("a")
    run.apply_pod(pod("a"), now=0.0)
    condition = {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}
    run.apply_pod_deleted(pod("a", status={"conditions": [condition]}), 0.0)
    [failure] = due_outcomes(run, now=T0, monotonic=0.0, timeout=600, grace=10)
    assert failure.reason is Reason.POD_EVICTED and "evicted" in failure.message


def test_failed_checks_are_read_from_the_report_failures_in_order_without_repeats() -> None:
    failures = [
        {"check": "health", "reason": "EccUncorrectable", "gpu": 1},
        {"check": "burn", "reason": "BurnMismatch", "gpu": 3},
        {"check": "burn", "reason": "BurnMismatch", "gpu": 5},
        {"check": "burn", "reason": "ThermalSlowdown", "gpu": 5},
        {"reason": "no check named"},
        "not an object",
    ]
    assert failed_checks(failures) == (
        ("health", "EccUncorrectable"),
        ("burn", "BurnMismatch"),
        ("burn", "ThermalSlowdown"),
    )
    assert failed_checks(None) == ()
