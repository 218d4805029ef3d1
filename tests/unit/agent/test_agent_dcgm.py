"""The dcgm check: DCGM's `dcgmi diag -j` output (recorded in tests/fixtures/dcgm, sources named
in its README) mapped to reasons with hints, and a node without DCGM skipped, never judged."""

from __future__ import annotations

import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuval_agent.backends.simulated.backend import SimulatedBackend, SimulationConfig
from gpuval_agent.dcgm.parse import DcgmOutputError, parse_diag
from gpuval_agent.runner import run_checks
from gpuval_api.checks import CheckName, ChecksConfig
from gpuval_api.reasons import REASONS, Reason, Severity
from gpuval_api.result import CheckResult, Verdict
from tests.unit.agent.test_agent_checks import Recorder

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "dcgm"


def _fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_a_passing_dcgm4_level1_run_has_no_findings() -> None:
    outcome = parse_diag(_fixture("dcgm4-level1-pass.json"))
    assert outcome.findings == [] and outcome.runtime_error is None
    assert (outcome.tests, outcome.passed, outcome.version) == (2, 2, "4.6.0")


def test_dcgm4_failures_map_by_category_to_reasons_naming_gpu_and_error() -> None:
    outcome = parse_diag(_fixture("dcgm4-level2-failures.json"))
    found = {(f.reason, f.gpu) for f in outcome.findings}
    assert found == {(Reason.DCGM_INTERCONNECT_ERROR, 0), (Reason.DCGM_MEMORY_ERROR, 1)}
    memory = next(f for f in outcome.findings if f.reason is Reason.DCGM_MEMORY_ERROR)
    assert memory.message == (
        "GPU 1: DCGM Hardware/memory Fail: A memory mismatch was detected on GPU 1, but no error "
        "was reported by CUDA or NVML. (error 58, DCGM severity ISOLATE)"
    )
    assert outcome.skipped == 2


def test_a_runtime_error_is_kept() -> None:
    outcome = parse_diag(_fixture("dcgm4-runtime-error.json"))
    assert outcome.runtime_error is not None and "unable to establish" in outcome.runtime_error
    assert outcome.tests == 0


def test_the_older_nvvs_form_with_string_warnings_and_gpu_lists_is_read() -> None:
    outcome = parse_diag(_fixture("nvvs13-stress-fail.json"))
    assert len(outcome.findings) == 1
    finding = outcome.findings[0]
    assert finding.reason is Reason.DCGM_DIAG_FAILED and finding.gpu is None
    assert "Stress/sm_stress FAIL: Max stress level of 2128.7" in finding.message
    assert outcome.version == "1.3"


@pytest.mark.parametrize("text", ["", "not json", "[]", '{"something": {}}'])
def test_output_that_is_no_diagnostic_document_is_refused(text: str) -> None:
    with pytest.raises(DcgmOutputError):
        parse_diag(text)


def _run(config: ChecksConfig) -> CheckResult:
    backend = SimulatedBackend(SimulationConfig.parse('{"gpus": 2, "timeScale": 0.001}'))
    result = run_checks(config.only([CheckName.DCGM]), backend, Recorder(), sample_interval=0.01)  # type: ignore[arg-type]
    backend.close()
    dcgm = result.check(CheckName.DCGM)
    assert dcgm is not None
    assert result.verdict is (Verdict.FAILED if dcgm.verdict is Verdict.FAILED else Verdict.PASSED)
    return dcgm


def test_a_node_without_dcgmi_skips_the_check_as_not_available(tmp_path: Path) -> None:
    config = ChecksConfig.model_validate({"dcgm": {"dcgmiPath": str(tmp_path / "dcgmi")}})
    dcgm = _run(config)
    assert dcgm.verdict is Verdict.SKIPPED
    assert dcgm.findings[0].reason is Reason.DCGM_NOT_AVAILABLE
    assert dcgm.findings[0].severity is Severity.WARNING
    assert f"no executable dcgmi at {tmp_path / 'dcgmi'}" in dcgm.message


@pytest.fixture
def host_engine() -> Iterator[str]:
    """A listening TCP port where nv-hostengine would be (dcgmi below never talks to it)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    yield f"127.0.0.1:{server.getsockname()[1]}"
    server.close()


def _dcgmi(tmp_path: Path, fixture: str, exit_code: int) -> Path:
    """A dcgmi stand-in that prints a recorded output and exits as dcgmi does on failure."""
    script = tmp_path / "dcgmi"
    script.write_text(f"#!/bin/sh\ncat '{FIXTURES / fixture}'\nexit {exit_code}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def test_an_unreachable_host_engine_skips_the_check(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = f"127.0.0.1:{probe.getsockname()[1]}"
    dcgmi = _dcgmi(tmp_path, "dcgm4-level1-pass.json", 0)
    config = ChecksConfig.model_validate({"dcgm": {"dcgmiPath": str(dcgmi), "hostEngine": closed}})
    dcgm = _run(config)
    assert dcgm.verdict is Verdict.SKIPPED and "nv-hostengine not reachable" in dcgm.message


def test_dcgm_failures_fail_the_check_with_their_hints(tmp_path: Path, host_engine: str) -> None:
    dcgmi = _dcgmi(tmp_path, "dcgm4-level2-failures.json", 226)
    config = ChecksConfig.model_validate(
        {"dcgm": {"dcgmiPath": str(dcgmi), "hostEngine": host_engine, "level": 2}}
    )
    dcgm = _run(config)
    assert dcgm.verdict is Verdict.FAILED
    assert {f.reason for f in dcgm.findings} == {
        Reason.DCGM_INTERCONNECT_ERROR,
        Reason.DCGM_MEMORY_ERROR,
    }
    assert all(f.hint == REASONS[f.reason].hint for f in dcgm.findings)
    assert dcgm.metrics["level"] == 2 and dcgm.metrics["exitCode"] == 226
    assert {g.index for g in dcgm.gpus if g.verdict is Verdict.FAILED} == {0, 1}


def test_a_passing_diagnostic_passes(tmp_path: Path, host_engine: str) -> None:
    dcgmi = _dcgmi(tmp_path, "dcgm4-level1-pass.json", 0)
    config = ChecksConfig.model_validate(
        {"dcgm": {"dcgmiPath": str(dcgmi), "hostEngine": host_engine}}
    )
    dcgm = _run(config)
    assert dcgm.verdict is Verdict.PASSED
    assert dcgm.message == "level 1: 2 of 2 results passed (DCGM 4.6.0)"
