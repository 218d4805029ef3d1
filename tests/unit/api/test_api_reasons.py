"""The diagnosis catalogue: every reason has a summary and a hint, names are CamelCase."""

from __future__ import annotations

import re

from gpuval_api.reasons import REASONS, Reason, Severity


def test_every_reason_has_a_catalogue_entry_with_summary_and_hint() -> None:
    assert set(REASONS) == set(Reason)
    for reason, entry in REASONS.items():
        assert entry.summary.strip(), reason
        assert entry.hint.strip(), reason


def test_reason_names_are_camel_case() -> None:
    for reason in Reason:
        assert re.fullmatch(r"[A-Z][A-Za-z0-9]+", reason.value), reason


def test_issue_three_diagnoses_and_operator_reasons_are_present() -> None:
    required = set(
        [
            "DriverNotLoaded",
            "CudaDriverTooOld",
            "GpuCountMismatch",
            "EccUncorrectable",
            "RowRemapPending",
            "RowRemapFailed",
            "XidError",
            "ThermalSlowdown",
            "PowerCapped",
            "PcieLinkDegraded",
            "BurnMismatch",
            "BurnNaN",
            "LowThroughput",
            "LowBandwidth",
            "NcclTimeout",
            "NcclLowBusbw",
            "PersistenceModeOff",
            "PodFailed",
            "PodEvicted",
            "PodUnschedulable",
            "NodeGone",
            "TimedOut",
            "NotUniform",
        ]
    )
    assert required <= {r.value for r in Reason}


def test_persistence_mode_off_is_only_a_warning() -> None:
    assert REASONS[Reason.PERSISTENCE_MODE_OFF].severity is Severity.WARNING
    assert REASONS[Reason.BURN_MISMATCH].severity is Severity.ERROR
