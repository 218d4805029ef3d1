"""build_report_status: the GpuNodeReport status shape of docs/contracts.md."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gpuval_api.checks import ChecksConfig
from gpuval_api.lenient import read_model
from gpuval_api.reasons import REASONS, Reason, Severity
from gpuval_api.report import (
    MAX_FAILURES,
    build_operator_failure_status,
    build_report_status,
    build_reset_status,
    build_running_status,
    build_termination_message,
    parse_termination_message,
)
from gpuval_api.result import (
    AgentResult,
    CheckResult,
    Environment,
    Finding,
    GpuCheckResult,
    NcclSize,
    PairResult,
    Verdict,
)
from gpuval_api.termination import TERMINATION_MESSAGE_LIMIT

START = datetime(2026, 11, 30, 5, 0, 0, tzinfo=UTC)
END = datetime(2026, 11, 30, 5, 2, 30, tzinfo=UTC)


def _finding(
    reason: Reason, gpu: int | None = None, severity: Severity = Severity.ERROR
) -> Finding:
    return Finding(
        reason=reason,
        severity=severity,
        gpu=gpu,
        message=f"{reason} seen",
        hint=REASONS[reason].hint,
    )


def _result(
    checks: list[CheckResult], verdict: Verdict, reason: Reason | None = None
) -> AgentResult:
    return AgentResult(
        agent_version="0.1.0",
        backend="simulated",
        node="node-a",
        started_at=START,
        completed_at=END,
        verdict=verdict,
        reason=reason,
        message="2 GPUs, all checks passed" if verdict is Verdict.PASSED else "burn failed",
        checks_config=ChecksConfig(),
        environment=Environment(gpu_count=2),
        checks=checks,
    )


def _passing_checks() -> list[CheckResult]:
    burn = CheckResult(
        name="burn",
        verdict=Verdict.PASSED,
        gpus=[
            GpuCheckResult(
                index=0,
                verdict=Verdict.PASSED,
                metrics={"tflops": 700.0, "maxTemperatureCelsius": 61},
            ),
            GpuCheckResult(
                index=1,
                verdict=Verdict.PASSED,
                metrics={"tflops": 650.5, "maxTemperatureCelsius": 70},
            ),
        ],
    )
    bandwidth = CheckResult(
        name="bandwidth",
        verdict=Verdict.PASSED,
        gpus=[
            GpuCheckResult(
                index=0,
                verdict=Verdict.PASSED,
                metrics={"h2dGBps": 55, "d2hGBps": 54, "deviceCopyGBps": 2000},
            ),
            GpuCheckResult(
                index=1,
                verdict=Verdict.PASSED,
                metrics={"h2dGBps": 53, "d2hGBps": 55, "deviceCopyGBps": 2050},
            ),
        ],
        pairs=[PairResult(src=0, dst=1, gbps=390), PairResult(src=1, dst=0, gbps=380)],
    )
    nccl = CheckResult(
        name="nccl",
        verdict=Verdict.PASSED,
        nccl_sizes=[
            NcclSize(bytes=1 << 30, time_seconds=0.006, algbw_gbps=170, busbw_gbps=170),
            NcclSize(bytes=1 << 32, time_seconds=0.02, algbw_gbps=340, busbw_gbps=340),
        ],
    )
    return [burn, bandwidth, nccl]


def test_passed_report_summarises_the_worst_gpu_of_each_figure() -> None:
    status = build_report_status(_result(_passing_checks(), Verdict.PASSED))
    assert status["phase"] == "Completed"
    assert status["verdict"] == "Passed"
    assert status["reason"] is None
    assert status["startedAt"] == "2026-11-30T05:00:00Z"
    assert status["completedAt"] == "2026-11-30T05:02:30Z"
    assert status["summary"] == {
        "gpuCount": 2,
        "burnTflops": 650.5,
        "h2dGBps": 53,
        "d2hGBps": 54,
        "deviceCopyGBps": 2000,
        "p2pGBps": 380,
        "ncclBusbwGBps": 340,
        "maxTemperatureCelsius": 70,
    }
    assert status["failures"] == []
    assert status["result"]["schemaVersion"] == "gpuval.dev/v1alpha1/result"


def test_unmeasured_figures_are_absent_from_the_summary() -> None:
    status = build_report_status(_result([], Verdict.PASSED))
    assert status["summary"] == {"gpuCount": 2}


def test_failed_report_carries_reason_and_error_findings_only() -> None:
    burn = CheckResult(
        name="burn",
        verdict=Verdict.FAILED,
        reason=Reason.BURN_MISMATCH,
        findings=[_finding(Reason.BURN_MISMATCH, gpu=1)],
    )
    health = CheckResult(
        name="health",
        verdict=Verdict.PASSED,
        findings=[_finding(Reason.PERSISTENCE_MODE_OFF, gpu=0, severity=Severity.WARNING)],
    )
    status = build_report_status(_result([health, burn], Verdict.FAILED, Reason.BURN_MISMATCH))
    assert status["verdict"] == "Failed"
    assert status["reason"] == "BurnMismatch"
    assert status["failures"] == [
        {
            "check": "burn",
            "gpu": 1,
            "reason": "BurnMismatch",
            "hint": REASONS[Reason.BURN_MISMATCH].hint,
            "message": "BurnMismatch seen",
        }
    ]


def test_failures_are_capped_at_sixteen() -> None:
    burn = CheckResult(
        name="burn",
        verdict=Verdict.FAILED,
        reason=Reason.BURN_NAN,
        findings=[_finding(Reason.BURN_NAN, gpu=i % 8) for i in range(40)],
    )
    status = build_report_status(_result([burn], Verdict.FAILED, Reason.BURN_NAN))
    assert len(status["failures"]) == MAX_FAILURES


def test_running_status_clears_the_previous_runs_verdict() -> None:
    status = build_running_status(START)
    assert status["phase"] == "Running"
    assert status["startedAt"] == "2026-11-30T05:00:00Z"
    for key in ("verdict", "reason", "completedAt", "summary", "failures", "result"):
        assert status[key] is None


def test_operator_failure_status_uses_the_catalogue_hint() -> None:
    status = build_operator_failure_status(Reason.TIMED_OUT, "agent hung", None, END)
    assert status["verdict"] == "Failed"
    assert status["reason"] == "TimedOut"
    assert status["failures"][0]["hint"] == REASONS[Reason.TIMED_OUT].hint


def test_a_verdict_the_operator_writes_is_marked_settled_by_it_and_a_reset_clears_the_mark() -> (
    None
):
    """The agents' admission policy refuses their writes to a report settledBy the operator
    (issue 34 part 6); the reset before a node's next attempt lets its next agent write."""
    assert build_operator_failure_status(Reason.TIMED_OUT, "hung", None, END)["settledBy"] == (
        "operator"
    )
    assert build_reset_status() == {"phase": "Pending", "settledBy": None}  # a null removes it
    assert "settledBy" not in build_report_status(_result(_passing_checks(), Verdict.PASSED))


def test_a_node_gpuval_could_not_test_is_not_run_with_no_failure_listed() -> None:
    status = build_operator_failure_status(
        Reason.POD_EVICTED, "evicted: memory pressure", None, END
    )
    assert status["verdict"] == "NotRun" and status["reason"] == "PodEvicted"
    assert status["failures"] == []


def test_every_reason_of_an_untested_node_is_not_run_and_evidence_is_failed() -> None:
    not_run = {r for r, info in REASONS.items() if info.verdict == "NotRun"}
    assert not_run == {
        Reason.AGENT_POD_REFUSED,
        Reason.POD_UNSCHEDULABLE,
        Reason.POD_EVICTED,
        Reason.POD_DELETED,
        Reason.POD_OOM_KILLED,
        Reason.IMAGE_PULL_FAILED,
        Reason.AGENT_NOT_STARTED,
        Reason.NODE_GONE_UNTESTED,
        Reason.INVALID_CONFIG,
        Reason.AGENT_STOPPED,
        Reason.FABRIC_GANG_NOT_FORMED,
        Reason.FABRIC_SLOW_PAIR,
        Reason.GPU_IN_USE,
        Reason.DCGM_NOT_AVAILABLE,
        Reason.NODE_NOT_READY,
        Reason.AGENT_KILLED,
        Reason.AGENT_PREEMPTED,
        Reason.GPU_REPLICAS_HELD,
        Reason.GPU_SHARING_UNSUPPORTED,
        Reason.DEVICES_CLAIMED,
        Reason.DEVICE_POOL_INCOMPLETE,
        Reason.DEVICES_PUBLISHED_TWICE,
        Reason.NOT_APPLICABLE,
    }
    for evidence in (Reason.TIMED_OUT, Reason.NODE_GONE, Reason.POD_FAILED, Reason.BURN_MISMATCH):
        assert REASONS[evidence].verdict == "Failed"


def test_a_termination_message_fits_the_kubelets_limit_and_reads_back() -> None:
    long = "x" * 2000
    status = {
        "phase": "Completed",
        "verdict": "Failed",
        "reason": "BurnMismatch",
        "message": long,
        "summary": {"gpuCount": 8, "burnTflops": 612.5},
        "failures": [
            {"check": "burn", "reason": "BurnMismatch", "gpu": g, "hint": "h", "message": long}
            for g in range(16)
        ],
        "result": {"a": long * 10},
    }
    text = build_termination_message(status)
    assert len(text.encode()) <= TERMINATION_MESSAGE_LIMIT
    back = parse_termination_message(text)
    assert back is not None and "result" not in back
    assert back["verdict"] == "Failed" and back["reason"] == "BurnMismatch"
    assert back["summary"] == {"gpuCount": 8, "burnTflops": 612.5}
    assert 1 <= len(back["failures"]) < 16 and back["failures"][0]["gpu"] == 0


@pytest.mark.parametrize(
    "text",
    [
        None,
        "",
        "Traceback (most recent call last):",
        "[1, 2]",
        '{"phase": "Running", "verdict": "Passed"}',
        '{"phase": "Completed", "verdict": "Maybe"}',
        '{"phase": "Completed", "verdict": "Failed", "reason": "NoSuchReason"}',
    ],
)
def test_anything_but_a_completed_verdict_is_no_termination_verdict(text: str | None) -> None:
    assert parse_termination_message(text) is None


def test_a_checks_elapsed_time_written_under_its_old_name_is_read_and_written_under_the_new() -> (
    None
):
    """Results before the names were unified said `durationSeconds` for a check's elapsed time
    (now the burn's configured duration's name alone); a reader takes it as `elapsedSeconds`."""
    old = {"name": "burn", "verdict": "Passed", "durationSeconds": 61.5}
    check = read_model(CheckResult, old)
    assert check.elapsed_seconds == 61.5
    assert check.model_dump(by_alias=True)["elapsedSeconds"] == 61.5
    assert "durationSeconds" not in check.model_dump(by_alias=True)
    both = CheckResult.model_validate({**old, "elapsedSeconds": 2.0})
    assert both.elapsed_seconds == 2.0, "the new name wins where a document has both"
