"""The simulated backend: a TEST DOUBLE that pretends to be a GPU node. It measures nothing.

Chosen only explicitly (`--backend simulated` or GPUVAL_BACKEND=simulated), never as a fallback,
and every result it produces says `backend: simulated`. It exists so the CPU test tiers and the
local cluster's kwok nodes run the agent's real check logic (verdicts, thresholds, diagnoses,
report writing) without a GPU. It supplies figures derived from the part's expected figures, and
faults change them as a broken node would (docs/contracts.md lists the fault kinds).

Its burn is not all pretence (`simulated.burn`): each simulated iteration multiplies two small
matrices with numpy and checks the result against a reference with the same bit-exact comparison
the GPU burn uses (gpuval_agent.verify), so the `miscompare` and `nan` faults corrupt a real
result that the real verification has to catch.
"""

from __future__ import annotations

import os
import socket
import threading

from gpuval_agent.allreduce import bus_bandwidth
from gpuval_agent.backends.base import (
    AllReduceOutcome,
    AllReduceSize,
    Backend,
    BurnMeasurement,
    GpuUse,
    ProgressCallback,
    TelemetrySample,
    Throttle,
    XidEvent,
)
from gpuval_agent.backends.simulated.burn import BurnFaults, burn_gpu
from gpuval_agent.backends.simulated.config import Fault, FaultKind, LoadCheck, SimulationConfig
from gpuval_agent.backends.simulated.foreign import (
    FOREIGN_MEMORY_BYTES,
    FOREIGN_PID,
    MEMORY_TOTAL,
    ForeignProcesses,
    out_of_memory,
)
from gpuval_agent.backends.simulated.hardware import SimulatedHost, gpu_address
from gpuval_agent.backends.simulated.memory import CONTEXT_BYTES, SimulatedMemory, simulated_memtest
from gpuval_agent.backends.simulated.train import simulated_train
from gpuval_agent.backends.simulated.units import SimUnit, build_units, gpu_uuid
from gpuval_agent.errors import NoDriverError
from gpuval_agent.memtest import (
    MemoryFlip,
    MemoryMeasurement,
    MemoryPlan,
    MemoryProgressCallback,
)
from gpuval_agent.parts import figures_for
from gpuval_agent.state.model import GpuState
from gpuval_agent.training import TrainOutcome, TrainPlan, TrainProgressCallback
from gpuval_agent.verify import differing_references
from gpuval_api import AgentEnv
from gpuval_api.checks import Precision
from gpuval_api.figures import H2D
from gpuval_api.result import Environment, GpuInfo, PcieLink

# Figures of a healthy simulated part, as fractions of the part's expected figures.
_HEALTHY = 0.97
_SLOW_GPU_FACTOR = 0.85
_FALLBACK_TFLOPS = {
    Precision.BF16: 800.0,
    Precision.FP16: 800.0,
    Precision.TF32: 352.0,
    Precision.FP32: 51.1,
    Precision.FP64: 54.0,
}


class SimulatedBackend(Backend):
    """A test double of a GPU node; see the module docstring."""

    name = "simulated"

    def __init__(self, config: SimulationConfig) -> None:
        self.config = config
        self._faults: dict[FaultKind, list[Fault]] = {}
        for fault in config.faults:
            self._faults.setdefault(fault.kind, []).append(fault)
        self._part = figures_for(config.product)
        visible = config.gpus - (1 if FaultKind.MISSING_GPU in self._faults else 0)
        self._visible = max(visible, 0)
        self._burning = threading.Event()
        self._xid_lock = threading.Lock()
        self._pending_xids: list[XidEvent] = []
        self._node = os.environ.get(AgentEnv.NODE_NAME) or socket.gethostname()
        # The GPUs' UUID and serial suffix: another set of GPUs for config.gpu_set > 0.
        self._replaced = f"-set{config.gpu_set}" if config.gpu_set else ""
        self.foreign = ForeignProcesses(config)
        self._host = SimulatedHost(self._visible, config.product, self._faults)
        # What the agent tests: the GPUs, or on a GPU with MIG mode on each of its MIG devices.
        # Faults name a unit by its index, as the agent's findings do.
        self._units = build_units(config, self._visible, self._node, MEMORY_TOTAL)

    def _unit(self, gpu: int) -> SimUnit:
        if 0 <= gpu < len(self._units):
            return self._units[gpu]
        return SimUnit(gpu, gpu, gpu_uuid(self.config, self._node, gpu), MEMORY_TOTAL)

    @property
    def _indices(self) -> list[int]:
        return [unit.index for unit in self._units]

    def _fault(self, kind: FaultKind, gpu: int | None = None) -> Fault | None:
        for fault in self._faults.get(kind, []):
            if gpu is None or fault.gpu == gpu:
                return fault
        return None

    def _speed(self, gpu: int) -> float:
        """A slow-gpu fault's factor (0.85 unless given), 1.0 for a healthy GPU."""
        fault = self._fault(FaultKind.SLOW_GPU, gpu)
        if fault is None:
            return 1.0
        return fault.factor if fault.factor is not None else _SLOW_GPU_FACTOR

    def _sleep(self, seconds: float, stop: threading.Event | None = None) -> None:
        scaled = seconds * self.config.time_scale
        if scaled > 0:
            (stop or threading.Event()).wait(scaled)

    def environment(self) -> Environment:
        if self._fault(FaultKind.NO_DRIVER):
            raise NoDriverError("NVML Shared Library Not Found (simulated no-driver fault)")
        gpus = []
        for unit in self._units:
            index = unit.index
            degraded = self._fault(FaultKind.PCIE_DEGRADED, index) is not None
            capped = self._fault(FaultKind.POWER_CAPPED, index) is not None
            gpus.append(
                GpuInfo(
                    index=index,
                    name=self.config.product,
                    uuid=unit.uuid,
                    serial=f"SIM{unit.parent:04d}" + self._replaced,
                    vbios="96.00.sim",
                    pci_bus_id=f"0000{gpu_address(unit.parent).upper()}",
                    memory_total_bytes=unit.memory_bytes,
                    pcie=PcieLink(
                        current_gen=1, max_gen=5, current_width=8 if degraded else 16, max_width=16
                    ),
                    ecc_enabled=True,
                    ecc_uncorrectable_volatile=(
                        2 if self._fault(FaultKind.ECC_UNCORRECTABLE, index) else 0
                    ),
                    ecc_uncorrectable_aggregate=0,
                    remapped_rows_correctable=0,
                    remapped_rows_uncorrectable=0,
                    remapped_rows_pending=self._fault(FaultKind.ROW_REMAP_PENDING, index)
                    is not None,
                    remapped_rows_failed=False,
                    persistence_mode=True,
                    mig_mode=unit.mig is not None,
                    power_limit_watts=350.0 if capped else 700.0,
                    default_power_limit_watts=700.0,
                    max_sm_clock_mhz=1980,
                    max_memory_clock_mhz=3201,
                    temperature_celsius=35.0,
                    slowdown_temperature_celsius=90.0,
                    shutdown_temperature_celsius=95.0,
                    max_operating_temperature_celsius=87.0,
                    mig=unit.mig,
                )
            )
        return Environment(
            hostname=self._node,
            kernel="simulated",
            driver_version=self.config.driver,
            cuda_driver_version=self.config.cuda,
            cuda_runtime_version=self.config.cuda_runtime or self.config.cuda,
            torch_version=None,
            nccl_version=self.config.nccl,
            nvml_version="simulated",
            gpu_count=len(gpus),
            gpus=gpus,
        )

    def finish_environment(self, environment: Environment) -> None:
        return None  # the simulated record is complete from the start

    def advertised_gpu_count(self) -> int | None:
        """The node's devices: its GPUs, each with MIG mode on counted as its MIG devices."""
        mig = {entry.gpu: len(entry.profiles) for entry in self.config.mig}
        return sum(mig.get(gpu, 1) for gpu in range(self.config.gpus))

    def cuda_init(self, gpus: list[int]) -> dict[int, str | None]:
        return {
            gpu: (
                f"{self._unit(gpu).uuid} is not among the devices CUDA sees (simulated "
                "cuda-invisible fault)"
                if self._fault(FaultKind.CUDA_INVISIBLE, gpu)
                else None
            )
            for gpu in gpus
        }

    def telemetry(self) -> list[TelemetrySample]:
        busy = self._burning.is_set()
        samples = []
        for gpu in self._indices:
            throttles: set[Throttle] = set() if busy else {Throttle.GPU_IDLE}
            temperature = 66.0 if busy else 35.0
            power = 690.0 if busy else 75.0
            clock = 1980.0 if busy else 345.0
            if busy and self._fault(FaultKind.OVERHEAT, gpu):
                temperature = 96.0
            if busy and self._fault(FaultKind.THERMAL_SLOWDOWN, gpu):
                temperature, clock = 89.0, 1200.0
                throttles.add(Throttle.HW_THERMAL_SLOWDOWN)
            if busy and self._fault(FaultKind.POWER_CAPPED, gpu):
                power, clock = 349.0, 1400.0
                throttles.add(Throttle.SW_POWER_CAP)
            degraded = self._fault(FaultKind.PCIE_DEGRADED, gpu) is not None
            samples.append(
                TelemetrySample(
                    gpu=gpu,
                    temperature_celsius=temperature,
                    power_watts=power,
                    sm_clock_mhz=clock,
                    throttles=frozenset(throttles),
                    pcie_gen=3 if degraded else 5,
                    pcie_width=8 if degraded else 16,
                )
            )
        return samples

    def gpu_state(self) -> list[GpuState]:
        return [self._host.gpu_state(gpu) for gpu in range(self._visible)]

    def state_root(self, configured: str) -> str:
        """The simulated host tree (a temporary directory), whatever the configured root."""
        return str(self._host.root())

    def xid_events(self) -> list[XidEvent]:
        with self._xid_lock:
            events, self._pending_xids = self._pending_xids, []
        return events

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
        # The simulated GPUs read hot from the burn's start until the next check loads them
        # otherwise, as real GPUs stay warm for a while: the burn's telemetry window sees it.
        self._burning.set()
        self.foreign.starts(LoadCheck.BURN, gpus)
        if self._fault(FaultKind.HANG):
            # The contract's 'hang': the agent never finishes (until it is told to stop).
            stop.wait()
        self._sleep(seconds, stop)
        self._host.burn_wear()
        for fault in self._faults.get(FaultKind.XID, []):
            with self._xid_lock:
                self._pending_xids.append(XidEvent(fault.gpu, fault.xid))
            self._host.log_xid(fault.gpu, fault.xid)
        measurements = [self._burn_one(gpu, precision, seconds, on_progress) for gpu in gpus]
        # The real backend's comparison of the node's references (backends/torch/burn.py, burn).
        differing = differing_references(
            {m.gpu: m.fingerprint for m in measurements if m.fingerprint is not None}
        )
        for measurement in measurements:
            measurement.reference_differs = measurement.gpu in differing
        return measurements

    def _burn_one(
        self, gpu: int, precision: Precision, seconds: float, on_progress: ProgressCallback
    ) -> BurnMeasurement:
        tflops = self._part.tflops.get(precision, _FALLBACK_TFLOPS[precision]) * _HEALTHY
        tflops *= self._speed(gpu) * self._unit(gpu).share.compute
        if self._fault(FaultKind.THERMAL_SLOWDOWN, gpu):
            tflops *= 0.6
        if self._fault(FaultKind.POWER_CAPPED, gpu):
            tflops *= 0.75
        if self.foreign.on(gpu, FaultKind.FOREIGN_COMPUTE):
            tflops *= 0.4  # the H200 gave 320 of 800 TFLOP/s beside another process's matmul
        faults = BurnFaults(
            wrong_reference=self._fault(FaultKind.WRONG_REFERENCE, gpu) is not None,
            miscompare=self._fault(FaultKind.MISCOMPARE, gpu),
            nan=self._fault(FaultKind.NAN, gpu),
            cuda_invisible=self._fault(FaultKind.CUDA_INVISIBLE, gpu) is not None,
            foreign_memory_pid=(
                self._foreign_pid(gpu) if self.foreign.on(gpu, FaultKind.FOREIGN_MEMORY) else None
            ),
        )
        return burn_gpu(
            gpu,
            precision,
            seconds,
            tflops=tflops,
            faults=faults,
            product=self.config.product,
            on_progress=on_progress,
        )

    def close(self) -> None:
        self._burning.clear()
        self._host.close()

    def gpu_use(self) -> list[GpuUse] | None:
        return self.foreign.use(self._indices)

    def host_pid_namespace(self) -> bool:
        return self.foreign.host_pid_namespace()

    def agent_gpu_processes(self) -> dict[int, int]:
        return dict.fromkeys(self._indices, 1)

    def _foreign_pid(self, gpu: int) -> int:
        return next(
            (f.pid for f in self.config.faults if f.gpu == gpu and f.pid is not None),
            FOREIGN_PID + gpu,
        )

    def _share(self, load: LoadCheck, gpus: list[int]) -> dict[int, float]:
        """Per GPU, the share of its figure a load gets beside the foreign processes on it;
        raises torch's out-of-memory error where one holds most of a GPU's memory."""
        self.foreign.starts(load, gpus)
        for gpu in gpus:
            if self.foreign.on(gpu, FaultKind.FOREIGN_MEMORY):
                raise RuntimeError(out_of_memory(gpu, self._foreign_pid(gpu)))
        return {g: 0.5 if self.foreign.on(g, FaultKind.FOREIGN_COMPUTE) else 1.0 for g in gpus}

    def memory_test(
        self,
        gpus: list[int],
        plan: MemoryPlan,
        *,
        on_progress: MemoryProgressCallback,
        stop: threading.Event,
    ) -> list[MemoryMeasurement]:
        self._burning.clear()
        self.foreign.starts(LoadCheck.MEMORY, gpus)
        gbps = (self._part.device_copy_gbps or 1000.0) * _HEALTHY
        measurements = []
        for gpu in gpus:
            unit = self._unit(gpu)
            held = self._fault(FaultKind.MEMORY_HELD, gpu)
            share_held = (held.factor or 0.5) if held else 0.0
            if self.foreign.on(gpu, FaultKind.FOREIGN_MEMORY):
                share_held = max(share_held, min(FOREIGN_MEMORY_BYTES / unit.memory_bytes, 0.95))
            middle = plan.target_bytes(unit.memory_bytes - CONTEXT_BYTES) // 2
            flips = [
                MemoryFlip(
                    gpu=gpu,
                    offset=middle if fault.offset is None else fault.offset,
                    bit=fault.bit,
                    pattern=fault.pattern,
                    step=fault.step or 0,
                )
                for fault in self._faults.get(FaultKind.MEMORY_FLIP, [])
                if fault.gpu == gpu
            ]
            memory = SimulatedMemory(gpu, unit.memory_bytes, share_held, flips)
            measurements.append(
                simulated_memtest(
                    memory,
                    plan,
                    gbps * unit.share.memory,
                    on_progress=on_progress,
                    stop=stop,
                    sleep=self._sleep,
                )
            )
        return measurements

    def host_device_bandwidth(
        self, direction: str, gpus: list[int], nbytes: int, iterations: int
    ) -> dict[int, float]:
        self._burning.clear()
        share = self._share(LoadCheck.BANDWIDTH, gpus)
        self._sleep(0.2)
        expected = (self._part.h2d_gbps if direction == H2D.id else self._part.d2h_gbps) or 25.0
        figures = {}
        for gpu in gpus:
            # A MIG device copies over its GPU's one link beside its siblings: its share.
            scaled = expected * self._unit(gpu).share.compute
            gbps = scaled * _HEALTHY * self._speed(gpu)
            if self._fault(FaultKind.PCIE_DEGRADED, gpu):
                gbps = scaled * 0.24
            if self._fault(FaultKind.LOW_BANDWIDTH, gpu):
                gbps *= 0.5
            figures[gpu] = gbps * share[gpu]
        return figures

    def device_copy_bandwidth(self, gpu: int, nbytes: int, iterations: int) -> float:
        share = self._share(LoadCheck.BANDWIDTH, [gpu])[gpu]
        self._sleep(0.1)
        gbps = (self._part.device_copy_gbps or 1000.0) * _HEALTHY * share * self._speed(gpu)
        gbps *= self._unit(gpu).share.memory
        return gbps * (0.5 if self._fault(FaultKind.LOW_BANDWIDTH, gpu) else 1.0)

    def peer_access(self, src: int, dst: int) -> bool:
        return True

    def peer_bandwidth(self, src: int, dst: int, nbytes: int, iterations: int) -> float:
        share = min(self._share(LoadCheck.BANDWIDTH, [src, dst]).values())
        self._sleep(0.05)
        gbps = (self._part.p2p_gbps or 50.0) * _HEALTHY * share
        gbps *= min(self._speed(src), self._speed(dst))
        slow = self._fault(FaultKind.LOW_BANDWIDTH, src) or self._fault(
            FaultKind.LOW_BANDWIDTH, dst
        )
        return gbps * (0.5 if slow else 1.0)

    def train(
        self,
        gpus: list[int],
        plan: TrainPlan,
        *,
        on_progress: TrainProgressCallback,
        stop: threading.Event,
    ) -> TrainOutcome:
        self._burning.set()  # the GPUs run hot while they train, as under the burn
        share = self._share(LoadCheck.TRAIN, gpus)
        return simulated_train(
            self.config,
            self._part,
            gpus,
            plan,
            slow=self._fault(FaultKind.TRAIN_SLOW),
            wrong=self._faults.get(FaultKind.TRAIN_WRONG_LOSS, []),
            share=share,
            on_progress=on_progress,
            stop=stop,
            sleep=self._sleep,
        )

    def prepare_all_reduce(
        self, gpus: list[int], sizes: list[int], iterations: int, timeout_seconds: float
    ) -> None:
        return None  # nothing to start ahead: the simulated all-reduce is computed

    def all_reduce(
        self, gpus: list[int], sizes: list[int], iterations: int, timeout_seconds: float
    ) -> AllReduceOutcome:
        share = min(self._share(LoadCheck.NCCL, gpus).values())
        self._sleep(2.0)
        # A ring runs at its slowest member's pace.
        busbw = (self._part.nccl_busbw_gbps or 100.0) * _HEALTHY * share
        busbw *= min((self._speed(gpu) for gpu in gpus), default=1.0)
        slow = next((f for f in self._faults.get(FaultKind.SLOW_NCCL, []) if f.gpu in gpus), None)
        if slow is not None:
            busbw *= 0.4
        ranks = len(gpus)
        algbw = busbw / bus_bandwidth(1.0, ranks)
        outcome = AllReduceOutcome()
        for size in sizes:
            # Small messages are latency-bound, as on real hardware: ~20 us per all-reduce.
            seconds = size / (algbw * 1e9) + 20e-6
            outcome.sizes.append(AllReduceSize(bytes=size, seconds=seconds))
        if slow is not None:
            outcome.log_tail = f"simulated: rank {slow.gpu} is slow (slow-nccl fault)"
        return outcome
