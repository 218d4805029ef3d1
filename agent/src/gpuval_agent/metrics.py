"""Live Prometheus metrics while the agent runs (its own registry, so tests can inject one).

Names follow shared/conventions.md: base units in the name, one unit per metric.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge, start_http_server

from gpuval_agent import __version__
from gpuval_agent.backends.base import BurnProgress, TelemetrySample
from gpuval_api.result import CheckResult, Verdict

_GPU = ["gpu"]


class AgentMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.build_info = Gauge(
            "gpuval_agent_build_info",
            "Agent version; always 1.",
            ["version", "backend"],
            registry=r,
        )
        self.temperature = Gauge(
            "gpuval_agent_gpu_temperature_celsius", "GPU temperature.", _GPU, registry=r
        )
        self.power = Gauge("gpuval_agent_gpu_power_watts", "GPU power draw.", _GPU, registry=r)
        self.sm_clock = Gauge(
            "gpuval_agent_gpu_sm_clock_hertz",
            "GPU streaming-multiprocessor clock.",
            _GPU,
            registry=r,
        )
        self.throughput = Gauge(
            "gpuval_agent_gpu_burn_flops_per_second",
            "Verified burn throughput of the running burn, floating-point operations per second.",
            _GPU,
            registry=r,
        )
        self.running = Gauge(
            "gpuval_agent_check_running", "1 while the check runs.", ["check"], registry=r
        )
        self.passed = Gauge(
            "gpuval_agent_check_passed",
            "1 when the check passed, 0 when it failed (absent until it ends or when skipped).",
            ["check"],
            registry=r,
        )

    def set_backend(self, backend: str) -> None:
        self.build_info.labels(version=__version__, backend=backend).set(1)

    def serve(self, port: int) -> None:
        start_http_server(port, registry=self.registry)

    def samples(self, samples: list[TelemetrySample]) -> None:
        for sample in samples:
            gpu = str(sample.gpu)
            if sample.temperature_celsius is not None:
                self.temperature.labels(gpu).set(sample.temperature_celsius)
            if sample.power_watts is not None:
                self.power.labels(gpu).set(sample.power_watts)
            if sample.sm_clock_mhz is not None:
                self.sm_clock.labels(gpu).set(sample.sm_clock_mhz * 1e6)

    def burn_progress(self, progress: BurnProgress) -> None:
        self.throughput.labels(str(progress.gpu)).set(progress.tflops * 1e12)

    def check_started(self, name: str) -> None:
        self.running.labels(name).set(1)

    def check_finished(self, result: CheckResult) -> None:
        self.running.labels(result.name).set(0)
        if result.verdict is not Verdict.SKIPPED:
            self.passed.labels(result.name).set(1 if result.verdict is Verdict.PASSED else 0)
