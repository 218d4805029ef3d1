"""The simulated backends' other processes on the GPUs (faults foreign-compute and foreign-memory),
as NVML would list them beside the agent's own: a TEST DOUBLE's part, shared by the per-node double
(backends/simulated/backend.py) and the fabric's (fabric/simulated.py). Standard library only.
"""

from __future__ import annotations

import os
import threading
import time

from gpuval_agent.backends.base import GpuProcess, GpuUse
from gpuval_agent.backends.simulated.config import Fault, FaultKind, LoadCheck, SimulationConfig

# The simulated foreign processes: a PID above any kernel's pid_max (2^22), so never the agent's.
FOREIGN_PID = 5_000_000
# Where the agent's own processes show when NVML's PIDs are not its namespace's (no hostPID).
_HOST_PID_OFFSET = 6_000_000
MEMORY_TOTAL = 143771 << 20  # an H200's memory, as NVML reports it
_DRIVER_RESERVED = 650 << 20  # what an idle H200 shows in use (0.65 GB)
FOREIGN_MEMORY_BYTES = 135 << 30
_FOREIGN = {
    FaultKind.FOREIGN_COMPUTE: ("python3 train.py (simulated)", 3 << 30, 90),
    FaultKind.FOREIGN_MEMORY: ("python3 hold.py (simulated)", FOREIGN_MEMORY_BYTES, 0),
}


class ForeignProcesses:
    """The double's other processes on the GPUs (faults foreign-compute/-memory) and its own
    CUDA processes, as NVML would list them; shared by the per-node and the fabric double."""

    def __init__(self, config: SimulationConfig) -> None:
        self._faults = [f for f in config.faults if f.kind in _FOREIGN]
        self._present = {id(f) for f in self._faults if f.during is None}
        self._since: dict[int, float] = {}  # a fault with `during`: when its load started
        self._host_pid = config.host_pid
        self._lock = threading.Lock()
        self._own: set[int] = set()  # GPUs the agent holds a context on

    def starts(self, load: LoadCheck, gpus: list[int]) -> None:
        """A load starts on `gpus`: its foreign processes appear, the agent holds the GPUs."""
        with self._lock:
            now = time.monotonic()
            for fault in self._faults:
                if fault.during is load and id(fault) not in self._present:
                    self._present.add(id(fault))
                    self._since[id(fault)] = now
            self._own |= set(gpus)

    def _here(self, fault: Fault, now: float) -> bool:
        """Whether the fault's process is on its GPU now (after_seconds/for_seconds)."""
        if id(fault) not in self._present:
            return False
        since = self._since.get(id(fault))
        if since is None:
            return True
        begins = since + fault.after_seconds
        ends = begins + fault.for_seconds if fault.for_seconds is not None else float("inf")
        return begins <= now < ends

    def on(self, gpu: int, kind: FaultKind) -> bool:
        with self._lock:
            now = time.monotonic()
            return any(f.gpu == gpu and f.kind is kind and self._here(f, now) for f in self._faults)

    def host_pid_namespace(self) -> bool:
        return self._host_pid

    def use(self, gpus: list[int]) -> list[GpuUse]:
        own_pid = os.getpid() + (0 if self._host_pid else _HOST_PID_OFFSET)
        uses = []
        with self._lock:
            now = time.monotonic()
            for gpu in gpus:
                processes = []
                if gpu in self._own:
                    processes.append(GpuProcess(pid=own_pid, used_memory_bytes=2 << 30))
                for fault in self._faults:
                    if fault.gpu == gpu and self._here(fault, now):
                        name, memory, sm = _FOREIGN[fault.kind]
                        pid = fault.pid or FOREIGN_PID + gpu
                        processes.append(GpuProcess(pid, memory, sm, name))
                computing = gpu in self._own or any(p.sm_percent for p in processes)
                uses.append(
                    GpuUse(
                        gpu=gpu,
                        processes=tuple(processes),
                        memory_used_bytes=_DRIVER_RESERVED
                        + sum(p.used_memory_bytes or 0 for p in processes),
                        memory_total_bytes=MEMORY_TOTAL,
                        utilization_percent=100 if computing else 0,
                    )
                )
        return uses


def out_of_memory(gpu: int, pid: int) -> str:
    """torch's words for an allocation another process's memory starved."""
    return (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU "
        f"{gpu} has a total capacity of 140.40 GiB of which 4.75 GiB is free. Process {pid} has "
        "135.00 GiB memory in use. Of the allocated memory 512.00 MiB is allocated by PyTorch. "
        "See documentation for Memory Management (https://pytorch.org/docs/stable/notes/"
        "cuda.html#environment-variables)"
    )
