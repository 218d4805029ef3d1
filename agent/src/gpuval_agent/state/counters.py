"""The error counters of a reading, compared between readings: a counter that grew while a load
check ran is named with its growth and the check ("GPU 0 NVLink 3: crcFlit +1,200 during burn").
Pure.

Only counters that mean an error count: uncorrectable ECC (volatile), remapped rows, retired
pages, PCIe replays and uncorrectable AER, NVLink CRC/replay/recovery, InfiniBand link_downed,
symbol and receive errors and link recoveries, and XIDs in the kernel log. Correctable ECC and
correctable AER errors are judged at rest against their thresholds only: a few during a long
burn are normal.
"""

from __future__ import annotations

from collections import Counter

from gpuval_agent.state import sysfs
from gpuval_agent.state.kernellog import gpu_of
from gpuval_agent.state.model import UNCORRECTED_VOLATILE, Reading


def counters(reading: Reading) -> dict[str, int]:
    """Every error counter of the reading, keyed by what it counts."""
    out: dict[str, int] = {}
    bus_ids: dict[int, str] = {}
    for gpu in reading.gpus:
        g = f"GPU {gpu.index}"
        if gpu.bus_id:
            bus_ids[gpu.index] = sysfs.pci_address(gpu.bus_id)
        if UNCORRECTED_VOLATILE in gpu.ecc:
            out[f"{g}: uncorrectable ECC errors"] = gpu.ecc[UNCORRECTED_VOLATILE]
        if gpu.remapped_uncorrectable is not None:
            out[f"{g}: rows remapped for uncorrectable errors"] = gpu.remapped_uncorrectable
        if gpu.retired_pages is not None:
            out[f"{g}: retired pages"] = sum(gpu.retired_pages.values())
        if gpu.pcie_replays is not None:
            out[f"{g}: PCIe replays"] = gpu.pcie_replays
        for link in gpu.nvlinks:
            for name, value in link.errors.items():
                out[f"{g} NVLink {link.link}: {name} errors"] = value
        device = reading.host.pci.get(bus_ids.get(gpu.index, ""))
        if device is not None and device.aer:
            out[f"{g}: PCIe AER uncorrectable errors"] = device.aer.get(
                "fatal", 0
            ) + device.aer.get("nonfatal", 0)
    for port in reading.host.ports:
        for name, value in port.counters.items():
            out[f"{port.name}: {name}"] = value
    log = reading.host.kernel_log
    if log.source is not None:
        for (gpu_index, xid), count in Counter(
            (gpu_of(x, bus_ids), x.xid) for x in log.xids
        ).items():
            where = f"GPU {gpu_index}" if gpu_index is not None else "kernel log"
            out[f"{where}: XID {xid} lines"] = count
    return out


def growth(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """Counters that grew from `before` to `after` (a counter new in `after` grew from 0)."""
    return {
        key: value - before.get(key, 0)
        for key, value in after.items()
        if value > before.get(key, 0)
    }
