"""`kubectl gpuval evidence NODE` (gpuval_kubectl.evidence): which of the node's reports it writes,
what it says when none holds a bundle, and the file it writes, checked against the sha256; and the
failing nodes' state findings `kubectl gpuval status NAME` prints (the API round trip:
tests/integration/agent/test_agent_evidence.py)."""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from gpuval_api.crd import GpuValidation
from gpuval_api.evidence import Section, encode_evidence, evidence_status
from gpuval_api.stateview import StateLine
from gpuval_api.views import FailureView, FleetView, UnitView
from gpuval_kubectl import cli
from gpuval_kubectl.cluster import PluginError
from gpuval_kubectl.evidence import NoEvidenceError, choose, describe
from gpuval_kubectl.render import render_status

BUNDLE = evidence_status(
    encode_evidence(
        {"node": "gpu-1", "reason": "KernelXidResetGpu"},
        [Section("counters", {"grew": [{"counter": "GPU 3 NVLink 3: crcFlit errors"}]}, 60)],
    )
)


def report(
    run: str,
    verdict: str | None,
    completed: str | None,
    *,
    node: str = "gpu-1",
    validation: str = "fleet",
    reason: str | None = None,
    evidence: dict[str, Any] | None = None,
) -> dict[str, Any]:
    status: dict[str, Any] = {"verdict": verdict, "reason": reason, "completedAt": completed}
    if evidence is not None:
        status["evidence"] = evidence
    return {
        "metadata": {"name": f"{validation}-{run}-{node}", "creationTimestamp": completed},
        "spec": {"validation": validation, "run": run, "node": node},
        "status": {k: v for k, v in status.items() if v is not None},
    }


FAILED_1 = report(
    "1-a", "Failed", "2026-12-01T10:00:00Z", reason="KernelXidResetGpu", evidence=BUNDLE
)
PASSED_2 = report("2-b", "Passed", "2026-12-01T11:00:00Z")
FAILED_3 = report("3-c", "Failed", "2026-12-01T12:00:00Z", reason="BurnNaN", evidence=BUNDLE)


def test_the_latest_failing_report_is_chosen_and_a_later_pass_is_named() -> None:
    chosen, later = choose([PASSED_2, FAILED_1], "gpu-1")
    assert chosen.run == "1-a" and later is not None and later.run == "2-b"
    chosen, later = choose([FAILED_1, PASSED_2, FAILED_3], "gpu-1")
    assert chosen.run == "3-c" and later is None


def test_validation_and_run_narrow_the_choice() -> None:
    other = report("1-a", "Failed", "2026-12-01T13:00:00Z", validation="burnin", evidence=BUNDLE)
    chosen, _ = choose([FAILED_1, FAILED_3, other], "gpu-1", validation="fleet")
    assert (chosen.validation, chosen.run) == ("fleet", "3-c")
    chosen, _ = choose([FAILED_1, FAILED_3, other], "gpu-1", validation="fleet", run="1-a")
    assert chosen.run == "1-a"
    with pytest.raises(NoEvidenceError, match="in several validations \\(burnin, fleet\\)"):
        choose([FAILED_1, other], "gpu-1", run="1-a")


def test_a_node_that_passed_has_nothing_to_write_and_says_so() -> None:
    with pytest.raises(NoEvidenceError) as said:
        choose([PASSED_2], "gpu-1")
    assert str(said.value) == (
        "node 'gpu-1' has no failing report (node 'gpu-1'), so there is no evidence to write: its "
        "latest, GpuNodeReport fleet-2-b-gpu-1 (validation fleet, run 2-b), is Passed"
    )


def test_a_failure_without_a_bundle_says_the_operator_recorded_it() -> None:
    gone = report("4-d", "Failed", "2026-12-01T14:00:00Z", reason="NodeGone")
    with pytest.raises(NoEvidenceError, match="is Failed \\(NodeGone\\) but holds no evidence"):
        choose([FAILED_1, gone], "gpu-1")


def test_a_node_without_reports_and_another_nodes_reports_are_told_apart() -> None:
    with pytest.raises(NoEvidenceError, match="no GpuNodeReport for node 'gpu-2'"):
        choose([FAILED_1], "gpu-2")


def test_the_summary_says_what_the_bundle_holds_and_that_it_was_verified() -> None:
    chosen, later = choose([FAILED_1, PASSED_2], "gpu-1")
    document = {"sections": {"counters": {}, "ncclLog": None}, "cut": []}
    text = describe(chosen, later, document, "wrote /x (10 bytes, gzip)")
    assert text.splitlines()[0] == (
        "wrote /x (10 bytes, gzip): the evidence of GpuNodeReport fleet-1-a-gpu-1 (validation "
        "fleet, run 1-a), Failed (KernelXidResetGpu)"
    )
    assert f"sha256 {BUNDLE['sha256']} (verified)" in text
    assert "  sections: counters" in text
    assert "note: the node has a later report, GpuNodeReport fleet-2-b-gpu-1" in text


class _Reports:
    """The one read `write_evidence` makes, answered from a list."""

    def __init__(self, *reports: dict[str, Any]) -> None:
        self.reports = list(reports)

    def node_reports(self, node: str, validation: str | None, run: str | None) -> list[Any]:
        return self.reports


def _args(*argv: str) -> argparse.Namespace:
    return cli.build_parser().parse_args(["evidence", *argv])


def test_the_file_is_the_bundle_as_gzip_json(tmp_path: Path) -> None:
    out = tmp_path / "gpu-1.json.gz"
    said = cli.write_evidence(_Reports(FAILED_1), _args("gpu-1", "-o", str(out)))  # type: ignore[arg-type]
    assert said.startswith(f"wrote {out} (")
    document = json.loads(gzip.decompress(out.read_bytes()))
    assert document["node"] == "gpu-1" and "counters" in document["sections"]
    printed = cli.write_evidence(_Reports(FAILED_1), _args("gpu-1", "-o", "-"))  # type: ignore[arg-type]
    assert json.loads(printed) == document


def test_a_damaged_bundle_is_refused_and_no_file_written(tmp_path: Path) -> None:
    damaged = {**BUNDLE, "sha256": "0" * 64}
    out = tmp_path / "x.json.gz"
    bad = report("1-a", "Failed", "2026-12-01T10:00:00Z", evidence=damaged)
    with pytest.raises(PluginError, match="the bundle is damaged"):
        cli.write_evidence(_Reports(bad), _args("gpu-1", "-o", str(out)))  # type: ignore[arg-type]
    assert not out.exists()


def test_status_adds_a_failing_nodes_state_warnings_and_unlisted_errors_each_hint_once() -> None:
    lines = (
        StateLine("bad", "Error", "NvlinkDown", "GPU 1: 17 of 18 NVLinks active: link 5", "reseat"),
        StateLine("bad", "Error", "NvlinkDown", "GPU 4: 17 of 18 NVLinks active: link 2", "reseat"),
        StateLine("bad", "Warning", "IbPortErrors", "mlx5_1 port 1: symbol_error 40", "cable"),
        StateLine("bad", "Warning", "IbPortErrors", "mlx5_2 port 1: symbol_error 41", "cable"),
        StateLine("ok", "Warning", "PcieAerCorrectable", "GPU 0: 120 correctable", "watch"),
    )
    # The report's failures list the first NVLink finding (its message cut to one line).
    listed = FailureView("bad", "state", "NvlinkDown", "GPU 1: 17 of 18 NVLinks…", "reseat", 1)
    units = (UnitView("bad", "Failed", failures=(listed,)), UnitView("ok", "Passed"))
    view = FleetView(
        "GpuValidation f", "fleet", "node", "Failed", units, failures=(listed,), state=lines
    )
    out = render_status(view, GpuValidation.model_validate({"metadata": {"name": "f"}}))
    section = out.split("More state of failing nodes (state check, not listed above): 3\n", 1)[1]
    assert section.splitlines()[:5] == [
        "  bad  Error  NvlinkDown: GPU 4: 17 of 18 NVLinks active: link 2",
        "      hint: reseat",
        "  bad  Warning  IbPortErrors: mlx5_1 port 1: symbol_error 40",
        "      hint: cable",
        "  bad  Warning  IbPortErrors: mlx5_2 port 1: symbol_error 41",
    ]
    assert "PcieAerCorrectable" not in out  # a passing node's warning is not a failing node's


def test_status_adds_no_state_section_when_the_failures_list_every_finding() -> None:
    line = StateLine("bad", "Error", "NvlinkDown", "GPU 1: 17 of 18 NVLinks active", "reseat")
    listed = FailureView("bad", "state", "NvlinkDown", "GPU 1: 17 of 18 NVLinks active", "r", 1)
    units = (UnitView("bad", "Failed", failures=(listed,)),)
    view = FleetView(
        "GpuValidation f", "fleet", "node", "Failed", units, failures=(listed,), state=(line,)
    )
    out = render_status(view, GpuValidation.model_validate({"metadata": {"name": "f"}}))
    assert "More state" not in out
