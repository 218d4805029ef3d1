"""Live Prometheus metrics while the agent runs (its own registry, so tests can inject one).

Names follow shared/conventions.md: base units in the name, one unit per metric.
"""

from __future__ import annotations

from collections import Counter

from prometheus_client import CollectorRegistry, Gauge, start_http_server

from gpuval_agent import __version__
from gpuval_agent.backends.base import BurnProgress, TelemetrySample
from gpuval_agent.state.model import Reading
from gpuval_api import Verdict
from gpuval_api.result import CheckResult

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

        self._state_gauges(r)

    def _state_gauges(self, r: CollectorRegistry) -> None:
        """The state check's readings: error counters and link states, as the hardware reports
        them (gauges: a counter of the hardware, not of this process, may reset with the GPU)."""
        self.ecc_errors = Gauge(
            "gpuval_agent_gpu_ecc_errors",
            "ECC errors the GPU reports (NVML), by type (corrected, uncorrected) and counter "
            "(volatile: since the last reset, aggregate: lifetime).",
            ["gpu", "type", "counter"],
            registry=r,
        )
        self.remapped_rows = Gauge(
            "gpuval_agent_gpu_remapped_rows",
            "Memory rows remapped, by cause (correctable, uncorrectable).",
            ["gpu", "cause"],
            registry=r,
        )
        self.remap_pending = Gauge(
            "gpuval_agent_gpu_row_remap_pending",
            "1 while a row remap waits for a GPU reset.",
            _GPU,
            registry=r,
        )
        self.pcie_link = Gauge(
            "gpuval_agent_gpu_pcie_link_width",
            "PCIe link width (lanes), current and maximum.",
            ["gpu", "bound"],
            registry=r,
        )
        self.pcie_generation = Gauge(
            "gpuval_agent_gpu_pcie_link_generation",
            "PCIe link generation, current and maximum.",
            ["gpu", "bound"],
            registry=r,
        )
        self.pcie_replays = Gauge(
            "gpuval_agent_gpu_pcie_replays", "PCIe replays the GPU counted.", _GPU, registry=r
        )
        self.nvlink_up = Gauge(
            "gpuval_agent_gpu_nvlink_up",
            "1 when the NVLink is active, 0 when it is down.",
            ["gpu", "link"],
            registry=r,
        )
        self.nvlink_errors = Gauge(
            "gpuval_agent_gpu_nvlink_errors",
            "NVLink error counters (replay, recovery, crcFlit, crcData).",
            ["gpu", "link", "counter"],
            registry=r,
        )
        self.ib_port_up = Gauge(
            "gpuval_agent_ib_port_up",
            "1 when the InfiniBand/RoCE port is ACTIVE with its physical link up.",
            ["device", "port"],
            registry=r,
        )
        self.ib_port_rate = Gauge(
            "gpuval_agent_ib_port_rate_bits_per_second",
            "The InfiniBand/RoCE port's rate.",
            ["device", "port"],
            registry=r,
        )
        self.ib_port_errors = Gauge(
            "gpuval_agent_ib_port_errors",
            "The port's error counters (link_downed, symbol_error, port_rcv_errors, "
            "link_error_recovery).",
            ["device", "port", "counter"],
            registry=r,
        )
        self.kernel_xids = Gauge(
            "gpuval_agent_kernel_xid_lines",
            "XID lines in the kernel log since boot, by GPU (its PCI address) and XID.",
            ["pci", "xid"],
            registry=r,
        )

    def state(self, reading: Reading) -> None:
        """Set the state gauges from one reading."""
        for gpu in reading.gpus:
            g = str(gpu.index)
            for key, value in gpu.ecc.items():
                kind = "uncorrected" if key.startswith("uncorrected") else "corrected"
                counter = "volatile" if key.endswith("Volatile") else "aggregate"
                self.ecc_errors.labels(g, kind, counter).set(value)
            for cause, rows in (
                ("correctable", gpu.remapped_correctable),
                ("uncorrectable", gpu.remapped_uncorrectable),
            ):
                if rows is not None:
                    self.remapped_rows.labels(g, cause).set(rows)
            if gpu.remap_pending is not None:
                self.remap_pending.labels(g).set(1 if gpu.remap_pending else 0)
            for bound, width, gen in (
                ("current", gpu.pcie_width, gpu.pcie_gen),
                ("max", gpu.pcie_max_width, gpu.pcie_max_gen),
            ):
                if width is not None:
                    self.pcie_link.labels(g, bound).set(width)
                if gen is not None:
                    self.pcie_generation.labels(g, bound).set(gen)
            if gpu.pcie_replays is not None:
                self.pcie_replays.labels(g).set(gpu.pcie_replays)
            for link in gpu.nvlinks:
                self.nvlink_up.labels(g, str(link.link)).set(1 if link.active else 0)
                for name, value in link.errors.items():
                    self.nvlink_errors.labels(g, str(link.link), name).set(value)
        for port in reading.host.ports:
            labels = (port.device, str(port.port))
            up = port.state == "ACTIVE" and port.phys_state == "LinkUp"
            self.ib_port_up.labels(*labels).set(1 if up else 0)
            if port.rate_gbps is not None:
                self.ib_port_rate.labels(*labels).set(port.rate_gbps * 1e9)
            for name, value in port.counters.items():
                self.ib_port_errors.labels(*labels, name).set(value)
        lines = Counter((line.pci, str(line.xid)) for line in reading.host.kernel_log.xids)
        for (pci, number), count in lines.items():
            self.kernel_xids.labels(pci, number).set(count)

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
