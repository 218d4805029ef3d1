"""The evidence bundle of a failing run: what the agent keeps beside its result so a person can
see why the node failed (gpuval_api.evidence bounds, encodes and decodes it).

Sections, most important first (the last are cut first when the bundle is too big):
failedChecks (each failed check's result with its raw figures and findings), counters (the error
counters of every state reading and what grew during which check), kernelLog (the lines around
each XID), ncclLog (for an NCCL failure, the NCCL_DEBUG=INFO lines the check kept), nvml (every
GPU's NVML state before the load checks and at the last reading), host (PCIe links, AER and the
InfiniBand ports from sysfs), environment (the environment record).
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

from gpuval_agent.record import RunRecord
from gpuval_api import Reason, Verdict
from gpuval_api.checks import CheckName
from gpuval_api.evidence import EvidenceStatus, Section, encode_evidence
from gpuval_api.report import StatusKey, rfc3339
from gpuval_api.result import AgentResult

_FAILED_CHECKS, _COUNTERS, _KERNEL_LOG, _NCCL_LOG, _NVML, _HOST, _ENVIRONMENT = (
    "failedChecks",
    "counters",
    "kernelLog",
    "ncclLog",
    "nvml",
    "host",
    "environment",
)


def wanted(result: AgentResult) -> bool:
    """A node that failed keeps its evidence; a passing or stopped one does not."""
    return result.verdict is Verdict.FAILED and result.reason is not Reason.AGENT_STOPPED


def _failed_checks(result: AgentResult) -> list[dict[str, Any]]:
    failed = []
    for check in result.checks:
        if check.verdict is not Verdict.FAILED:
            continue
        document = check.model_dump(mode="json", by_alias=True, exclude={"log_tail"})
        failed.append(document)
    return failed


def _nccl_log(result: AgentResult) -> str | None:
    nccl = result.check(CheckName.NCCL)
    if nccl is None or nccl.verdict is not Verdict.FAILED:
        return None
    return nccl.log_tail


def _logs(result: AgentResult) -> dict[str, str]:
    """The kept output of every failed check but NCCL's (which has its own section)."""
    return {
        c.name: c.log_tail
        for c in result.checks
        if c.verdict is Verdict.FAILED and c.log_tail and c.name != CheckName.NCCL
    }


def sections(result: AgentResult, record: RunRecord) -> list[Section]:
    readings = record.readings
    first, last = (readings[0], readings[-1]) if readings else (None, None)
    log = last.host.kernel_log if last is not None else None
    found = [
        Section(
            _FAILED_CHECKS,
            {"checks": _failed_checks(result), "logs": _logs(result)},
            priority=70,
        ),
        Section(
            _COUNTERS,
            {
                "readings": [{"label": label, "counters": c} for label, c in record.counters],
                "grew": [asdict(g) for g in record.growth],
                "missed": record.missed,
            },
            priority=60,
        ),
        Section(_KERNEL_LOG, asdict(log) if log is not None else None, priority=50),
        Section(_NCCL_LOG, _nccl_log(result), priority=40),
        Section(
            _NVML,
            {
                "before": [asdict(g) for g in first.gpus] if first else [],
                "last": {"label": last.label, "gpus": [asdict(g) for g in last.gpus]}
                if last is not None and last is not first
                else None,
            },
            priority=30,
        ),
        Section(
            _HOST,
            {k: v for k, v in asdict(last.host).items() if k != "kernel_log"} if last else None,
            priority=20,
        ),
        Section(_ENVIRONMENT, result.environment.model_dump(mode="json", by_alias=True), 10),
    ]
    return found


def build_evidence(result: AgentResult, record: RunRecord) -> EvidenceStatus:
    """The bounded, encoded bundle of a run (gpuval_api.evidence.MAX_ENCODED_BYTES)."""
    header = {
        "node": result.node or result.environment.hostname,
        StatusKey.VERDICT.value: str(result.verdict),
        StatusKey.REASON.value: str(result.reason) if result.reason else None,
        StatusKey.MESSAGE.value: result.message,
        "agentVersion": result.agent_version,
        "backend": result.backend,
        "createdAt": rfc3339(datetime.now(UTC)),
    }
    return encode_evidence(header, sections(result, record))
