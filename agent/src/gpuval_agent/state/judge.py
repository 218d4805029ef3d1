"""Pure decisions of the state check: a reading at rest and the configuration give findings, each
with its reason from the catalogue and a message naming the GPU, link or port and the figures.
The GPUs' are here, the host's in hostjudge. Nothing here reads hardware; tests feed recorded
readings."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from gpuval_agent.state import hostjudge, sysfs
from gpuval_agent.state.finding import StateFinding
from gpuval_agent.state.hostjudge import aer
from gpuval_agent.state.model import (
    COMPLETED,
    CORRECTED_VOLATILE,
    FABRIC_SUCCESS,
    NOT_SUPPORTED,
    UNCORRECTED_AGGREGATE,
    UNCORRECTED_VOLATILE,
    GpuState,
    HostState,
    Reading,
)
from gpuval_api import Reason
from gpuval_api.checks import StateCheck

# Clock-event reasons that mean a fault when the GPU is idle (nvml.h nvmlClocksEventReason*):
# hardware slowdown, software and hardware thermal slowdown, hardware power brake.
IDLE_FAULT_BITS = {
    0x8: "HwSlowdown",
    0x20: "SwThermalSlowdown",
    0x40: "HwThermalSlowdown",
    0x80: "HwPowerBrakeSlowdown",
}
_GPU_IDLE_BIT = 0x1


def judge(
    reading: Reading, config: StateCheck, part_nvlinks: int | None, root: Path | None = None
) -> list[StateFinding]:
    """Every finding of the first reading (the GPUs idle, nothing loaded yet)."""
    findings: list[StateFinding] = []
    expected = expected_nvlinks(reading.gpus, config, part_nvlinks)
    for gpu in reading.gpus:
        findings.extend(_memory(gpu, config))
        findings.extend(_nvlinks(gpu, expected))
        findings.extend(_nvlink_errors(gpu, config))
        findings.extend(_gpu_pcie(gpu, reading.host, config))
        findings.extend(_clocks_and_power(gpu, config))
        findings.extend(_fabric(gpu))
    findings.extend(hostjudge.kernel_xids(reading, config))
    findings.extend(hostjudge.fabric_manager(reading.host))
    findings.extend(hostjudge.ports(reading.host, config, root))
    findings.extend(hostjudge.locality(reading))
    return findings


def _ecc_detail(gpu: GpuState, key: str) -> str:
    parts = [f"{where} {c[key]}" for where, c in gpu.ecc_locations.items() if c.get(key)]
    return f" ({', '.join(parts)})" if parts else ""


def _ecc_over(
    gpu: GpuState, key: str, limit: int, reason: Reason, *, kind: str, setting: str
) -> Iterator[StateFinding]:
    """A volatile ECC count above its configured maximum, by memory location."""
    count = gpu.ecc.get(key)
    if count is not None and count > limit:
        yield StateFinding(
            reason,
            f"GPU {gpu.index}: {count} {kind} ECC errors since the last reset"
            f"{_ecc_detail(gpu, key)} (state.{setting} is {limit})",
            gpu.index,
        )


def _memory(gpu: GpuState, config: StateCheck) -> Iterator[StateFinding]:
    yield from _ecc_over(
        gpu,
        UNCORRECTED_VOLATILE,
        config.max_uncorrectable_ecc,
        Reason.ECC_UNCORRECTABLE,
        kind="uncorrectable",
        setting="maxUncorrectableEcc",
    )
    volatile = gpu.ecc.get(UNCORRECTED_VOLATILE)
    aggregate = gpu.ecc.get(UNCORRECTED_AGGREGATE)
    if aggregate and aggregate > (volatile or 0):
        yield StateFinding(
            Reason.ECC_AGGREGATE_UNCORRECTABLE,
            f"GPU {gpu.index}: {aggregate} uncorrectable ECC errors in its lifetime"
            f"{_ecc_detail(gpu, UNCORRECTED_AGGREGATE)}, {volatile or 0} since the last reset",
            gpu.index,
        )
    yield from _ecc_over(
        gpu,
        CORRECTED_VOLATILE,
        config.max_correctable_ecc,
        Reason.ECC_CORRECTABLE_HIGH,
        kind="correctable",
        setting="maxCorrectableEcc",
    )
    yield from _remapping(gpu, config)


def _remapping(gpu: GpuState, config: StateCheck) -> Iterator[StateFinding]:
    """Row remapping (Ampere and newer) and page retirement (older GPUs)."""
    g = gpu.index
    if gpu.remap_pending:
        yield StateFinding(
            Reason.ROW_REMAP_PENDING,
            f"GPU {g}: a row remap is pending until the GPU is reset "
            f"({gpu.remapped_uncorrectable or 0} rows remapped for uncorrectable errors)",
            g,
        )
    if gpu.remap_failed:
        yield StateFinding(
            Reason.ROW_REMAP_FAILED,
            f"GPU {g}: a row remap failed; the GPU has run out of spare rows",
            g,
        )
    histogram = gpu.remap_histogram
    if histogram is not None:
        low = histogram.get("low", 0) + histogram.get("none", 0)
        if low > config.max_low_spare_banks:
            yield StateFinding(
                Reason.ROW_REMAP_SPARES_LOW,
                f"GPU {g}: {histogram.get('none', 0)} memory banks without spare rows and "
                f"{histogram.get('low', 0)} with few (row remapper histogram {histogram}; "
                f"state.maxLowSpareBanks is {config.max_low_spare_banks})",
                g,
            )
    pages = gpu.retired_pages
    if gpu.retired_pending:
        yield StateFinding(
            Reason.RETIRED_PAGES_PENDING,
            f"GPU {g}: retired pages are pending until the driver reloads",
            g,
        )
    if pages is not None and sum(pages.values()) > config.max_retired_pages:
        yield StateFinding(
            Reason.RETIRED_PAGES_HIGH,
            f"GPU {g}: {sum(pages.values())} retired pages ({pages.get('doubleBit', 0)} for "
            f"double-bit errors; state.maxRetiredPages is {config.max_retired_pages})",
            g,
        )


def expected_nvlinks(
    gpus: list[GpuState], config: StateCheck, part_nvlinks: int | None
) -> int | None:
    """Active NVLinks each GPU should have: the configured count; else, on a node whose GPUs have
    any active link (an NVLink topology), the model's count, or the most any GPU of the node has."""
    if config.expected_nvlinks is not None:
        return config.expected_nvlinks
    active = [sum(link.active for link in gpu.nvlinks) for gpu in gpus]
    if not any(active):
        return None
    return part_nvlinks if part_nvlinks is not None else max(active)


def _nvlinks(gpu: GpuState, expected: int | None) -> Iterator[StateFinding]:
    if expected is None:
        return
    g = gpu.index
    active = [link for link in gpu.nvlinks if link.active]
    if len(active) < expected:
        down = [link.link for link in gpu.nvlinks if not link.active]
        links = "link" if len(down) == 1 else "links"
        named = f": {links} {', '.join(map(str, down))} down" if down else " (NVML reports none)"
        yield StateFinding(
            Reason.NVLINK_DOWN,
            f"GPU {g}: {len(active)} of {expected} NVLinks active{named}",
            g,
        )
    speeds = [link.speed_mbps for link in active if link.speed_mbps]
    if speeds:
        top = max(speeds)
        for link in active:
            if link.speed_mbps and link.speed_mbps < top:
                yield StateFinding(
                    Reason.NVLINK_SPEED_LOW,
                    f"GPU {g}: NVLink {link.link} runs at {link.speed_mbps} Mb/s, its other "
                    f"links at {top} Mb/s",
                    g,
                )


def _nvlink_errors(gpu: GpuState, config: StateCheck) -> Iterator[StateFinding]:
    for link in gpu.nvlinks:
        high = {k: v for k, v in link.errors.items() if v > config.max_nvlink_errors}
        if high:
            counts = ", ".join(f"{k} {v:,}" for k, v in sorted(high.items()))
            yield StateFinding(
                Reason.NVLINK_ERRORS,
                f"GPU {gpu.index}: NVLink {link.link} error counters {counts} "
                f"(state.maxNvlinkErrors is {config.max_nvlink_errors})",
                gpu.index,
            )


def _gpu_pcie(gpu: GpuState, host: HostState, config: StateCheck) -> Iterator[StateFinding]:
    g = gpu.index
    if gpu.pcie_width and gpu.pcie_max_width and gpu.pcie_width < gpu.pcie_max_width:
        yield StateFinding(
            Reason.PCIE_LINK_DOWNTRAINED,
            f"GPU {g}: PCIe link x{gpu.pcie_width} of x{gpu.pcie_max_width} "
            f"(gen {gpu.pcie_gen} of {gpu.pcie_max_gen})",
            g,
        )
    elif gpu.pcie_gen and gpu.pcie_max_gen and gpu.pcie_gen < gpu.pcie_max_gen:
        # An idle GPU lowers its link generation to save power: judged only when it is busy
        # (the bandwidth check samples it under load).
        idle = gpu.clocks_event_bits is not None and gpu.clocks_event_bits & _GPU_IDLE_BIT
        if not idle:
            yield StateFinding(
                Reason.PCIE_LINK_DOWNTRAINED,
                f"GPU {g}: PCIe gen {gpu.pcie_gen} of {gpu.pcie_max_gen} while not idle "
                f"(x{gpu.pcie_width})",
                g,
            )
    device = host.pci.get(sysfs.pci_address(gpu.bus_id)) if gpu.bus_id else None
    if device is not None:
        yield from aer(f"GPU {g}", device.aer, config, g)


def _clocks_and_power(gpu: GpuState, config: StateCheck) -> Iterator[StateFinding]:
    g = gpu.index
    bits = gpu.clocks_event_bits or 0
    named = [name for bit, name in IDLE_FAULT_BITS.items() if bits & bit]
    if named:
        yield StateFinding(
            Reason.CLOCKS_THROTTLED_AT_IDLE,
            f"GPU {g}: clocks held down at rest by {', '.join(named)} (event reasons {bits:#x})",
            g,
        )
    limit, default = gpu.power_limit_watts, gpu.default_power_limit_watts
    fraction = config.min_power_limit_fraction
    if limit and default and fraction and limit < fraction * default:
        yield StateFinding(
            Reason.POWER_LIMIT_BELOW_DEFAULT,
            f"GPU {g}: power limit {limit:g} W, {limit / default:.0%} of the default {default:g} W "
            f"(state.minPowerLimitFraction is {fraction:g})",
            g,
        )


def _fabric(gpu: GpuState) -> Iterator[StateFinding]:
    fabric = gpu.fabric
    if fabric is None or fabric.state == NOT_SUPPORTED:
        return
    if fabric.state != COMPLETED or fabric.status != FABRIC_SUCCESS:
        yield StateFinding(
            Reason.GPU_FABRIC_NOT_READY,
            f"GPU {gpu.index}: fabric registration {fabric.state}, status {fabric.status}",
            gpu.index,
        )
