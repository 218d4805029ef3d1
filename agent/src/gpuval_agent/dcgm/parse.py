"""`dcgmi diag -j` output to findings. Pure.

The format is DCGM's own (no published stable schema; NVIDIA asks CLI consumers to pin and test
it): DCGM 4.x writes {"DCGM Diagnostic": {"test_categories": [{"category", "tests": [{"name",
"results": [{"entity_group", "entity_group_id", "entity_id", "status", "warnings": [{"warning",
"error_id", "error_category", "error_severity"}], "info": [...]}], "test_summary": {...}}]}],
"runtime_error"?}, "entity_groups": [...], "metadata": {"version", "Driver Version Detected"}}
(dcgmi/Diag.cpp HelperJsonBuildOutput, testing/python3/dcgm_diag_schema.json in NVIDIA/DCGM
4.6.0); DCGM 3.x names the root "DCGM GPU Diagnostic" and a result's GPU "gpu_id"/"gpu_ids".
A result's status is Pass, Skip, Warn, Fail or "Not Run". Error categories and severities are
dcgmErrorCategory_t and dcgmErrorSeverity_t of dcgmlib/dcgm_errors.h, as the "Diagnostic Errors"
page of DCGM's documentation lists them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from gpuval_api import Reason

ROOTS = ("DCGM Diagnostic", "DCGM GPU Diagnostic")
# dcgmErrorCategory_t -> the reason that names it.
CATEGORY_REASONS: dict[int, Reason] = {
    1: Reason.DCGM_PERFORMANCE_ERROR,  # PERF_THRESHOLD
    2: Reason.DCGM_PERFORMANCE_ERROR,  # PERF_VIOLATION
    3: Reason.DCGM_SOFTWARE_ERROR,  # SOFTWARE_CONFIG
    4: Reason.DCGM_SOFTWARE_ERROR,  # SOFTWARE_LIBRARY
    5: Reason.DCGM_SOFTWARE_ERROR,  # SOFTWARE_XID
    6: Reason.DCGM_SOFTWARE_ERROR,  # SOFTWARE_CUDA
    7: Reason.DCGM_SOFTWARE_ERROR,  # SOFTWARE_EUD
    8: Reason.DCGM_SOFTWARE_ERROR,  # SOFTWARE_OTHER
    9: Reason.DCGM_THERMAL_POWER_ERROR,  # HARDWARE_THERMAL
    10: Reason.DCGM_MEMORY_ERROR,  # HARDWARE_MEMORY
    11: Reason.DCGM_INTERCONNECT_ERROR,  # HARDWARE_NVLINK
    12: Reason.DCGM_INTERCONNECT_ERROR,  # HARDWARE_NVSWITCH
    13: Reason.DCGM_INTERCONNECT_ERROR,  # HARDWARE_PCIE
    14: Reason.DCGM_THERMAL_POWER_ERROR,  # HARDWARE_POWER
}
SEVERITIES = {
    0: "NONE",
    1: "MONITOR",
    2: "ISOLATE",
    3: "UNKNOWN",
    4: "TRIAGE",
    5: "CONFIG",
    6: "RESET",
}
_FAILED = {"fail"}
_WARNED = {"warn"}


class DcgmOutputError(ValueError):
    """dcgmi's output is not a diagnostic document this parser knows."""


@dataclass(frozen=True, slots=True)
class DcgmFinding:
    reason: Reason
    message: str
    gpu: int | None
    warning_only: bool  # status Warn: reported, does not fail


@dataclass(frozen=True, slots=True)
class DcgmOutcome:
    version: str | None
    tests: int  # test results read
    passed: int
    skipped: int
    findings: list[DcgmFinding]
    runtime_error: str | None = None


def _gpu(result: dict[str, Any]) -> int | None:
    if str(result.get("entity_group", "GPU")).upper() != "GPU":
        return None
    for key in ("entity_id", "gpu_id"):
        value = result.get(key)
        if isinstance(value, int) or (isinstance(value, str) and value.isdigit()):
            return int(value)
    ids = str(result.get("gpu_ids", "")).split(",")
    return int(ids[0]) if len(ids) == 1 and ids[0].strip().isdigit() else None


def _findings(category: str, test: str, result: dict[str, Any]) -> list[DcgmFinding]:
    status = str(result.get("status", "")).lower()
    if status not in _FAILED | _WARNED:
        return []
    gpu = _gpu(result)
    where = f"GPU {gpu}: " if gpu is not None else ""
    warnings = result.get("warnings") or []
    if isinstance(warnings, dict):
        warnings = [warnings]
    found = []
    for item in warnings or [{}]:
        # NVVS 1.3 wrote a warning as plain text, later versions as {warning, error_id, ...}.
        warning = item if isinstance(item, dict) else {"warning": item}
        text = " ".join(str(warning.get("warning", "no message")).split())
        category_id = warning.get("error_category")
        reason = Reason.DCGM_DIAG_FAILED
        if isinstance(category_id, int):
            reason = CATEGORY_REASONS.get(category_id, Reason.DCGM_DIAG_FAILED)
        severity = SEVERITIES.get(warning.get("error_severity", -1))
        code = warning.get("error_id")
        detail = ", ".join(
            part
            for part in (
                f"error {code}" if code is not None else "",
                f"DCGM severity {severity}" if severity else "",
            )
            if part
        )
        found.append(
            DcgmFinding(
                reason,
                f"{where}DCGM {category}/{test} {result.get('status')}: {text}"
                + (f" ({detail})" if detail else ""),
                gpu,
                warning_only=status in _WARNED,
            )
        )
    return found


def parse_diag(text: str) -> DcgmOutcome:
    """The findings of one `dcgmi diag -j` document; raises DcgmOutputError for anything else."""
    try:
        document = json.loads(text)
    except ValueError as error:
        raise DcgmOutputError(f"dcgmi diag -j did not print JSON: {error}") from None
    if not isinstance(document, dict):
        raise DcgmOutputError("dcgmi diag -j printed JSON that is not an object")
    root = next((document[k] for k in ROOTS if isinstance(document.get(k), dict)), None)
    if root is None:
        raise DcgmOutputError(f"dcgmi diag -j printed no {ROOTS[0]!r} object")
    metadata = document.get("metadata")
    version = (metadata.get("version") if isinstance(metadata, dict) else None) or root.get(
        "version"
    )
    findings: list[DcgmFinding] = []
    tests = passed = skipped = 0
    for category in root.get("test_categories") or []:
        name = str(category.get("category", "?"))
        for test in category.get("tests") or []:
            for result in test.get("results") or []:
                tests += 1
                status = str(result.get("status", "")).lower()
                passed += status == "pass"
                skipped += status in ("skip", "not run")
                findings.extend(_findings(name, str(test.get("name", "?")), result))
            summary = test.get("test_summary")
            if not test.get("results") and isinstance(summary, dict):
                # A test with no per-entity results: its summary carries the status.
                tests += 1
                passed += str(summary.get("status", "")).lower() == "pass"
                findings.extend(_findings(name, str(test.get("name", "?")), summary))
    runtime_error = root.get("runtime_error")
    return DcgmOutcome(
        version=str(version) if version else None,
        tests=tests,
        passed=passed,
        skipped=skipped,
        findings=findings,
        runtime_error=str(runtime_error) if runtime_error else None,
    )
