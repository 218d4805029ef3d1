"""One reading of the whole state: NVML through the backend, sysfs and the kernel log under the
root path."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Protocol

from gpuval_agent.state import kernellog, sysfs
from gpuval_agent.state.model import GpuState, Reading


class GpuStateSource(Protocol):
    """What answers for the GPUs: a backend (NVML, the simulated double) or a recording."""

    def gpu_state(self) -> list[GpuState]: ...


def take_reading(backend: GpuStateSource, root: Path, label: str, ib_devices: list[str]) -> Reading:
    start = time.monotonic()
    gpus = backend.gpu_state()
    addresses = [sysfs.pci_address(gpu.bus_id) for gpu in gpus if gpu.bus_id]
    host = sysfs.read_host(root, addresses, ib_devices)
    host.kernel_log = kernellog.read_kernel_log(root)
    return Reading(label=label, gpus=gpus, host=host, seconds=round(time.monotonic() - start, 4))
