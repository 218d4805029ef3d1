"""The real backend end to end: environment record, bandwidth, NCCL (and its hang), the CLI.

Nothing here holds CUDA in the test process itself (the CLI runs are agents of their own: one would
see the test process on its GPUs and leave them untested, GpuInUse); tests/gpu/conftest.py runs the
modules that do last."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuval_agent.memtest import MemoryFlip, flip_json
from gpuval_api.checks import CheckName, MemoryPattern, parse_checks
from gpuval_api.env import AgentEnv
from gpuval_api.reasons import Reason
from gpuval_api.result import Verdict

GIB = 1 << 30

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
GPUS = torch.cuda.device_count()

cuda = pytest.importorskip("gpuval_agent.backends.cuda")


def test_environment_record_names_every_gpu_and_the_driver() -> None:
    backend = cuda.CudaBackend()
    try:
        environment = backend.environment()
        early_runtime = environment.cuda_runtime_version
        backend.finish_environment(environment)
    finally:
        backend.close()
    assert early_runtime == environment.cuda_runtime_version  # the tag agreed with torch
    assert environment.gpu_count == GPUS
    assert environment.driver_version
    assert environment.cuda_driver_version and environment.cuda_runtime_version
    assert environment.torch_version and environment.nccl_version
    for gpu in environment.gpus:
        assert gpu.uuid and gpu.uuid.startswith("GPU-")
        assert gpu.name and gpu.memory_total_bytes
        assert gpu.pcie.max_gen and gpu.pcie.max_width


def test_cuda_initialises_on_every_gpu() -> None:
    backend = cuda.CudaBackend()
    try:
        assert backend.cuda_init(list(range(GPUS))) == dict.fromkeys(range(GPUS))
    finally:
        backend.close()


@pytest.mark.skipif(GPUS < 2, reason="needs 2 GPUs")
def test_all_reduce_sweep_returns_every_size_with_a_correct_sum() -> None:
    sizes = [1 << 20, 64 << 20]
    outcome = cuda.all_reduce_processes(list(range(GPUS)), sizes, 5, 180)
    assert not outcome.timed_out and outcome.error is None, outcome.log_tail
    assert [s.bytes for s in outcome.sizes] == sizes
    assert all(s.seconds > 0 for s in outcome.sizes)


@pytest.mark.skipif(GPUS < 2, reason="needs 2 GPUs")
def test_a_rank_that_never_joins_becomes_a_timeout_that_keeps_nccl_debug_output() -> None:
    outcome = cuda.all_reduce_processes(list(range(GPUS)), [1 << 20], 5, 30, hang_rank=1)
    assert outcome.timed_out
    assert outcome.log_tail is not None and "NCCL INFO" in outcome.log_tail


def _agent(*args: str, tmp_path: Path) -> tuple[int, dict[str, object]]:
    out = tmp_path / "result.json"
    completed = subprocess.run(
        [sys.executable, "-m", "gpuval_agent.cli", "run", "--quiet", "--json", str(out), *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert "Traceback" not in completed.stderr, completed.stderr
    return completed.returncode, json.loads(out.read_text())


def test_run_with_every_check_short_passes_on_a_healthy_machine(tmp_path: Path) -> None:
    code, document = _agent(
        "--duration",
        "3",
        "--transfer-size",
        "256M",
        "--nccl-max-size",
        "256M",
        tmp_path=tmp_path,
    )
    checks = {c["name"]: c for c in document["checks"]}  # type: ignore[union-attr]
    assert set(checks) == {"state", "driver", "health", "burn", "bandwidth", "nccl"}
    failures = [f for c in checks.values() for f in c["findings"] if f["severity"] == "Error"]
    assert failures == [] and code == 0, failures
    assert document["verdict"] == Verdict.PASSED.value


def test_an_impossible_throughput_threshold_fails_as_low_throughput(tmp_path: Path) -> None:
    config = parse_checks(
        '{"burn": {"durationSeconds": 2, "minTflops": {"absolute": 100000}}}'
    ).only([CheckName.BURN])
    path = tmp_path / "checks.json"
    path.write_text(config.model_dump_json(by_alias=True))
    code, document = _agent("--config", str(path), tmp_path=tmp_path)
    assert code == 1
    assert document["reason"] == "LowThroughput"


@pytest.mark.skipif(GPUS < 2, reason="needs 2 GPUs")
def test_a_gpu_cuda_cannot_see_is_left_out_by_the_load_checks_by_name(tmp_path: Path) -> None:
    """NVML sees both GPUs, CUDA only the second (CUDA_VISIBLE_DEVICES=1): the driver check fails
    GPU 0, the burn runs on GPU 1 alone (CUDA's device 0), NCCL is skipped, and the table holds
    one line per message (issue 9, B6)."""
    out = tmp_path / "result.json"
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuval_agent.cli",
            "run",
            "--quiet",
            "--json",
            str(out),
            "--checks",
            "driver,burn,nccl",
            "--duration",
            "3",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": "1"},
    )
    document = json.loads(out.read_text())
    checks = {c["name"]: c for c in document["checks"]}
    driver, burn, nccl = checks["driver"], checks["burn"], checks["nccl"]
    assert driver["reason"] == "CudaInitFailed" and driver["findings"][0]["gpu"] == 0
    assert burn["verdict"] == "Passed", burn["findings"]
    assert [(f["reason"], f["gpu"]) for f in burn["findings"]] == [("CheckSkipped", 0)]
    burned = {g["index"] for g in burn["gpus"] if "tflops.bf16" in g["metrics"]}
    assert burned == {1}
    assert nccl["verdict"] == "Skipped"
    assert "invalid device ordinal" not in completed.stdout
    assert all(len(line) < 400 for line in completed.stdout.splitlines())


@pytest.mark.skipif(GPUS < 2, reason="needs 2 GPUs")
def test_a_rank_that_dies_is_named_with_how_and_its_last_words() -> None:
    outcome = cuda.all_reduce_processes([0, GPUS + 5], [1 << 20], 5, 120)
    assert outcome.error is not None and not outcome.timed_out, outcome.log_tail
    assert outcome.error.startswith(f"rank 1 (CUDA device {GPUS + 5}) died with exit code 1: ")
    assert "\n" not in outcome.error


def test_gpuval_agent_run_fails_an_injected_flip_as_memory_miscompare(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    config = tmp_path / "checks.json"
    config.write_text(json.dumps({"memory": {"patterns": ["address", "random"]}}))
    flip = MemoryFlip(gpu=0, offset=77 * GIB + 4104, bit=42, pattern=MemoryPattern.ADDRESS, step=1)
    env = os.environ | {AgentEnv.MEMORY_INJECT.value: flip_json([flip])}
    command = [sys.executable, "-m", "gpuval_agent.cli", "run", "--checks", "memory"]
    command += ["--config", str(config), "--json", str(out)]
    run = subprocess.run(command, check=False, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 1, run.stdout + run.stderr
    result = json.loads(out.read_text())
    assert result["reason"] == Reason.MEMORY_MISCOMPARE.value
    message = result["checks"][0]["message"]
    assert "GPU 0: pattern address complement (pass 1): 1 word read back wrong at 0x" in message
    assert f"bits flipped 0x{1 << 42:016x}" in message
    assert "MemoryMiscompare" in run.stdout and "hint:" in run.stdout
