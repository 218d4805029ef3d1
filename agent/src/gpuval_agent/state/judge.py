"""Pure decisions of the state check: a reading at rest and the configuration give findings, each
with its reason from the catalogue and a message naming the GPU, link or port and the figures.
Nothing here reads hardware; tests feed recorded readings."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from gpuval_agent.state import sysfs
from gpuval_agent.state.kernellog import gpu_of
from gpuval_agent.state.model import (
    COMPLETED,
    CORRECTED_VOLATILE,
    FABRIC_SUCCESS,
    NOT_SUPPORTED,
    UNCORRECTED_AGGREGATE,
    UNCORRECTED_VOLATILE,
    GpuState,
    HostState,
    IbPort,
    Reading,
)
from gpuval_agent.state.xids import ACTION_REASONS, lookup
from gpuval_api.checks import StateCheck
from gpuval_api.reasons import Reason

# Clock-event reasons that mean a fault when the GPU is idle (nvml.h nvmlClocksEventReason*):
# hardware slowdown, software and hardware thermal slowdown, hardware power brake.
IDLE_FAULT_BITS = {
    0x8: "HwSlowdown",
    0x20: "SwThermalSlowdown",
    0x40: "HwThermalSlowdown",
    0x80: "HwPowerBrakeSlowdown",
}
_GPU_IDLE_BIT = 0x1


@dataclass(frozen=True, slots=True)
class StateFinding:
    reason: Reason
    message: str
    gpu: int | None = None


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
    findings.extend(_kernel_xids(reading, config))
    findings.extend(_fabric_manager(reading.host))
    findings.extend(_ports(reading.host, config, root))
    findings.extend(_locality(reading))
    return findings


def _ecc_detail(gpu: GpuState, key: str) -> str:
    parts = [f"{where} {c[key]}" for where, c in gpu.ecc_locations.items() if c.get(key)]
    return f" ({', '.join(parts)})" if parts else ""


def _memory(gpu: GpuState, config: StateCheck) -> Iterator[StateFinding]:
    g = gpu.index
    volatile = gpu.ecc.get(UNCORRECTED_VOLATILE)
    if volatile is not None and volatile > config.max_uncorrectable_ecc:
        yield StateFinding(
            Reason.ECC_UNCORRECTABLE,
            f"GPU {g}: {volatile} uncorrectable ECC errors since the last reset"
            f"{_ecc_detail(gpu, UNCORRECTED_VOLATILE)} (state.maxUncorrectableEcc is "
            f"{config.max_uncorrectable_ecc})",
            g,
        )
    aggregate = gpu.ecc.get(UNCORRECTED_AGGREGATE)
    if aggregate and aggregate > (volatile or 0):
        yield StateFinding(
            Reason.ECC_AGGREGATE_UNCORRECTABLE,
            f"GPU {g}: {aggregate} uncorrectable ECC errors in its lifetime"
            f"{_ecc_detail(gpu, UNCORRECTED_AGGREGATE)}, {volatile or 0} since the last reset",
            g,
        )
    corrected = gpu.ecc.get(CORRECTED_VOLATILE)
    if corrected is not None and corrected > config.max_correctable_ecc:
        yield StateFinding(
            Reason.ECC_CORRECTABLE_HIGH,
            f"GPU {g}: {corrected} correctable ECC errors since the last reset"
            f"{_ecc_detail(gpu, CORRECTED_VOLATILE)} (state.maxCorrectableEcc is "
            f"{config.max_correctable_ecc})",
            g,
        )
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
        yield from _aer(f"GPU {g}", device.aer, config, g)


def _aer(
    subject: str, aer: dict[str, int] | None, config: StateCheck, gpu: int | None
) -> Iterator[StateFinding]:
    if not aer:
        return
    uncorrectable = aer.get("fatal", 0) + aer.get("nonfatal", 0)
    if uncorrectable:
        yield StateFinding(
            Reason.PCIE_AER_UNCORRECTABLE,
            f"{subject}: PCIe AER fatal {aer.get('fatal', 0)}, non-fatal {aer.get('nonfatal', 0)}",
            gpu,
        )
    correctable = aer.get("correctable", 0)
    if correctable > config.max_pcie_correctable_errors:
        yield StateFinding(
            Reason.PCIE_AER_CORRECTABLE,
            f"{subject}: {correctable} correctable PCIe AER errors "
            f"(state.maxPcieCorrectableErrors is {config.max_pcie_correctable_errors})",
            gpu,
        )


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


def _fabric_manager(host: HostState) -> Iterator[StateFinding]:
    if host.nvswitches and host.fabric_manager is False:
        yield StateFinding(
            Reason.FABRIC_MANAGER_NOT_RUNNING,
            f"{len(host.nvswitches)} NVSwitches on the PCI bus and no nv-fabricmanager process",
        )


def _kernel_xids(reading: Reading, config: StateCheck) -> Iterator[StateFinding]:
    log = reading.host.kernel_log
    if log.source is None:
        yield StateFinding(
            Reason.KERNEL_LOG_UNREADABLE, f"kernel log not readable: {log.error or 'unknown'}"
        )
        return
    bus_ids = {
        gpu.index: sysfs.pci_address(gpu.bus_id) for gpu in reading.gpus if gpu.bus_id is not None
    }
    counts = Counter(
        (gpu_of(x, bus_ids), x.xid) for x in log.xids if x.xid not in config.ignore_xids
    )
    for (gpu, xid), count in sorted(
        counts.items(), key=lambda item: (item[0][0] or -1, item[0][1])
    ):
        mnemonic, action = lookup(xid)
        reason = ACTION_REASONS[action]
        if reason is None:
            continue
        where = f"GPU {gpu}" if gpu is not None else "a device that is not one of the GPUs"
        yield StateFinding(
            reason,
            f"{where}: XID {xid} ({mnemonic}) {count} time{'s' if count > 1 else ''} in the "
            f"kernel log since boot; NVIDIA's immediate action: {action}",
            gpu,
        )


def _ports(host: HostState, config: StateCheck, root: Path | None) -> Iterator[StateFinding]:
    network = config.network
    for port in host.ports:
        if port.state != "ACTIVE" or port.phys_state != "LinkUp":
            yield StateFinding(
                Reason.IB_PORT_DOWN,
                f"{port.name}: state {port.state}, physical state {port.phys_state}",
            )
        expected = network.expected_rate_gbit_per_second
        if expected and port.rate_gbps is not None and port.rate_gbps < expected:
            yield StateFinding(
                Reason.IB_PORT_RATE_LOW,
                f"{port.name}: rate {port.rate_text}, expected {expected:g} Gb/s "
                "(state.network.expectedRateGbitPerSecond)",
            )
        downed = port.counters.get("link_downed", 0)
        if downed > network.max_link_downed:
            yield StateFinding(
                Reason.IB_LINK_FLAPPING,
                f"{port.name}: link went down {downed} times (link_downed; "
                f"state.network.maxLinkDowned is {network.max_link_downed})",
            )
        errors = {
            k: v
            for k, v in port.counters.items()
            if k != "link_downed" and v > network.max_port_errors
        }
        if errors:
            counts = ", ".join(f"{k} {v:,}" for k, v in sorted(errors.items()))
            yield StateFinding(
                Reason.IB_PORT_ERRORS,
                f"{port.name}: {counts} (state.network.maxPortErrors is {network.max_port_errors})",
            )
    yield from _nic_links(host, config, root)


def _nic_links(host: HostState, config: StateCheck, root: Path | None) -> Iterator[StateFinding]:
    by_address: dict[str, list[IbPort]] = {}
    for port in host.ports:
        if port.pci_address:
            by_address.setdefault(port.pci_address, []).append(port)
    for address, ports in sorted(by_address.items()):
        device = host.pci.get(address)
        if device is None:
            continue
        subject = f"network adapter {ports[0].device} ({address})"
        yield from _aer(subject, device.aer, config, None)
        slot_speed, slot_width = (
            (None, None) if root is None else sysfs.upstream_limits(root, device)
        )
        top_speed = min(
            (s for s in (sysfs.speed_gts(device.max_speed), sysfs.speed_gts(slot_speed)) if s),
            default=None,
        )
        top_width = min((w for w in (device.max_width, slot_width) if w), default=None)
        speed = sysfs.speed_gts(device.current_speed)
        if (speed and top_speed and speed < top_speed) or (
            device.current_width and top_width and device.current_width < top_width
        ):
            allowed = f"{top_speed:g} GT/s" if top_speed else device.max_speed
            yield StateFinding(
                Reason.PCIE_LINK_DOWNTRAINED,
                f"{subject}: PCIe link {device.current_speed} x{device.current_width}, the device "
                f"and its slot allow {allowed} x{top_width}",
            )


def _locality(reading: Reading) -> Iterator[StateFinding]:
    nics = {
        p.pci_address: reading.host.pci[p.pci_address].numa_node
        for p in reading.host.ports
        if p.pci_address in reading.host.pci
    }
    nodes = {numa for numa in nics.values() if numa is not None}
    if not nodes:
        return
    for gpu in reading.gpus:
        device = reading.host.pci.get(sysfs.pci_address(gpu.bus_id)) if gpu.bus_id else None
        if device is None or device.numa_node is None or device.numa_node in nodes:
            continue
        yield StateFinding(
            Reason.NIC_GPU_LOCALITY,
            f"GPU {gpu.index} sits on NUMA node {device.numa_node}; the network adapters on "
            f"{', '.join(map(str, sorted(nodes)))}",
            gpu.index,
        )
