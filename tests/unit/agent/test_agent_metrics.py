"""Live metrics: base-unit names per shared/conventions.md, values from telemetry and the burn."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry

from gpuval_agent.backends.base import BurnProgress, TelemetrySample
from gpuval_agent.metrics import AgentMetrics
from gpuval_agent.state.read import take_reading
from tests.support.statetree import load


def test_telemetry_and_burn_progress_become_base_unit_gauges_per_gpu() -> None:
    registry = CollectorRegistry()
    metrics = AgentMetrics(registry)
    metrics.set_backend("simulated")
    metrics.samples(
        [TelemetrySample(gpu=1, temperature_celsius=61.0, power_watts=690.5, sm_clock_mhz=1980.0)]
    )
    metrics.burn_progress(BurnProgress(gpu=1, iterations=10, tflops=712.5))

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    assert value("gpuval_agent_gpu_temperature_celsius", gpu="1") == 61.0
    assert value("gpuval_agent_gpu_power_watts", gpu="1") == 690.5
    assert value("gpuval_agent_gpu_sm_clock_hertz", gpu="1") == 1.98e9
    assert value("gpuval_agent_gpu_burn_flops_per_second", gpu="1") == 712.5e12
    assert value("gpuval_agent_build_info", version="0.1.0", backend="simulated") == 1.0


def test_unreported_telemetry_leaves_the_gauge_absent_rather_than_zero() -> None:
    registry = CollectorRegistry()
    AgentMetrics(registry).samples(
        [TelemetrySample(gpu=0, temperature_celsius=None, power_watts=None, sm_clock_mhz=None)]
    )
    assert registry.get_sample_value("gpuval_agent_gpu_temperature_celsius", {"gpu": "0"}) is None


def test_a_state_reading_sets_the_counter_and_link_state_gauges(tmp_path: Path) -> None:
    recording = load("hgx-port-flapping", tmp_path)
    reading = take_reading(recording, recording.root, "before", [])
    reading.gpus[1].nvlinks[2].active = False
    registry = CollectorRegistry()
    AgentMetrics(registry).state(reading)

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    assert (
        value("gpuval_agent_ib_port_errors", device="mlx5_0", port="1", counter="link_downed") == 3
    )
    assert value("gpuval_agent_ib_port_up", device="mlx5_1", port="1") == 1
    assert value("gpuval_agent_ib_port_rate_bits_per_second", device="mlx5_0", port="1") == 400e9
    assert value("gpuval_agent_gpu_nvlink_up", gpu="1", link="2") == 0
    assert value("gpuval_agent_gpu_nvlink_up", gpu="1", link="3") == 1
    assert value("gpuval_agent_gpu_nvlink_errors", gpu="0", link="0", counter="crcFlit") == 0
    assert value("gpuval_agent_gpu_pcie_link_width", gpu="0", bound="current") == 16
    assert (
        value("gpuval_agent_gpu_ecc_errors", gpu="0", type="uncorrected", counter="volatile") == 0
    )
    assert value("gpuval_agent_gpu_row_remap_pending", gpu="0") == 0
