"""The state check on the real backend (NVML, this machine's sysfs and kernel log): it reads every
GPU, says by name what the machine does not have, reads again after a burn, and a bundle of its
readings decodes. No timing is asserted (benchmarks/state_probe.py prints the figures)."""

from __future__ import annotations

import pytest

from gpuval_agent.backends.cuda import CudaBackend
from gpuval_agent.evidence import build_evidence
from gpuval_agent.record import RunRecord
from gpuval_agent.runner import run_checks
from gpuval_api.checks import CheckName, ChecksConfig, parse_checks
from gpuval_api.evidence import decode_evidence, evidence_status
from gpuval_api.reasons import Reason
from gpuval_api.result import AgentResult, CheckResult

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
GPUS = torch.cuda.device_count()


class Quiet:
    """A reporter that keeps nothing: the result document has it all."""

    def check_started(self, name: str, expected_seconds: float | None) -> None: ...

    def check_progress(self, name: str, fraction: float | None, detail: str) -> None: ...

    def burn_progress(self, progress: object) -> None: ...

    def check_finished(self, result: CheckResult) -> None: ...


def _run(config: ChecksConfig, record: RunRecord) -> tuple[AgentResult, CheckResult]:
    backend = CudaBackend()
    try:
        result = run_checks(config, backend, Quiet(), record=record)  # type: ignore[arg-type]
    finally:
        backend.close()
    state = result.check(CheckName.STATE)
    assert state is not None
    return result, state


def test_the_state_check_reads_every_gpu_and_names_what_the_machine_lacks() -> None:
    record = RunRecord()
    _, state = _run(ChecksConfig().only([CheckName.STATE]), record)
    assert Reason.CHECK_ERROR not in {f.reason for f in state.findings}, state.findings
    assert len(state.gpus) == GPUS
    reading = record.readings[0]
    for gpu in reading.gpus:
        assert gpu.bus_id and gpu.pcie_max_width and gpu.pcie_max_gen
        assert gpu.ecc_enabled is not None and gpu.power_limit_watts
    # Whatever the machine lacks is in notRead by name; what it has is read.
    if not reading.host.ports:
        assert any(line.startswith("InfiniBand/RoCE:") for line in state.not_read)
    if not reading.host.nvswitches:
        assert any(line.startswith("NVSwitch: none") for line in state.not_read)
    log = reading.host.kernel_log
    assert (log.source is not None) != any(
        line.startswith("kernel log:") for line in state.not_read
    )
    print("state:", state.verdict, state.message, state.metrics, state.not_read, state.findings)


def test_the_state_is_read_again_after_the_burn_and_a_bundle_decodes() -> None:
    record = RunRecord()
    config = parse_checks('{"burn": {"durationSeconds": 5}}').only(
        [CheckName.STATE, CheckName.BURN]
    )
    result, state = _run(config, record)
    assert state.metrics["afterReadings"] == 1
    assert [label for label, _ in record.counters] == ["before the load checks", "after burn"]
    document = decode_evidence(evidence_status(build_evidence(result, record)))
    assert len(document["sections"]["nvml"]["before"]) == GPUS
    assert document["sections"]["counters"]["readings"][1]["label"] == "after burn"
    print("grew during the burn:", record.growth)
