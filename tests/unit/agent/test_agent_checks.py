"""The shared check logic against the simulated backend: each fault gives its named diagnosis."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from gpuval_agent.allreduce import bus_bandwidth
from gpuval_agent.backends.base import BurnProgress
from gpuval_agent.backends.simulated.backend import SimulatedBackend, SimulationConfig
from gpuval_agent.backends.simulated.hardware import TREE_PREFIX
from gpuval_agent.checks.common import version_tuple
from gpuval_agent.checks.nccl import sweep_sizes
from gpuval_agent.runner import run_checks
from gpuval_api.checks import CheckName, ChecksConfig, parse_checks
from gpuval_api.reasons import Reason, Severity
from gpuval_api.result import AgentResult, CheckResult, Verdict


class Recorder:
    """Reporter that keeps what it was told."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.finished: list[str] = []
        self.burn: list[BurnProgress] = []

    def check_started(self, name: str, expected_seconds: float | None) -> None:
        self.started.append(name)

    def check_progress(self, name: str, fraction: float | None, detail: str) -> None:
        pass

    def burn_progress(self, progress: BurnProgress) -> None:
        self.burn.append(progress)

    def check_finished(self, result: CheckResult) -> None:
        self.finished.append(result.name)


def _run(simulation: str, config: ChecksConfig | None = None, **kwargs: object) -> AgentResult:
    document = {"timeScale": 0.001} | json.loads(simulation)
    backend = SimulatedBackend(SimulationConfig.parse(json.dumps(document)))
    return run_checks(config or ChecksConfig(), backend, Recorder(), sample_interval=0.01, **kwargs)  # type: ignore[arg-type]


def _errors(result: AgentResult) -> list[tuple[str, Reason, int | None]]:
    return [
        (check.name, f.reason, f.gpu)
        for check in result.checks
        for f in check.findings
        if f.severity is Severity.ERROR
    ]


def test_a_healthy_simulated_node_passes_every_check() -> None:
    result = _run('{"gpus": 4}')
    assert result.verdict is Verdict.PASSED
    assert [c.name for c in result.checks] == [n.value for n in ChecksConfig().enabled()]
    assert all(c.verdict is Verdict.PASSED for c in result.checks)
    assert result.backend == "simulated"
    burn = result.check("burn")
    assert burn is not None and len(burn.gpus) == 4
    assert all(g.metrics["tflops"] > 700 for g in burn.gpus)


@pytest.mark.parametrize(
    ("fault", "check", "reason"),
    [
        ('{"kind": "miscompare", "gpu": 2}', "burn", Reason.BURN_MISMATCH),
        ('{"kind": "nan", "gpu": 2}', "burn", Reason.BURN_NAN),
        ('{"kind": "overheat", "gpu": 2}', "burn", Reason.OVER_TEMPERATURE),
        ('{"kind": "thermal-slowdown", "gpu": 2}', "burn", Reason.THERMAL_SLOWDOWN),
        ('{"kind": "power-capped", "gpu": 2}', "burn", Reason.POWER_CAPPED),
        ('{"kind": "xid", "gpu": 2, "xid": 79}', "burn", Reason.XID_ERROR),
        ('{"kind": "pcie-degraded", "gpu": 2}', "bandwidth", Reason.PCIE_LINK_DEGRADED),
        ('{"kind": "low-bandwidth", "gpu": 2}', "bandwidth", Reason.LOW_BANDWIDTH),
        ('{"kind": "ecc-uncorrectable", "gpu": 2}', "state", Reason.ECC_UNCORRECTABLE),
        ('{"kind": "row-remap-pending", "gpu": 2}', "state", Reason.ROW_REMAP_PENDING),
    ],
)
def test_each_gpu_fault_fails_its_check_with_the_named_reason_on_that_gpu(
    fault: str, check: str, reason: Reason
) -> None:
    result = _run(f'{{"gpus": 4, "faults": [{fault}]}}')
    assert result.verdict is Verdict.FAILED
    assert (check, reason, 2) in _errors(result)
    failed = result.check(check)
    assert failed is not None and failed.verdict is Verdict.FAILED
    failed_gpus = {g.index for g in failed.gpus if g.verdict is Verdict.FAILED}
    # A slow GPU also fails the peer copies of every GPU paired with it.
    assert failed_gpus == ({0, 1, 2, 3} if reason is Reason.LOW_BANDWIDTH else {2})


def test_a_miscompare_names_the_gpu_and_the_iteration() -> None:
    result = _run('{"gpus": 2, "faults": [{"kind": "miscompare", "gpu": 1, "iteration": 7}]}')
    burn = result.check("burn")
    assert burn is not None and burn.reason is Reason.BURN_MISMATCH
    assert "GPU 1" in burn.message and "iteration 7:" in burn.message


def test_thermal_slowdown_also_lowers_throughput_below_the_default_fraction() -> None:
    result = _run('{"gpus": 2, "faults": [{"kind": "thermal-slowdown", "gpu": 0}]}')
    assert ("burn", Reason.LOW_THROUGHPUT, 0) in _errors(result)


def test_a_missing_gpu_fails_the_count_against_what_the_node_advertises() -> None:
    result = _run('{"gpus": 8, "faults": [{"kind": "missing-gpu"}]}')
    driver = result.check("driver")
    assert driver is not None and driver.reason is Reason.GPU_COUNT_MISMATCH
    assert "7 GPUs, expected 8" in driver.message


def test_the_configured_expected_count_wins_over_the_advertised_one() -> None:
    config = parse_checks('{"driver": {"expectedGpus": 4}}')
    result = _run('{"gpus": 8}', config)
    driver = result.check("driver")
    assert driver is not None and driver.reason is Reason.GPU_COUNT_MISMATCH
    assert "driver.expectedGpus" in driver.message


def test_a_driver_older_than_the_runtime_is_cuda_driver_too_old() -> None:
    result = _run('{"gpus": 2, "cuda": "12.2", "cudaRuntime": "12.8"}')
    assert ("driver", Reason.CUDA_DRIVER_TOO_OLD, None) in _errors(result)


def test_no_driver_fails_the_driver_check_and_skips_every_other() -> None:
    result = _run('{"faults": [{"kind": "no-driver"}]}')
    assert result.reason is Reason.DRIVER_NOT_LOADED
    verdicts = {c.name: c.verdict for c in result.checks}
    assert verdicts == {
        "state": Verdict.SKIPPED,
        "driver": Verdict.FAILED,
        "health": Verdict.SKIPPED,
        "burn": Verdict.SKIPPED,
        "bandwidth": Verdict.SKIPPED,
        "nccl": Verdict.SKIPPED,
    }


def test_slow_nccl_peer_fails_on_bus_bandwidth() -> None:
    result = _run('{"gpus": 4, "faults": [{"kind": "slow-nccl", "gpu": 3}]}')
    nccl = result.check("nccl")
    assert nccl is not None and nccl.reason is Reason.NCCL_LOW_BUSBW
    assert nccl.log_tail is not None and "rank 3" in nccl.log_tail


def test_nccl_is_skipped_not_failed_on_a_single_gpu_node() -> None:
    result = _run('{"gpus": 1}')
    nccl = result.check("nccl")
    assert nccl is not None and nccl.verdict is Verdict.SKIPPED
    assert result.verdict is Verdict.PASSED


def test_persistence_off_is_a_warning_that_does_not_fail() -> None:
    # The simulated GPUs run persistence mode on; an absolute p2p floor shows warnings stay apart.
    result = _run('{"gpus": 2}', parse_checks('{"bandwidth": {"minP2pGBps": {"absolute": 1}}}'))
    assert result.verdict is Verdict.PASSED


def test_a_hang_runs_until_the_agent_is_told_to_stop() -> None:
    stop = threading.Event()
    timer = threading.Timer(0.3, stop.set)
    timer.start()
    result = _run('{"gpus": 1, "faults": [{"kind": "hang"}]}', stop=stop)
    # It returned only because it was told to stop (a burn that did not hang ends at once).
    assert stop.is_set()
    assert [c.verdict for c in result.checks][-2:] == [Verdict.SKIPPED, Verdict.SKIPPED]
    assert result.verdict is Verdict.FAILED and result.reason is Reason.AGENT_STOPPED


def test_absolute_threshold_applies_on_an_unknown_part() -> None:
    config = parse_checks('{"burn": {"minTflops": {"absolute": 900, "fractionOfExpected": 0.1}}}')
    result = _run('{"gpus": 1, "product": "NVIDIA Future GPU"}', config.only([CheckName.BURN]))
    assert ("burn", Reason.LOW_THROUGHPUT, 0) in _errors(result)


def test_sweep_sizes_double_from_min_and_end_at_max() -> None:
    assert sweep_sizes(1 << 20, 5 << 20) == [1 << 20, 2 << 20, 4 << 20, 5 << 20]
    assert sweep_sizes(4096, 4096) == [4096]


def test_bus_bandwidth_follows_nccl_tests() -> None:
    assert bus_bandwidth(100.0, 2) == 100.0
    assert bus_bandwidth(100.0, 8) == 175.0


def test_version_tuple_reads_leading_numbers() -> None:
    assert version_tuple("12.4") < version_tuple("12.10")
    assert version_tuple("13.0.1-rc") == (13, 0, 1)


def test_the_burn_records_each_gpus_reference_fingerprint_with_its_determinants() -> None:
    burn_config = {"burn": {"durationSeconds": 5, "precisions": ["bf16", "fp64"]}}
    result = _run(
        '{"gpus": 2, "faults": [{"kind": "wrong-reference", "gpu": 1}]}',
        ChecksConfig.model_validate(burn_config),
    )
    burn = result.check("burn")
    assert burn is not None
    prints = {(f.precision, f.gpu): f for f in burn.fingerprints}
    assert set(prints) == {("bf16", 0), ("bf16", 1), ("fp64", 0), ("fp64", 1)}
    assert prints["bf16", 0].determinants == prints["bf16", 1].determinants
    assert "NVIDIA H200|" in prints["bf16", 0].determinants
    assert "|bf16|" in prints["bf16", 0].determinants
    # GPU 1 computes a consistently wrong answer: every iteration matches its own (wrong)
    # reference, so only its fingerprint tells.
    assert prints["bf16", 1].value != prints["bf16", 0].value
    assert not [f for f in burn.findings if "iterations" in f.message]


def test_a_sweep_that_stops_below_1_gib_is_held_only_to_an_absolute_busbw() -> None:
    small = ChecksConfig.model_validate({"nccl": {"maxBytes": 1 << 24}})
    assert _run('{"gpus": 8}', small).verdict is Verdict.PASSED
    floor = ChecksConfig.model_validate(
        {"nccl": {"maxBytes": 1 << 24, "minBusbwGBps": {"absolute": 1000}}}
    )
    assert ("nccl", Reason.NCCL_LOW_BUSBW, None) in _errors(_run('{"gpus": 8}', floor))
    slow = _run('{"gpus": 8, "faults": [{"kind": "slow-nccl", "gpu": 0}]}')
    assert ("nccl", Reason.NCCL_LOW_BUSBW, None) in _errors(slow)


@pytest.mark.parametrize("gpu", [5, 0])
def test_one_gpu_of_eight_with_a_wrong_reference_fails_as_the_real_backend_fails_it(
    gpu: int,
) -> None:
    # Issue 42: the double compared no references between the node's GPUs (backends/torch/burn.py
    # does), so a GPU that computes a consistently wrong answer passed on an 8-GPU node.
    result = _run(
        json.dumps({"gpus": 8, "faults": [{"kind": "wrong-reference", "gpu": gpu}]}),
        ChecksConfig.model_validate({"burn": {"durationSeconds": 5}}),
    )
    assert result.verdict is Verdict.FAILED
    assert _errors(result) == [("burn", Reason.BURN_MISMATCH, gpu)]
    burn = result.check("burn")
    assert burn is not None
    [finding] = [f for f in burn.findings if f.severity is Severity.ERROR]
    # checks/burn.py's words for a measurement whose reference_differs, as on a real node.
    assert finding.message == (
        f"GPU {gpu}: its bf16 reference result differs from every other GPU's "
        "(same inputs, same part)"
    )


def test_a_one_gpu_node_with_a_wrong_reference_passes_on_its_own() -> None:
    # No other GPU to compare with: only the run's comparison across nodes can tell.
    result = _run('{"gpus": 1, "faults": [{"kind": "wrong-reference"}]}')
    assert result.verdict is Verdict.PASSED


def _trees(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.glob(f"{TREE_PREFIX}*"))


def test_a_simulated_agent_leaves_no_host_tree_behind_even_without_a_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    backend = SimulatedBackend(SimulationConfig.parse('{"gpus": 2, "timeScale": 0.001}'))
    result = run_checks(ChecksConfig(), backend, Recorder(), sample_interval=0.01)  # type: ignore[arg-type]
    assert result.check("state") is not None and _trees(tmp_path)  # the state check read it
    del backend
    gc.collect()
    assert _trees(tmp_path) == []


def test_the_agent_command_leaves_no_host_tree_behind(tmp_path: Path) -> None:
    simulate = '{"gpus": 2, "timeScale": 0.001, "faults": [{"kind": "xid", "gpu": 1}]}'
    agent = [sys.executable, "-m", "gpuval_agent.cli", "run", "--backend", "simulated"]
    done = subprocess.run(
        [*agent, "--simulate", simulate, "--quiet", "--json", "-"],
        env={**os.environ, "TMPDIR": str(tmp_path)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert json.loads(done.stdout)["reason"] == "XidError", done.stderr
    assert _trees(tmp_path) == []
