"""The evidence bundle: bounded, encoded, decoded and checked (gpuval_api.evidence), built by the
agent from a failing run (gpuval_agent.evidence) and carried in the report status."""

from __future__ import annotations

import gzip
import json
import os
from datetime import UTC, datetime

import pytest

from gpuval_agent.backends.simulated.backend import SimulatedBackend, SimulationConfig
from gpuval_agent.evidence import build_evidence, wanted
from gpuval_agent.record import RunRecord
from gpuval_agent.runner import run_checks
from gpuval_api.checks import ChecksConfig
from gpuval_api.crd import GpuNodeReportStatus
from gpuval_api.evidence import (
    MAX_ENCODED_BYTES,
    EvidenceError,
    Section,
    decode_evidence,
    encode_evidence,
    evidence_gzip,
    evidence_status,
)
from gpuval_api.report import StatusKey, build_report_status, build_running_status
from gpuval_api.result import AgentResult
from tests.unit.agent.test_agent_checks import Recorder


def test_a_bundle_round_trips_with_its_size_and_sha256() -> None:
    bundle = encode_evidence({"node": "n1"}, [Section("counters", {"a": [1, 2, 3]}, 1)])
    status = evidence_status(bundle)
    assert status["encoding"] == "gzip+base64" and status["cut"] == []
    assert status["encodedBytes"] == len(status["data"]) <= MAX_ENCODED_BYTES
    document = decode_evidence(status)
    assert document["node"] == "n1" and document["sections"] == {"counters": {"a": [1, 2, 3]}}
    assert json.loads(gzip.decompress(evidence_gzip(status))) == document
    assert len(json.dumps(document, separators=(",", ":")).encode()) == status["jsonBytes"]


def test_an_oversized_bundle_is_cut_lowest_priority_first_and_says_what_was_cut() -> None:
    noise = [os.urandom(48).hex() for _ in range(4000)]  # incompressible: ~400 KiB of JSON
    bundle = encode_evidence(
        {"node": "n1"},
        [Section("important", {"figures": [1.5, 2.5]}, 9), Section("log", {"lines": noise}, 1)],
    )
    assert bundle.encoded_bytes <= MAX_ENCODED_BYTES
    assert bundle.cut and all(c.startswith("log: ") for c in bundle.cut)
    document = decode_evidence(evidence_status(bundle))
    assert document["sections"]["important"] == {"figures": [1.5, 2.5]}
    assert 0 < len(document["sections"]["log"]["lines"]) < len(noise)
    assert document["cut"] == bundle.cut


def test_a_damaged_bundle_is_refused_by_name() -> None:
    status = evidence_status(encode_evidence({}, [Section("a", "x" * 100, 1)]))
    with pytest.raises(EvidenceError, match="sha256"):
        decode_evidence(status | {"sha256": "0" * 64})
    with pytest.raises(EvidenceError, match="not base64"):
        decode_evidence(status | {"data": "%%%"})
    with pytest.raises(EvidenceError, match="encoding"):
        decode_evidence(status | {"encoding": "zstd"})


def _failing_run(faults: list[dict[str, object]]) -> tuple[AgentResult, RunRecord]:
    document = {"gpus": 8, "timeScale": 0.001, "faults": faults}
    backend = SimulatedBackend(SimulationConfig.parse(json.dumps(document)))
    record = RunRecord()
    try:
        result = run_checks(
            ChecksConfig(), backend, Recorder(), sample_interval=0.01, record=record
        )  # type: ignore[arg-type]
    finally:
        backend.close()
    return result, record


def test_a_failing_run_keeps_its_state_counters_kernel_log_and_failed_checks() -> None:
    result, record = _failing_run(
        [
            {"kind": "kernel-xid", "gpu": 5, "xid": 79},
            {"kind": "nvlink-errors-grow", "gpu": 3, "link": 3},
            {"kind": "slow-nccl", "gpu": 1},
        ]
    )
    assert wanted(result)
    status = evidence_status(build_evidence(result, record))
    document = decode_evidence(status)
    sections = document["sections"]
    assert document["reason"] == "KernelXidReboot" and document["verdict"] == "Failed"
    assert [c["name"] for c in sections["failedChecks"]["checks"]] == ["state", "nccl"]
    assert sections["ncclLog"] == "simulated: rank 1 is slow (slow-nccl fault)"
    assert sections["counters"]["grew"][0]["counter"] == "GPU 3 NVLink 3: crcFlit errors"
    assert [r["label"] for r in sections["counters"]["readings"]] == [
        "before the load checks",
        "after burn",
        "after bandwidth",
        "after nccl",
    ]
    assert any("NVRM: Xid (PCI:0000:1a:00): 79" in line for line in sections["kernelLog"]["lines"])
    assert (
        len(sections["nvml"]["before"]) == 8 and sections["nvml"]["last"]["label"] == "after nccl"
    )
    assert sections["host"]["ports"][0]["device"] == "mlx5_0"


def test_the_report_status_carries_the_bundle_and_a_new_run_clears_it() -> None:
    result, record = _failing_run([{"kind": "row-remap-pending", "gpu": 0}])
    evidence = evidence_status(build_evidence(result, record))
    status = build_report_status(result, evidence)
    model = GpuNodeReportStatus.model_validate(status)
    assert model.evidence is not None and model.evidence.sha256 == evidence["sha256"]
    assert build_report_status(result)[StatusKey.EVIDENCE] is None
    assert build_running_status(datetime.now(UTC))[StatusKey.EVIDENCE] is None


def test_a_passing_run_keeps_no_evidence() -> None:
    result, _ = _failing_run([])
    assert not wanted(result)
