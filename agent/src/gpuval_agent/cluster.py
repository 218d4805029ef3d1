"""`gpuval-agent cluster`: the agent pod's front end. Runs the checks and writes this node's
GpuNodeReport status (docs/contracts.md, "The agent pod").

A result must survive an API server that is away for a while: the final write is retried until
the operator's own deadline for the node (GPUVAL_DEADLINE), and before it the compact verdict is
left in the container's termination message, which the kubelet keeps in the pod status where the
operator reads it when the report never arrives.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gpuval_agent import __version__
from gpuval_agent import baseline as baselines
from gpuval_agent.backends import select_backend
from gpuval_agent.backends.base import BurnProgress
from gpuval_agent.devices import parse_uuids
from gpuval_agent.display import Display, render_table
from gpuval_agent.errors import AgentError
from gpuval_agent.evidence import build_evidence, wanted
from gpuval_agent.kube import ApiServer, ReportUnreachableError, ReportWriter
from gpuval_agent.outcome import (
    exit_code,
    invalid_config_result,
    start_metrics,
    stop_on_signals,
    validation_message,
)
from gpuval_agent.record import RunRecord
from gpuval_agent.runner import run_checks
from gpuval_api import AgentEnv, Reason
from gpuval_api.checks import ChecksConfig, parse_checks
from gpuval_api.evidence import evidence_status
from gpuval_api.report import (
    StatusKey,
    build_findings_status,
    build_report_status,
    build_running_status,
    build_termination_message,
)
from gpuval_api.result import AgentResult, CheckResult

DEFAULT_TERMINATION_LOG = "/dev/termination-log"
# How long the "Running" write at start may take before the checks start anyway.
_START_WRITE_BUDGET = 30.0


def deadline_from_env(environ: Mapping[str, str]) -> float | None:
    text = environ.get(AgentEnv.DEADLINE)
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        raise AgentError(
            f"{AgentEnv.DEADLINE}={text!r} is not a time in Unix seconds; the operator sets it"
        ) from None


def _expected_gpus(environ: os._Environ[str] | dict[str, str]) -> int | None:
    text = environ.get(AgentEnv.EXPECTED_GPUS)
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        raise ValueError(
            f"{AgentEnv.EXPECTED_GPUS}={text!r} is not a whole number of GPUs"
        ) from None


def write_termination_text(text: str, path: str | None = None) -> bool:
    """Write `text` where the kubelet reads the termination message; best effort.

    The default path is written only where it exists (the kubelet mounts it into every
    container), so the agent never creates a file under /dev of a machine it was started on.
    """
    chosen = path or os.environ.get(AgentEnv.TERMINATION_LOG)
    target = Path(chosen or DEFAULT_TERMINATION_LOG)
    if chosen is None and not target.exists():
        return False
    try:
        target.write_text(text)
    except OSError as error:
        print(f"gpuval-agent: no termination message ({target}: {error})", file=sys.stderr)
        return False
    return True


def leave_termination_message(status: dict[str, object], path: str | None = None) -> bool:
    """The compact verdict of a completed report status, in the termination message."""
    return write_termination_text(build_termination_message(status), path)


def expected_gpus_source(environ: Mapping[str, str]) -> str:
    """Where GPUVAL_EXPECTED_GPUS came from, as the driver check's GpuCountMismatch names it."""
    replicas = environ.get(AgentEnv.GPU_REPLICAS)
    if environ.get(AgentEnv.DEVICE_UUIDS):
        return f"the devices the node's ResourceSlices publish ({AgentEnv.EXPECTED_GPUS})"
    if replicas:
        return (
            f"the node's physical GPUs ({AgentEnv.EXPECTED_GPUS}; its nvidia.com/gpu counts each "
            f"{replicas} times: shared replicas, all held by this agent)"
        )
    return f"the node's nvidia.com/gpu and nvidia.com/mig-* ({AgentEnv.EXPECTED_GPUS})"


class FindingsWriter:
    """The run's reporter (the display) that also writes what a failed check found into the
    report while the agent still runs (phase Running), once per new failure: if the agent is
    then killed before its verdict, the operator judges the node on what it had found, not on
    the death alone. A write that fails costs the run nothing."""

    BUDGET_SECONDS = 5.0

    def __init__(self, display: Display, writer: ReportWriter) -> None:
        self.display, self.writer = display, writer
        self.checks: list[CheckResult] = []
        self.written = 0

    def check_started(self, name: str, expected_seconds: float | None) -> None:
        self.display.check_started(name, expected_seconds)

    def check_progress(self, name: str, fraction: float | None, detail: str) -> None:
        self.display.check_progress(name, fraction, detail)

    def burn_progress(self, progress: BurnProgress) -> None:
        self.display.burn_progress(progress)

    def check_finished(self, result: CheckResult) -> None:
        self.display.check_finished(result)
        self.checks.append(result)
        status = build_findings_status(self.checks)
        if status is None or len(status[StatusKey.FAILURES]) == self.written:
            return
        try:
            self.writer.patch_status(status, budget=self.BUDGET_SECONDS)
            self.written = len(status[StatusKey.FAILURES])
        except AgentError as error:
            print(f"gpuval-agent: findings not written yet: {error}", file=sys.stderr)


def _config(
    node: str | None, backend: str, writer: ReportWriter
) -> tuple[ChecksConfig, int | None, baselines.Given | None]:
    try:
        checks = parse_checks(os.environ.get(AgentEnv.CHECKS) or "{}")
        return checks, _expected_gpus(os.environ), baselines.from_env(os.environ)
    except (ValidationError, ValueError) as error:
        message = (
            validation_message(error, AgentEnv.CHECKS)
            if isinstance(error, ValidationError)
            else str(error)
        )
        status = build_report_status(invalid_config_result(message, node, backend))
        leave_termination_message(status)
        writer.patch_status(status)
        raise AgentError(message) from None


def _evidence(result: AgentResult, record: RunRecord) -> dict[str, Any] | None:
    """A failing node's evidence bundle for its report; a bundle that cannot be built is said on
    stderr and left out, never at the cost of the verdict."""
    if not wanted(result):
        return None
    try:
        return evidence_status(build_evidence(result, record))
    except (ValueError, TypeError) as error:
        print(f"gpuval-agent: no evidence bundle: {error}", file=sys.stderr)
        return None


def cmd_cluster(args: argparse.Namespace) -> int:
    report = os.environ.get(AgentEnv.REPORT_NAME)
    if not report:
        raise AgentError(
            f"{AgentEnv.REPORT_NAME} is not set: the operator names the report to write"
        )
    node = os.environ.get(AgentEnv.NODE_NAME)
    writer = ReportWriter(ApiServer.in_cluster(), report, deadline=deadline_from_env(os.environ))
    started = datetime.now(UTC)
    try:
        writer.patch_status(
            build_running_status(started, f"agent {__version__} started on {node}"),
            budget=_START_WRITE_BUDGET,
        )
    except ReportUnreachableError as error:
        # The checks are worth running anyway: the verdict has two ways out.
        print(f"gpuval-agent: {error}; running the checks anyway", file=sys.stderr)
    backend_name = args.backend or os.environ.get(AgentEnv.BACKEND) or "cuda"
    config, expected, baseline = _config(node, backend_name, writer)
    port_text = os.environ.get(AgentEnv.METRICS_PORT)
    backend = select_backend(args.backend, args.simulate)
    metrics = start_metrics(int(port_text) if port_text else None, backend.name)
    display = Display(metrics=metrics)
    reporter = FindingsWriter(display, writer)
    stop = threading.Event()
    stop_on_signals(stop)
    record = RunRecord()
    try:
        result = run_checks(
            config,
            backend,
            reporter,
            node=node,
            expected_gpus=expected,
            expected_gpus_source=expected_gpus_source(os.environ),
            on_samples=display.samples,
            stop=stop,
            record=record,
            on_reading=display.state_reading,
            devices=parse_uuids(os.environ.get(AgentEnv.DEVICE_UUIDS)),
        )
    finally:
        display.close()
        backend.close()
    if baseline is not None:
        result = baselines.judge(result, *baseline)
    print(render_table(result), file=sys.stderr)
    if result.reason is Reason.AGENT_STOPPED:
        # Stopped means evicted, deleted or timed out: the operator writes that reason, and a
        # partial result written now could overwrite it.
        raise AgentError("stopped before the checks finished; the report is left to the operator")
    status = build_report_status(result, _evidence(result, record))
    leave_termination_message(status)
    try:
        writer.patch_status(status)
    except ReportUnreachableError as error:
        print(f"gpuval-agent: {error}; the verdict is in the termination message", file=sys.stderr)
    return exit_code(result)
