"""What a person sees: plain progress lines off a terminal, and the end-of-run table."""

from __future__ import annotations

import io

from gpuval_agent import baseline as baselines
from gpuval_agent.backends.simulated.backend import SimulatedBackend, SimulationConfig
from gpuval_agent.display import Display, render_table
from gpuval_agent.runner import run_checks
from gpuval_api.checks import ChecksConfig


def test_off_a_terminal_each_check_prints_a_start_and_an_end_line() -> None:
    stream = io.StringIO()
    display = Display(stream=stream)
    backend = SimulatedBackend(SimulationConfig.parse('{"gpus": 2, "timeScale": 0.001}'))
    result = run_checks(
        ChecksConfig(), backend, display, on_samples=display.samples, sample_interval=0.01
    )
    display.close()
    lines = stream.getvalue().splitlines()
    for name in ("driver", "health", "burn", "bandwidth", "nccl"):
        assert f"gpuval: {name} started" in lines
        assert any(line.startswith(f"gpuval: {name} passed in ") for line in lines)
    assert "\x1b" not in stream.getvalue()  # no terminal control codes in a log
    table = render_table(result)
    assert "burn       Passed" in table
    assert (
        table.splitlines()[-1]
        == "PASSED: 2 GPUs passed state, driver, health, burn, bandwidth, nccl"
    )


def test_the_table_lists_each_failure_with_its_hint_and_skipped_checks() -> None:
    backend = SimulatedBackend(SimulationConfig.parse('{"faults": [{"kind": "no-driver"}]}'))
    result = run_checks(ChecksConfig(), backend, Display(stream=io.StringIO(), quiet=True))
    table = render_table(result)
    assert "FAIL driver: DriverNotLoaded" in table
    assert "SKIP burn: CheckSkipped: no NVIDIA driver or GPU" in table
    assert table.splitlines()[-1].startswith("FAILED: driver: NVML:")


def test_a_gpu_cuda_cannot_see_is_skipped_by_later_checks_and_every_table_line_is_one_line() -> (
    None
):
    config = '{"gpus": 2, "timeScale": 0.001, "faults": [{"kind": "cuda-invisible", "gpu": 1}]}'
    backend = SimulatedBackend(SimulationConfig.parse(config))
    result = run_checks(ChecksConfig(), backend, Display(stream=io.StringIO(), quiet=True))
    driver, burn, nccl = (result.check(name) for name in ("driver", "burn", "nccl"))
    assert driver is not None and burn is not None and nccl is not None
    assert driver.reason == "CudaInitFailed" and driver.findings[0].gpu == 1
    # The burn ran on GPU 0 alone and said why GPU 1 was left out; it did not fail on GPU 1.
    assert burn.verdict == "Passed" and [g.index for g in burn.gpus] == [0, 1]
    assert "tflops.bf16" not in burn.gpus[1].metrics
    assert [(f.reason, f.gpu) for f in burn.findings] == [("CheckSkipped", 1)]
    assert "GPU 1 skipped: CUDA did not initialise on it" in burn.findings[0].message
    assert nccl.verdict == "Skipped" and "usable GPUs" in nccl.message
    table = render_table(result)
    assert "SKIP burn: CheckSkipped: GPU 1 skipped: CUDA did not initialise" in table
    assert "invalid device ordinal" not in table


def test_a_long_multi_line_message_is_one_line_in_the_table_and_whole_in_the_json() -> None:
    backend = SimulatedBackend(SimulationConfig.parse('{"gpus": 1, "timeScale": 0.001}'))
    result = run_checks(ChecksConfig(), backend, Display(stream=io.StringIO(), quiet=True))
    long = "RuntimeError: boom\n" + "traceback line\n" * 100
    driver = result.check("driver")
    assert driver is not None
    driver.message = long
    table = render_table(result)
    row = next(line for line in table.splitlines() if line.startswith("driver"))
    assert "traceback line traceback line" in row and len(row) < 300
    assert driver.message == long


def test_a_gpu_the_burn_did_not_test_says_not_tested_and_no_empty_baseline_table() -> None:
    config = '{"gpus": 1, "timeScale": 0.001, "faults": [{"kind": "foreign-compute", "gpu": 0}]}'
    backend = SimulatedBackend(SimulationConfig.parse(config))
    result = run_checks(ChecksConfig(), backend, Display(stream=io.StringIO(), quiet=True))
    result = baselines.judge(result, baselines.candidates(baselines.SHIPPED), 0.1)
    lines = render_table(result).splitlines()
    row = lines[lines.index(next(line for line in lines if line.startswith("GPU "))) + 1]
    assert row.startswith("0    not tested (GpuInUse)")
    assert " 0 " not in row.split("not tested")[1]  # no figure was made up as 0
    assert row.endswith("GPU-sim-vm-0")  # the UUID from the environment record
    # The baseline matched, but there is nothing to compare: no header over no rows.
    assert not any(line.startswith("FIGURE") for line in lines)
    assert "nothing was measured to compare with it (no GPU was tested)" in lines


def test_a_gpu_in_use_beside_a_tested_one_shows_no_figures_of_its_own() -> None:
    config = '{"gpus": 2, "timeScale": 0.001, "faults": [{"kind": "foreign-compute", "gpu": 1}]}'
    backend = SimulatedBackend(SimulationConfig.parse(config))
    result = run_checks(ChecksConfig(), backend, Display(stream=io.StringIO(), quiet=True))
    result = baselines.judge(result, baselines.candidates(baselines.SHIPPED), 0.1)
    lines = render_table(result).splitlines()
    gpu0 = next(line for line in lines if line.startswith("0    "))
    gpu1 = next(line for line in lines if line.startswith("1    "))
    assert gpu0.split()[1:] == ["776.0", "66", "690", "1980", "GPU-sim-vm-0"]
    assert gpu1.split() == ["1", "not", "tested", "(GpuInUse)", "GPU-sim-vm-1"]
    assert any(line.startswith("FIGURE") for line in lines)
