"""One reading of the whole state: NVML through the backend, sysfs and the kernel log under the
root path."""

from __future__ import annotations

import time
from pathlib import Path

from gpuval_agent.backends.base import Backend
from gpuval_agent.state import kernellog, sysfs
from gpuval_agent.state.model import Reading


def take_reading(backend: Backend, root: Path, label: str, ib_devices: list[str]) -> Reading:
    start = time.monotonic()
    gpus = backend.gpu_state()
    addresses = [sysfs.pci_address(gpu.bus_id) for gpu in gpus if gpu.bus_id]
    host = sysfs.read_host(root, addresses, ib_devices)
    host.kernel_log = kernellog.read_kernel_log(root)
    return Reading(label=label, gpus=gpus, host=host, seconds=round(time.monotonic() - start, 4))
