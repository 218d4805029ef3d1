"""The optional dcgm check: NVIDIA DCGM's diagnostic (`dcgmi diag -r LEVEL -j`) where the node has
DCGM. Without dcgmi at the configured path, or with its host engine unreachable, the check is
skipped as DcgmNotAvailable: not run, never a pass, never a failure."""

from __future__ import annotations

import os
import socket
import subprocess

from gpuval_agent.checks.common import CheckBuilder, CheckContext
from gpuval_agent.dcgm.parse import DcgmOutputError, parse_diag
from gpuval_api import Reason, Severity, Verdict
from gpuval_api.checks import CheckName, DcgmCheck
from gpuval_api.result import CheckResult

NAME = CheckName.DCGM.value
_CONNECT_SECONDS = 2.0
_OUTPUT_TAIL = 4000
_UNIX = "unix://"


def host_engine_unreachable(address: str) -> str | None:
    """Why nv-hostengine at `address` (host:port, host, or unix://path) cannot be reached; None
    when it accepts a connection."""
    if address.startswith(_UNIX):
        path = address[len(_UNIX) :]
        return None if os.path.exists(path) else f"no socket at {path}"
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        host, port = address, "5555"
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=_CONNECT_SECONDS):
            return None
    except OSError as error:
        return f"{host}:{port}: {error.strerror or error}"


def _not_available(builder: CheckBuilder, why: str) -> CheckResult:
    builder.add(Reason.DCGM_NOT_AVAILABLE, f"DCGM not available: {why}")
    return builder.finish(message=f"skipped: DCGM not available ({why})", verdict=Verdict.SKIPPED)


def run_dcgm(context: CheckContext) -> CheckResult:
    builder = CheckBuilder(NAME, context)
    config = context.config.dcgm
    if not os.access(config.dcgmi_path, os.X_OK):
        return _not_available(builder, f"no executable dcgmi at {config.dcgmi_path}")
    unreachable = host_engine_unreachable(config.host_engine)
    if unreachable is not None:
        return _not_available(builder, f"nv-hostengine not reachable ({unreachable})")
    return _diagnose(builder, config)


def _diagnose(builder: CheckBuilder, config: DcgmCheck) -> CheckResult:
    command = [
        config.dcgmi_path,
        "diag",
        "--host",
        config.host_engine,
        "-r",
        str(config.level),
        "-j",
    ]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=config.timeout_seconds, check=False
        )
    except subprocess.TimeoutExpired:
        builder.add(
            Reason.DCGM_DIAG_FAILED,
            f"dcgmi diag -r {config.level} did not finish within {config.timeout_seconds:g} s "
            "(dcgm.timeoutSeconds)",
        )
        return builder.finish()
    builder.metrics["level"] = config.level
    builder.metrics["exitCode"] = done.returncode
    try:
        outcome = parse_diag(done.stdout)
    except DcgmOutputError as error:
        builder.add(Reason.DCGM_DIAG_FAILED, f"{error} (exit {done.returncode})")
        builder.log_tail = (done.stdout + done.stderr)[-_OUTPUT_TAIL:]
        return builder.finish()
    builder.metrics["tests"] = outcome.tests
    builder.metrics["passed"] = outcome.passed
    builder.metrics["skipped"] = outcome.skipped
    if outcome.runtime_error:
        builder.add(Reason.DCGM_DIAG_FAILED, f"DCGM runtime error: {outcome.runtime_error}")
    for finding in outcome.findings:
        severity = Severity.WARNING if finding.warning_only else None
        builder.add(finding.reason, finding.message, gpu=finding.gpu, severity=severity)
    for gpu in sorted({f.gpu for f in outcome.findings if f.gpu is not None}):
        builder.gpu_metric(gpu, "dcgmFindings", sum(f.gpu == gpu for f in outcome.findings))
    if done.returncode != 0 and not builder.failed:
        builder.add(
            Reason.DCGM_DIAG_FAILED,
            f"dcgmi diag exited {done.returncode} without naming a failure",
        )
        builder.log_tail = (done.stdout + done.stderr)[-_OUTPUT_TAIL:]
    version = f" (DCGM {outcome.version})" if outcome.version else ""
    return builder.finish(
        message=""
        if builder.failed
        else f"level {config.level}: {outcome.passed} of {outcome.tests} results passed{version}"
    )
