"""Live metrics: base-unit names per shared/conventions.md, values from telemetry and the burn."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from gpuval_agent.backends.base import BurnProgress, TelemetrySample
from gpuval_agent.metrics import AgentMetrics


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
