"""The backend interface: what the checks ask a GPU stack to measure."""

from __future__ import annotations

import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

from gpuval_agent.memtest import MemoryMeasurement, MemoryPlan, MemoryProgressCallback
from gpuval_agent.state.model import GpuState
from gpuval_agent.training import TrainOutcome, TrainPlan, TrainProgressCallback
from gpuval_agent.verify import BadIteration
from gpuval_api.checks import Precision
from gpuval_api.result import Environment


class Throttle(StrEnum):
    """Clock-event (throttle) reasons as NVML names them, reduced to what the diagnoses use."""

    GPU_IDLE = "GpuIdle"
    APPLICATIONS_CLOCKS = "ApplicationsClocksSetting"
    SW_POWER_CAP = "SwPowerCap"
    HW_SLOWDOWN = "HwSlowdown"
    SYNC_BOOST = "SyncBoost"
    SW_THERMAL_SLOWDOWN = "SwThermalSlowdown"
    HW_THERMAL_SLOWDOWN = "HwThermalSlowdown"
    HW_POWER_BRAKE_SLOWDOWN = "HwPowerBrakeSlowdown"
    DISPLAY_CLOCKS = "DisplayClockSetting"


THERMAL_THROTTLES = frozenset({Throttle.SW_THERMAL_SLOWDOWN, Throttle.HW_THERMAL_SLOWDOWN})
POWER_THROTTLES = frozenset({Throttle.SW_POWER_CAP, Throttle.HW_POWER_BRAKE_SLOWDOWN})


@dataclass(frozen=True, slots=True)
class TelemetrySample:
    """One GPU's state at one moment; None where the GPU does not report it."""

    gpu: int
    temperature_celsius: float | None
    power_watts: float | None
    sm_clock_mhz: float | None
    throttles: frozenset[Throttle] = frozenset()
    pcie_gen: int | None = None
    pcie_width: int | None = None


@dataclass(frozen=True, slots=True)
class XidEvent:
    gpu: int
    xid: int


@dataclass(frozen=True, slots=True)
class BurnProgress:
    """Reported about once a second per GPU while a burn runs."""

    gpu: int
    iterations: int
    tflops: float


@dataclass(slots=True)
class BurnMeasurement:
    """One GPU's burn in one precision."""

    gpu: int
    iterations: int = 0
    seconds: float = 0.0
    flops_per_iteration: float = 0.0
    # Iterations between two reads of the device-side verification counters (one graph replay).
    iterations_per_read: int = 1
    bad: list[BadIteration] = field(default_factory=list)
    error: str | None = None
    # Same inputs and part, yet this GPU's reference result differs from every other GPU's.
    reference_differs: bool = False
    # Digest of the reference result, and what else fixes it (compared across nodes).
    fingerprint: str | None = None
    determinants: str = ""

    @property
    def tflops(self) -> float:
        if self.seconds <= 0:
            return 0.0
        return self.iterations * self.flops_per_iteration / self.seconds / 1e12


@dataclass(slots=True)
class AllReduceSize:
    bytes: int
    seconds: float


@dataclass(slots=True)
class AllReduceOutcome:
    """The NCCL all-reduce sweep: per-size times, or why it did not finish."""

    sizes: list[AllReduceSize] = field(default_factory=list)
    timed_out: bool = False
    error: str | None = None
    log_tail: str | None = None


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """A compute process NVML lists on a GPU. `pid` is as NVML reports it: the host's PID, which
    names a process of the agent's own PID namespace only when the agent shares the host's."""

    pid: int
    used_memory_bytes: int | None = None
    sm_percent: int | None = None  # its recent share of the SMs, where NVML samples it
    name: str | None = None  # the executable, where the backend can tell (same PID namespace)


@dataclass(frozen=True, slots=True)
class GpuUse:
    """One GPU's processes and load at one moment, as NVML shows them."""

    gpu: int
    processes: tuple[GpuProcess, ...] = ()
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    utilization_percent: int | None = None  # time a kernel ran in NVML's last sample period


ProgressCallback = Callable[[BurnProgress], None]


class Backend(ABC):
    """A GPU stack the checks measure through. Methods raise AgentError subclasses for conditions
    the user must see (NoDriverError from environment() means nothing else can run)."""

    name: str
    # Seconds the parts of the last environment() took (e.g. nvmlInit), for the driver check's
    # metrics: a run's time outside its checks is looked for there.
    environment_split: Mapping[str, float] = MappingProxyType({})

    @abstractmethod
    def environment(self) -> Environment:
        """The environment record; raises NoDriverError when NVML finds no driver or GPU."""

    @abstractmethod
    def finish_environment(self, environment: Environment) -> None:
        """Complete the record at the end of the run with what was slow to learn at the start."""

    def advertised_gpu_count(self) -> int | None:
        """GPUs the node is known to carry, besides the configured expectation (None: unknown)."""
        return None

    @abstractmethod
    def cuda_init(self, gpus: list[int]) -> dict[int, str | None]:
        """Initialise CUDA on each GPU: None where it worked, else the error text."""

    @abstractmethod
    def telemetry(self) -> list[TelemetrySample]:
        """A sample of every GPU now."""

    @abstractmethod
    def xid_events(self) -> list[XidEvent]:
        """Critical XID events seen since the previous call."""

    @abstractmethod
    def gpu_state(self) -> list[GpuState]:
        """Every GPU's state at rest as NVML shows it (the state check's NVML half)."""

    def state_root(self, configured: str) -> str:
        """Where the state check reads sysfs, /proc and /dev/kmsg: the configured host root."""
        return configured

    @abstractmethod
    def burn(
        self,
        gpus: list[int],
        precision: Precision,
        matrix_size: int,
        seconds: float,
        *,
        on_progress: ProgressCallback,
        stop: threading.Event,
    ) -> list[BurnMeasurement]:
        """Burn all `gpus` at once for `seconds`, verifying every iteration's result."""

    @abstractmethod
    def memory_test(
        self,
        gpus: list[int],
        plan: MemoryPlan,
        *,
        on_progress: MemoryProgressCallback,
        stop: threading.Event,
    ) -> list[MemoryMeasurement]:
        """Test `plan`'s share of each GPU's free memory, all `gpus` at once: each step's words
        written, then every word read back and compared (gpuval_agent.memtest). An allocation the
        GPU refuses shrinks what is tested (`shortfall`), never a failure."""

    @abstractmethod
    def host_device_bandwidth(
        self, direction: str, gpus: list[int], nbytes: int, iterations: int
    ) -> dict[int, float]:
        """GB/s per GPU of pinned host<->device copies (`direction`: H2D.id or D2H.id
        of gpuval_api.figures), all `gpus` at once."""

    @abstractmethod
    def device_copy_bandwidth(self, gpu: int, nbytes: int, iterations: int) -> float:
        """GB/s (bytes copied per second) of a device-local copy."""

    @abstractmethod
    def peer_access(self, src: int, dst: int) -> bool:
        """Whether `src` can copy to `dst` directly (NVLink or PCIe peer)."""

    @abstractmethod
    def peer_bandwidth(self, src: int, dst: int, nbytes: int, iterations: int) -> float:
        """GB/s of copies from GPU `src` to GPU `dst`."""

    @abstractmethod
    def prepare_all_reduce(
        self, gpus: list[int], sizes: list[int], iterations: int, timeout_seconds: float
    ) -> None:
        """Called at the start of a run that will call all_reduce with these arguments, so a
        backend can start its rank processes early; all_reduce must work without it too."""

    @abstractmethod
    def all_reduce(
        self, gpus: list[int], sizes: list[int], iterations: int, timeout_seconds: float
    ) -> AllReduceOutcome:
        """NCCL all-reduce between `gpus`, one process per GPU, over `sizes` (bytes)."""

    def prepare_train(self, gpus: list[int], plan: TrainPlan) -> None:  # noqa: B027
        """Called before the checks that precede the training step, so a backend can start its
        rank processes (their interpreter, torch's import, a CUDA context) while those run; train
        must work without it too. Nothing by default."""

    @abstractmethod
    def train(
        self,
        gpus: list[int],
        plan: TrainPlan,
        *,
        on_progress: TrainProgressCallback,
        stop: threading.Event,
    ) -> TrainOutcome:
        """The training step of `plan` data-parallel over `gpus`, one process per GPU: every
        rank's losses and figures, or why it did not finish (gpuval_agent.training)."""

    @abstractmethod
    def gpu_use(self) -> list[GpuUse] | None:
        """Every GPU's compute processes and memory in use now; None where the backend cannot
        read them (then no GPU is judged in use)."""

    def host_pid_namespace(self) -> bool:
        """Whether the PIDs gpu_use reports name this process's own PID namespace's processes
        (bare metal, a pod with hostPID): then the agent's own processes are known exactly."""
        return shares_host_pid_namespace()

    def agent_gpu_processes(self) -> dict[int, int]:
        """Per GPU, the most processes of the agent (itself and the rank processes it started)
        that may hold a CUDA context on it now: what the agent allows itself where it cannot
        tell its own PIDs from NVML's."""
        return {}

    @abstractmethod
    def close(self) -> None:
        """Release what the backend holds (GPU memory, NVML)."""


# The kernel's fixed inode number of the initial (the host's) PID namespace (PROC_PID_INIT_INO).
_HOST_PID_NAMESPACE = 0xEFFFFFFC


def shares_host_pid_namespace() -> bool:
    """Whether this process lives in the host's PID namespace, whose PIDs NVML reports."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino == _HOST_PID_NAMESPACE
    except OSError:
        return False
