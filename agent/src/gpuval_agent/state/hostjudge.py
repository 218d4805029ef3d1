"""Pure decisions about the host side of a reading: XIDs in the kernel log, the fabric manager,
the InfiniBand/RoCE ports, the network adapters' PCIe links and AER counters, NIC-GPU locality."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from gpuval_agent.state import sysfs
from gpuval_agent.state.finding import StateFinding
from gpuval_agent.state.kernellog import gpu_of
from gpuval_agent.state.model import HostState, IbPort, KernelXid, Reading
from gpuval_agent.state.xids import ACTION_REASONS, lookup
from gpuval_api import Reason
from gpuval_api.checks import StateCheck


def aer(
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


def fabric_manager(host: HostState) -> Iterator[StateFinding]:
    if host.nvswitches and host.fabric_manager is False:
        yield StateFinding(
            Reason.FABRIC_MANAGER_NOT_RUNNING,
            f"{len(host.nvswitches)} NVSwitches on the PCI bus and no nv-fabricmanager process",
        )


def kernel_xids(reading: Reading, config: StateCheck) -> Iterator[StateFinding]:
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
        (gpu_of(x, bus_ids), x.xid)
        for x in log.xids
        if x.xid not in config.ignore_xids and _recent(x, log.uptime_seconds, config)
    )
    window = (
        "since boot"
        if config.xid_max_age_seconds is None
        else f"of the last {config.xid_max_age_seconds:g} s (state.xidMaxAgeSeconds)"
    )
    for (gpu, xid), count in sorted(
        counts.items(), key=lambda item: (-1 if item[0][0] is None else item[0][0], item[0][1])
    ):
        mnemonic, action = lookup(xid)
        reason = ACTION_REASONS[action]
        if reason is None:
            continue
        where = f"GPU {gpu}" if gpu is not None else "a device that is not one of the GPUs"
        yield StateFinding(
            reason,
            f"{where}: XID {xid} ({mnemonic}) {count} time{'s' if count > 1 else ''} in the "
            f"kernel log {window}; NVIDIA's immediate action: {action}",
            gpu,
        )


def _recent(xid: KernelXid, uptime: float | None, config: StateCheck) -> bool:
    """Whether an XID is within state.xidMaxAgeSeconds (one whose age is unknown counts)."""
    limit = config.xid_max_age_seconds
    if limit is None or uptime is None or xid.since_boot is None:
        return True
    return uptime - xid.since_boot <= limit


def port_down(port: IbPort) -> bool:
    """Whether an InfiniBand/RoCE port is not up (IbPortDown)."""
    return port.state != "ACTIVE" or port.phys_state != "LinkUp"


def ports(host: HostState, config: StateCheck, root: Path | None) -> Iterator[StateFinding]:
    network = config.network
    for port in host.ports:
        if port_down(port):
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
        yield from aer(subject, device.aer, config, None)
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


def locality(reading: Reading) -> Iterator[StateFinding]:
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
