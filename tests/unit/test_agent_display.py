"""What a person sees: plain progress lines off a terminal, and the end-of-run table."""

from __future__ import annotations

import io

from gpuval_agent.backends.simulated import SimulatedBackend, SimulationConfig
from gpuval_agent.display import Display, render_table
from gpuval_agent.runner import run_checks
from gpuval_api.checks import ChecksConfig


def test_off_a_terminal_each_check_prints_a_start_and_an_end_line() -> None:
    stream = io.StringIO()
    display = Display(stream=stream)
    backend = SimulatedBackend(SimulationConfig.parse('{"gpus": 2, "timeScale": 0.001}'))
    result = run_checks(ChecksConfig(), backend, display, on_samples=display.samples,
                        sample_interval=0.01)  # fmt: skip
    display.close()
    lines = stream.getvalue().splitlines()
    for name in ("driver", "health", "burn", "bandwidth", "nccl"):
        assert f"gpuval: {name} started" in lines
        assert any(line.startswith(f"gpuval: {name} passed in ") for line in lines)
    assert "\x1b" not in stream.getvalue()  # no terminal control codes in a log
    table = render_table(result)
    assert "burn       Passed" in table
    assert table.splitlines()[-1] == "PASSED: 2 GPUs passed driver, health, burn, bandwidth, nccl"


def test_the_table_lists_each_failure_with_its_hint_and_skipped_checks() -> None:
    backend = SimulatedBackend(SimulationConfig.parse('{"faults": [{"kind": "no-driver"}]}'))
    result = run_checks(ChecksConfig(), backend, Display(stream=io.StringIO(), quiet=True))
    table = render_table(result)
    assert "FAIL driver: DriverNotLoaded" in table
    assert "SKIP burn: CheckSkipped: no NVIDIA driver or GPU" in table
    assert table.splitlines()[-1].startswith("FAILED: driver: NVML:")
