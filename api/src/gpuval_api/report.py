"""The GpuNodeReport status: what the agent writes (merge patch on /status), the operator reads.

Pure functions: agent and operator build the same shape from here (docs/contracts.md).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from gpuval_api.reasons import REASONS, Reason, Severity
from gpuval_api.result import AgentResult, Metric, Verdict

MAX_FAILURES = 16
MESSAGE_LIMIT = 1024


def rfc3339(moment: datetime) -> str:
    """A UTC RFC 3339 timestamp with a Z suffix, second precision (as Kubernetes writes them)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= MESSAGE_LIMIT else line[: MESSAGE_LIMIT - 1] + "…"


def build_summary(result: AgentResult) -> dict[str, Any]:
    """Worst GPU of the node for each figure; a figure that was not measured is absent."""
    summary: dict[str, Any] = {"gpuCount": result.environment.gpu_count}

    def gpu_values(check: str, key: str) -> list[float]:
        found = result.check(check)
        if found is None:
            return []
        return [g.metrics[key] for g in found.gpus if key in g.metrics]

    if tflops := gpu_values("burn", Metric.TFLOPS):
        summary["burnTflops"] = round(min(tflops), 3)
    for key, field in (
        (Metric.H2D, "h2dGBps"),
        (Metric.D2H, "d2hGBps"),
        (Metric.DEVICE_COPY, "deviceCopyGBps"),
    ):
        if values := gpu_values("bandwidth", key):
            summary[field] = round(min(values), 3)
    bandwidth = result.check("bandwidth")
    if bandwidth is not None:
        p2p = [p.gbps for p in bandwidth.pairs if p.gbps is not None]
        if p2p:
            summary["p2pGBps"] = round(min(p2p), 3)
    nccl = result.check("nccl")
    if nccl is not None and nccl.nccl_sizes:
        largest = max(nccl.nccl_sizes, key=lambda s: s.bytes)
        summary["ncclBusbwGBps"] = round(largest.busbw_gbps, 3)
    if temperatures := gpu_values("burn", Metric.MAX_TEMPERATURE):
        summary["maxTemperatureCelsius"] = round(max(temperatures), 1)
    return summary


def build_failures(result: AgentResult) -> list[dict[str, Any]]:
    """Error findings of every check, at most MAX_FAILURES, in check order."""
    failures: list[dict[str, Any]] = []
    for check in result.checks:
        for finding in check.findings:
            if finding.severity is not Severity.ERROR:
                continue
            entry: dict[str, Any] = {
                "check": check.name,
                "reason": str(finding.reason),
                "hint": finding.hint,
                "message": _one_line(finding.message),
            }
            if finding.gpu is not None:
                entry["gpu"] = finding.gpu
            failures.append(entry)
            if len(failures) == MAX_FAILURES:
                return failures
    return failures


def build_report_status(result: AgentResult) -> dict[str, Any]:
    """The `status` of a completed GpuNodeReport, as the agent writes it with a JSON merge patch."""
    verdict = Verdict.PASSED if result.verdict is Verdict.PASSED else Verdict.FAILED
    status: dict[str, Any] = {
        "phase": "Completed",
        "verdict": str(verdict),
        "message": _one_line(result.message),
        "startedAt": rfc3339(result.started_at),
        "completedAt": rfc3339(result.completed_at),
        "summary": build_summary(result),
        "failures": build_failures(result),
        "result": result.to_jsonable(),
    }
    if verdict is Verdict.FAILED:
        status["reason"] = str(result.reason or Reason.CHECK_ERROR)
    else:
        # Merge patch: null removes a reason a previous run of this report left behind.
        status["reason"] = None
    return status


def build_running_status(started_at: datetime, message: str = "agent started") -> dict[str, Any]:
    """The `status` the agent writes when it starts (clears the previous run's verdict fields)."""
    return {
        "phase": "Running",
        "verdict": None,
        "reason": None,
        "message": _one_line(message),
        "startedAt": rfc3339(started_at),
        "completedAt": None,
        "summary": None,
        "failures": None,
        "result": None,
    }


def build_operator_failure_status(
    reason: Reason, message: str, started_at: datetime | None, completed_at: datetime
) -> dict[str, Any]:
    """The `status` the operator writes when the agent could not (pod failed, evicted...)."""
    info = REASONS[reason]
    return {
        "phase": "Completed",
        "verdict": str(Verdict.FAILED),
        "reason": str(reason),
        "message": _one_line(message),
        "startedAt": rfc3339(started_at) if started_at else None,
        "completedAt": rfc3339(completed_at),
        "failures": [
            {
                "check": "agent",
                "reason": str(reason),
                "hint": info.hint,
                "message": _one_line(message),
            }
        ],
    }
