"""Background telemetry: samples every GPU at a fixed interval for live metrics and for the checks.

Checks open a window to aggregate the samples taken while they load the GPUs (the burn's maximum
temperature, the throttle reasons seen, the PCIe link under transfer load).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from gpuval_agent.backends.base import Backend, TelemetrySample, Throttle, XidEvent


@dataclass(slots=True)
class GpuWindow:
    """What one GPU showed during a window."""

    samples: int = 0
    max_temperature_celsius: float | None = None
    max_power_watts: float | None = None
    min_sm_clock_mhz: float | None = None
    sm_clock_sum: float = 0.0
    sm_clock_samples: int = 0
    throttles: set[Throttle] = field(default_factory=set)
    max_pcie_gen: int | None = None
    max_pcie_width: int | None = None

    def add(self, sample: TelemetrySample) -> None:
        self.samples += 1
        self.max_temperature_celsius = _max(
            self.max_temperature_celsius, sample.temperature_celsius
        )
        self.max_power_watts = _max(self.max_power_watts, sample.power_watts)
        if sample.sm_clock_mhz is not None and Throttle.GPU_IDLE not in sample.throttles:
            self.sm_clock_sum += sample.sm_clock_mhz
            self.sm_clock_samples += 1
            if self.min_sm_clock_mhz is None or sample.sm_clock_mhz < self.min_sm_clock_mhz:
                self.min_sm_clock_mhz = sample.sm_clock_mhz
        self.throttles |= sample.throttles
        self.max_pcie_gen = _max_int(self.max_pcie_gen, sample.pcie_gen)
        self.max_pcie_width = _max_int(self.max_pcie_width, sample.pcie_width)

    @property
    def mean_sm_clock_mhz(self) -> float | None:
        return self.sm_clock_sum / self.sm_clock_samples if self.sm_clock_samples else None


def _max(current: float | None, value: float | None) -> float | None:
    if value is None:
        return current
    return value if current is None else max(current, value)


def _max_int(current: int | None, value: int | None) -> int | None:
    if value is None:
        return current
    return value if current is None else max(current, value)


@dataclass(slots=True)
class Window:
    gpus: dict[int, GpuWindow] = field(default_factory=dict)
    xids: list[XidEvent] = field(default_factory=list)

    def gpu(self, index: int) -> GpuWindow:
        return self.gpus.setdefault(index, GpuWindow())


class Sampler:
    """Samples the backend's telemetry every `interval` seconds on a daemon thread."""

    def __init__(
        self,
        backend: Backend,
        interval: float,
        on_samples: Callable[[list[TelemetrySample]], None] | None = None,
    ) -> None:
        self._backend = backend
        self._interval = interval
        self._on_samples = on_samples
        self._windows: list[Window] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_error: str | None = None
        self.xids: list[XidEvent] = []

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="gpuval-telemetry", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def sample_now(self) -> None:
        """Take one sample at once (a window's first and last reading need not wait)."""
        try:
            samples = self._backend.telemetry()
            xids = self._backend.xid_events()
        except Exception as error:  # telemetry must never stop the checks
            self.last_error = f"{type(error).__name__}: {error}"
            return
        with self._lock:
            self.xids.extend(xids)
            for window in self._windows:
                for sample in samples:
                    window.gpu(sample.gpu).add(sample)
                window.xids.extend(xids)
        if self._on_samples is not None:
            self._on_samples(samples)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample_now()
            self._stop.wait(self._interval)

    @contextmanager
    def window(self) -> Iterator[Window]:
        """Aggregate every sample taken until the block ends (with one at each end)."""
        window = Window()
        with self._lock:
            self._windows.append(window)
        self.sample_now()
        try:
            yield window
        finally:
            self.sample_now()
            with self._lock:
                self._windows.remove(window)
