"""Pure: what gpuval reads of a remediation object and of a failing node's report.

An engine says a repair ended in its object's status, and the engines say it differently, so the
reading is generic, after the conventions they publish:
- Medik8s (SelfNodeRemediation, and every remediation NodeHealthCheck drives: medik8s/common's
  conditions): `Succeeded` True (done) or False (ended without success); `Processing` False (ended);
- NVIDIA NVSentinel's janitor (RebootNode, GPUReset): `status.completionTime` set when it ended
  either way, `NodeReady` (RebootNode) False when it failed; its fault remediation names a
  completion condition type per kind, `Completed` for GPUReset;
- Job-like kinds: `Complete`/`Completed`/`Done` True, `Failed` True; `status.phase` Succeeded,
  Completed, Done, Failed or Error.
Either end is an end: the re-validation under load decides whether the repair helped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuval_api.checks import CheckName
from gpuval_api.remediation import (
    ENGINE_DONE_PHASES,
    ENGINE_FAILED_PHASES,
    EngineCondition,
    RepairEnd,
)
from gpuval_api.report import FailureKey, StatusKey
from gpuval_operator.remediation.record import FailingGpus
from gpuval_operator.timestamps import parse_time

_C = EngineCondition
DONE_CONDITIONS = (_C.COMPLETED, _C.COMPLETE, _C.DONE)
# Conditions whose False, once the object has a completion time, says the repair failed.
OUTCOME_CONDITIONS = (_C.SUCCEEDED, _C.NODE_READY, _C.READY, _C.COMPLETED, _C.COMPLETE)


def _conditions(status: Mapping[str, Any]) -> dict[str, str]:
    found: dict[str, str] = {}
    for cond in status.get("conditions") or []:
        if isinstance(cond, Mapping) and isinstance(cond.get("type"), str):
            found[cond["type"]] = str(cond.get("status"))
    return found


def object_end(obj: Mapping[str, Any]) -> RepairEnd | None:
    """How the object says its repair ended (Done or Failed); None while it goes on."""
    status = obj.get("status")
    if not isinstance(status, Mapping):
        return None
    conditions = _conditions(status)
    succeeded = conditions.get(_C.SUCCEEDED)
    if succeeded in ("True", "False"):
        return RepairEnd.DONE if succeeded == "True" else RepairEnd.FAILED
    if conditions.get(_C.FAILED) == "True":
        return RepairEnd.FAILED
    if any(conditions.get(c) == "True" for c in DONE_CONDITIONS):
        return RepairEnd.DONE
    if conditions.get(_C.PROCESSING) == "False":
        return RepairEnd.DONE
    if status.get("completionTime"):
        failed = any(conditions.get(c) == "False" for c in OUTCOME_CONDITIONS)
        return RepairEnd.FAILED if failed else RepairEnd.DONE
    phase = status.get("phase")
    if phase in ENGINE_DONE_PHASES:
        return RepairEnd.DONE
    if phase in ENGINE_FAILED_PHASES:
        return RepairEnd.FAILED
    return None


def pci_bus_id(nvml: str) -> str:
    """NVML's PCI bus ID (an 8-digit domain, 00000000:14:00.0) in the 4-digit form sysfs, lspci,
    `nvidia-smi -i` and NVSentinel's GPUReset take (0000:14:00.0)."""
    parts = nvml.strip().lower().split(":")
    if len(parts) == 3:
        parts[0] = parts[0][-4:].rjust(4, "0")
    return ":".join(parts)


def failing_gpus(report: Mapping[str, Any] | None) -> FailingGpus:
    """The GPUs a report's failures name (UUID and PCI bus ID from its environment record; every
    GPU of the node when no failure names one) and the checks that failed (CheckName values)."""
    if not report:
        return FailingGpus()
    status = report.get("status") or {}
    failures = [f for f in status.get(StatusKey.FAILURES) or [] if isinstance(f, Mapping)]
    names = {c.value for c in CheckName}
    checks = tuple(
        dict.fromkeys(
            str(f.get(FailureKey.CHECK)) for f in failures if str(f.get(FailureKey.CHECK)) in names
        )
    )
    indices = {f.get(FailureKey.GPU) for f in failures if isinstance(f.get(FailureKey.GPU), int)}
    result = status.get(StatusKey.RESULT) or {}
    gpus = [
        g
        for g in (result.get("environment") or {}).get("gpus") or []
        if isinstance(g, Mapping) and (not indices or g.get("index") in indices)
    ]
    uuids = tuple(str(g["uuid"]) for g in gpus if g.get("uuid"))
    pcis = tuple(pci_bus_id(str(g["pciBusId"])) for g in gpus if g.get("pciBusId"))
    failed_at = parse_time(status.get(StatusKey.COMPLETED_AT))
    return FailingGpus(uuids=uuids, pci_bus_ids=pcis, checks=checks, failed_at=failed_at)
