"""What both front ends (`run` and `cluster`) share: exit codes, signal handling, the live
metrics server, and the result of a configuration the agent refuses."""

from __future__ import annotations

import signal
import threading
from datetime import UTC, datetime
from types import FrameType

from pydantic import ValidationError

from gpuval_agent import __version__
from gpuval_agent.errors import AgentError
from gpuval_agent.metrics import AgentMetrics
from gpuval_api import REASONS, Reason, Verdict
from gpuval_api.checks import ChecksConfig
from gpuval_api.result import AgentResult, CheckResult, Environment, Finding

EXIT_PASSED, EXIT_FAILED, EXIT_ERROR, EXIT_INTERRUPTED = 0, 1, 2, 130
# Not tested: nothing failed, but the agent could not test every GPU (another process used one:
# GpuInUse) or the fabric's group did not form. Run again once the GPUs are free.
EXIT_NOT_RUN = 3


def exit_code(result: AgentResult) -> int:
    if result.reason is Reason.AGENT_STOPPED:
        return EXIT_INTERRUPTED
    return verdict_exit_code(result.verdict)


def verdict_exit_code(verdict: Verdict) -> int:
    """0 Passed, 1 Failed, 3 NotRun (not tested)."""
    if verdict is Verdict.PASSED:
        return EXIT_PASSED
    return EXIT_NOT_RUN if verdict is Verdict.NOT_RUN else EXIT_FAILED


def validation_message(error: ValidationError, source: str) -> str:
    problems = "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or '(document)'}: {e['msg']} (got {e.get('input')!r})"
        for e in error.errors()[:5]
    )
    return f"{source} is invalid: {problems}"


def stop_on_signals(stop: threading.Event) -> None:
    def handler(signum: int, _frame: FrameType | None) -> None:
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, handler)


def start_metrics(port: int | None, backend: str) -> AgentMetrics:
    metrics = AgentMetrics()
    metrics.set_backend(backend)
    if port is not None:
        try:
            metrics.serve(port)
        except OSError as error:
            raise AgentError(f"cannot serve metrics on port {port}: {error}") from None
    return metrics


def invalid_config_result(message: str, node: str | None, backend: str) -> AgentResult:
    now = datetime.now(UTC)
    info = REASONS[Reason.INVALID_CONFIG]
    finding = Finding(reason=Reason.INVALID_CONFIG, message=message, hint=info.hint)
    check = CheckResult(
        name="config",
        verdict=Verdict.FAILED,
        reason=Reason.INVALID_CONFIG,
        hint=info.hint,
        message=message,
        findings=[finding],
    )
    return AgentResult(
        agent_version=__version__,
        backend=backend,
        node=node,
        started_at=now,
        completed_at=now,
        verdict=Verdict.FAILED,
        reason=Reason.INVALID_CONFIG,
        message=message,
        checks_config=ChecksConfig(),
        environment=Environment(),
        checks=[check],
    )
