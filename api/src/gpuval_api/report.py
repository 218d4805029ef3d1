"""The GpuNodeReport status: what the agent writes (merge patch on /status), the operator reads.

Pure functions: agent and operator build the same shape from here (docs/contracts.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from gpuval_api import figureread, figures, termination
from gpuval_api.reasons import REASONS, Reason, Severity, verdict_of
from gpuval_api.result import AgentResult, CheckResult, Verdict

MAX_FAILURES = 16
MESSAGE_LIMIT = 1024


class ReportPhase(StrEnum):
    """`status.phase` of a GpuNodeReport: absent (Pending) until the agent starts."""

    PENDING = "Pending"
    # No verdict: the API server refuses the node's agent pod for now (a ResourceQuota that admits
    # fewer pods than the wave, an admission policy); the run creates it again (reason says why).
    WAITING = "Waiting"
    RUNNING = "Running"
    COMPLETED = "Completed"


# The verdicts a report may carry (a check may also be Skipped; a node never is).
REPORT_VERDICTS = (Verdict.PASSED, Verdict.FAILED, Verdict.NOT_RUN)


def read_verdict(value: object) -> Verdict | None:
    """A report's verdict as written (status or status.fabric); None for anything else."""
    return next((v for v in REPORT_VERDICTS if v == value), None)


def read_reason(value: object) -> Reason | None:
    """A report's reason as written. The CRD's enum refuses unknown reasons; one from a newer
    agent still reads as an error, never as none."""
    if value is None:
        return None
    try:
        return Reason(str(value))
    except ValueError:
        return Reason.CHECK_ERROR


class StatusKey(StrEnum):
    """Keys of a GpuNodeReport's `status` (docs/contracts.md, "Report status")."""

    PHASE = "phase"
    VERDICT = "verdict"
    REASON = "reason"
    MESSAGE = "message"
    STARTED_AT = "startedAt"
    COMPLETED_AT = "completedAt"
    SUMMARY = "summary"
    FAILURES = "failures"
    RESULT = "result"
    FABRIC = "fabric"
    EVIDENCE = "evidence"
    # The health the kubelet reported for the devices of the agent pod's claims (KEP-4680,
    # containerStatuses[].allocatedResourcesStatus), written by the operator as it sees it.
    DEVICE_HEALTH = "deviceHealth"
    SETTLED_BY = "settledBy"


class Settler(StrEnum):
    """`status.settledBy`: who settled the report's verdict. Only the operator sets it, when it
    writes a verdict itself (the agent could not, or the run overruled it); the admission policy
    then refuses the agent's writes to the report (a stalled agent's late write, made with a
    token a kubelet keeps through the termination grace). The operator's reset before a node's
    next attempt clears it."""

    OPERATOR = "operator"


# The words of the admission policy's refusal of an agent's write to a report the operator settled
# (charts/gpuval/templates/admission-policy.yaml renders them; a chart test holds the two together):
# the agent reads them in a 403 to say its write came too late, not that a permission is missing.
SETTLED_REFUSAL_WORDS = "was settled by the gpuval operator"


class SummaryKey(StrEnum):
    """Keys of `status.summary` that are no figure: each figure's key is its registry entry's
    (`gpuval_api.figures`, `Figure.key`)."""

    GPU_COUNT = "gpuCount"


class FailureKey(StrEnum):
    """Keys of one `status.failures[]` entry."""

    CHECK = "check"
    GPU = "gpu"
    REASON = "reason"
    HINT = "hint"
    MESSAGE = "message"


# The check name of failures the operator records for the agent (pod failed, evicted...).
AGENT_CHECK = "agent"


def rfc3339(moment: datetime) -> str:
    """A UTC RFC 3339 timestamp with a Z suffix, second precision (as Kubernetes writes them)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def one_line(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """`text` on one line (whitespace runs collapsed), cut to `limit` characters."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def build_summary(result: AgentResult) -> dict[str, Any]:
    """Worst GPU of the node for each summary figure of the registry; a figure that was not
    measured is absent, and so is one of a GPU the check did not test (GpuInUse)."""
    summary: dict[str, Any] = {SummaryKey.GPU_COUNT: result.environment.gpu_count}
    for figure in figures.summary_figures():
        value = figureread.node_value(figure, result)
        if value is not None:
            summary[figure.key] = value
    return {str(k): v for k, v in summary.items()}


def build_failures(result: AgentResult) -> list[dict[str, Any]]:
    """Error findings of every check that count against the node (a NotRun reason such as
    GpuInUse is no failure: the GPU was not tested), at most MAX_FAILURES, in check order."""
    return failures_of(result.checks)


def failures_of(checks: Sequence[CheckResult]) -> list[dict[str, Any]]:
    """build_failures over `checks` (those finished so far, while the agent still runs)."""
    failures: list[dict[str, Any]] = []
    for check in checks:
        for finding in check.findings:
            if finding.severity is not Severity.ERROR:
                continue
            if verdict_of(finding.reason) is not Verdict.FAILED:
                continue
            entry: dict[str, Any] = {
                FailureKey.CHECK: check.name,
                FailureKey.REASON: str(finding.reason),
                FailureKey.HINT: finding.hint,
                FailureKey.MESSAGE: one_line(finding.message),
            }
            if finding.gpu is not None:
                entry[FailureKey.GPU] = finding.gpu
            failures.append({str(k): v for k, v in entry.items()})
            if len(failures) == MAX_FAILURES:
                return failures
    return failures


def _status(values: dict[StatusKey, Any]) -> dict[str, Any]:
    return {str(key): value for key, value in values.items()}


def build_report_status(
    result: AgentResult, evidence: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The `status` of a completed GpuNodeReport, as the agent writes it with a JSON merge patch:
    Passed, Failed, or NotRun (the agent could not test the node, e.g. GpuInUse); `evidence` is a
    failing node's bundle (gpuval_api.evidence), null otherwise."""
    verdict = result.verdict if result.verdict in REPORT_VERDICTS else Verdict.FAILED
    reason = None
    if verdict is not Verdict.PASSED:
        reason = result.reason or Reason.CHECK_ERROR
    return _status(
        {
            StatusKey.PHASE: str(ReportPhase.COMPLETED),
            StatusKey.VERDICT: str(verdict),
            # Merge patch: null removes a reason a previous run of this report left behind.
            StatusKey.REASON: str(reason) if reason is not None else None,
            StatusKey.MESSAGE: one_line(result.message),
            StatusKey.STARTED_AT: rfc3339(result.started_at),
            StatusKey.COMPLETED_AT: rfc3339(result.completed_at),
            StatusKey.SUMMARY: build_summary(result),
            StatusKey.FAILURES: build_failures(result),
            StatusKey.RESULT: result.to_jsonable(),
            # Merge patch: null removes an earlier run's bundle from a passing report.
            StatusKey.EVIDENCE: dict(evidence) if evidence is not None else None,
        }
    )


def build_running_status(started_at: datetime, message: str = "agent started") -> dict[str, Any]:
    """The `status` the agent writes when it starts (clears the previous run's verdict fields)."""
    return _status(
        {
            StatusKey.PHASE: str(ReportPhase.RUNNING),
            StatusKey.VERDICT: None,
            StatusKey.REASON: None,
            StatusKey.MESSAGE: one_line(message),
            StatusKey.STARTED_AT: rfc3339(started_at),
            StatusKey.COMPLETED_AT: None,
            StatusKey.SUMMARY: None,
            StatusKey.FAILURES: None,
            StatusKey.RESULT: None,
            StatusKey.EVIDENCE: None,
        }
    )


def build_findings_status(checks: Sequence[CheckResult]) -> dict[str, Any] | None:
    """What a running agent writes once a check has failed (phase stays Running): the failures
    so far, the first one's reason and message. If the agent is then killed before its verdict,
    the operator judges the node on them (a death alone is no evidence against it). None while
    nothing failed."""
    failures = failures_of(checks)
    if not failures:
        return None
    first = failures[0]
    return _status(
        {
            StatusKey.PHASE: str(ReportPhase.RUNNING),
            StatusKey.REASON: first[FailureKey.REASON],
            StatusKey.MESSAGE: one_line(
                f"{first[FailureKey.CHECK]}: {first[FailureKey.MESSAGE]} (still running)"
            ),
            StatusKey.FAILURES: failures,
        }
    )


def build_reset_status() -> dict[str, Any]:
    """The `status` (a merge patch, nulls kept) the operator writes before a node's next attempt
    in the same run: Pending, so the previous attempt's verdict is never read as the new one's
    (its other fields stay until the new agent writes its own), and the operator's settled mark
    removed, so the new agent may write the report."""
    return _status({StatusKey.PHASE: str(ReportPhase.PENDING), StatusKey.SETTLED_BY: None})


def build_waiting_status(reason: Reason, message: str) -> dict[str, Any]:
    """The `status` (a merge patch, nulls kept) the operator writes for a node whose agent pod
    the API server refused for now: Waiting, no verdict (it is not NotRun: its pod is created
    again in the same run), the reason and the API server's words in `message`."""
    return _status(
        {
            StatusKey.PHASE: str(ReportPhase.WAITING),
            StatusKey.VERDICT: None,
            StatusKey.REASON: str(reason),
            StatusKey.MESSAGE: one_line(message),
            StatusKey.COMPLETED_AT: None,
            StatusKey.FAILURES: None,
            StatusKey.SETTLED_BY: None,
        }
    )


def build_operator_failure_status(
    reason: Reason,
    message: str,
    started_at: datetime | None,
    completed_at: datetime,
    check: str = AGENT_CHECK,
) -> dict[str, Any]:
    """The `status` the operator writes when the agent could not (pod failed, evicted...), or
    when the run as a whole shows what one agent could not (`check` names where): settled by the
    operator (`settledBy`)."""
    failure = {
        FailureKey.CHECK: check,
        FailureKey.REASON: str(reason),
        FailureKey.HINT: REASONS[reason].hint,
        FailureKey.MESSAGE: one_line(message),
    }
    verdict = REASONS[reason].verdict
    return _status(
        {
            StatusKey.SETTLED_BY: str(Settler.OPERATOR),
            StatusKey.PHASE: str(ReportPhase.COMPLETED),
            StatusKey.VERDICT: str(verdict),
            StatusKey.REASON: str(reason),
            StatusKey.MESSAGE: one_line(message),
            StatusKey.STARTED_AT: rfc3339(started_at) if started_at else None,
            StatusKey.COMPLETED_AT: rfc3339(completed_at),
            # NotRun is no failure: nothing failed, the node was not tested.
            StatusKey.FAILURES: (
                [{str(k): v for k, v in failure.items()}] if verdict is Verdict.FAILED else []
            ),
        }
    )


TERMINATION_KEYS = (
    StatusKey.PHASE,
    StatusKey.VERDICT,
    StatusKey.REASON,
    StatusKey.MESSAGE,
    StatusKey.STARTED_AT,
    StatusKey.COMPLETED_AT,
    StatusKey.SUMMARY,
    StatusKey.FAILURES,
)
# A termination message's message: cut to this, then to the tight length when it must shrink.
TERMINATION_MESSAGE_CHARS, TERMINATION_MESSAGE_TIGHT = 512, 64


def tighten_message(compact: dict[str, Any]) -> bool:
    """A termination message's last shrinking step: the message cut to 64 characters."""
    message = str(compact.get(StatusKey.MESSAGE) or "")
    compact[StatusKey.MESSAGE] = one_line(message, TERMINATION_MESSAGE_TIGHT)
    return False


def _compact_report(status: Mapping[str, Any]) -> dict[str, Any]:
    compact: dict[str, Any] = {str(k): status.get(k) for k in TERMINATION_KEYS}
    compact[StatusKey.MESSAGE] = one_line(
        str(status.get(StatusKey.MESSAGE) or ""), TERMINATION_MESSAGE_CHARS
    )
    compact[StatusKey.FAILURES] = [
        {**f, FailureKey.MESSAGE: one_line(str(f.get(FailureKey.MESSAGE, "")), 200)}
        for f in status.get(StatusKey.FAILURES) or []
    ]
    return compact


def _drop_last_failure(compact: dict[str, Any]) -> bool:
    failures = compact[StatusKey.FAILURES]
    if not failures:
        return False
    failures.pop()
    return True


def _drop_summary(compact: dict[str, Any]) -> bool:
    compact[StatusKey.SUMMARY] = None
    return False


def _read_report(document: dict[str, Any]) -> dict[str, Any] | None:
    verdict, reason = document.get(StatusKey.VERDICT), document.get(StatusKey.REASON)
    if document.get(StatusKey.PHASE) != ReportPhase.COMPLETED:
        return None
    known = {str(r) for r in Reason}
    if verdict not in REPORT_VERDICTS or (reason is not None and reason not in known):
        return None
    if not isinstance(document.get(StatusKey.FAILURES) or [], list):
        return None
    return {str(k): document.get(k) for k in TERMINATION_KEYS}


# The agent pod's termination message: the completed status at the top of the object, without
# the result document; failures are dropped from the end, then the message and summary given up.
REPORT_TERMINATION = termination.Kind(
    key=None,
    compact=_compact_report,
    read=_read_report,
    shrink=(_drop_last_failure, tighten_message, _drop_summary),
)


def build_termination_message(status: Mapping[str, Any]) -> str:
    """A completed report status, without the result document, as compact JSON within the
    kubelet's limit: the agent's verdict survives an API server it could not reach."""
    return termination.build(REPORT_TERMINATION, status)


def parse_termination_message(text: str | None) -> dict[str, Any] | None:
    """The completed report status a termination message carries; None when it carries none (an
    agent that died before its verdict, or text that is not ours)."""
    return termination.read(REPORT_TERMINATION, text)
