"""The host side of the state from sysfs and procfs, read under a root path (`/` on a node, a
recorded tree in the tests): PCIe links and AER counters of the GPUs and network adapters,
InfiniBand/RoCE ports, NVSwitches and the fabric manager. What is absent is said by name."""

from __future__ import annotations

import os
import re
from pathlib import Path

from gpuval_agent.state.model import HostState, IbPort, PciDevice

# The AER files of a PCI function, each ending with its TOTAL_ERR_* line.
AER_FILES = {
    "correctable": "aer_dev_correctable",
    "nonfatal": "aer_dev_nonfatal",
    "fatal": "aer_dev_fatal",
}
IB_COUNTERS = ("link_downed", "symbol_error", "port_rcv_errors", "link_error_recovery")
_NVIDIA_VENDOR = "0x10de"
_BRIDGE_OTHER_CLASS = "0x0680"  # PCI class "other bridge": how NVSwitches enumerate
_FABRIC_MANAGER = "nv-fabricmanager"
_HOST_INITS = {"systemd", "init"}
_RATE = re.compile(r"^\s*([0-9.]+)\s*Gb/sec")


def pci_address(nvml_bus_id: str) -> str:
    """NVML's '00000000:18:00.0' as sysfs names it: '0000:18:00.0'."""
    domain, _, rest = nvml_bus_id.strip().lower().partition(":")
    return f"{domain[-4:]}:{rest}" if rest else nvml_bus_id.lower()


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text, 0)
    except ValueError:
        return None


def _aer_total(text: str) -> int:
    """The TOTAL_ERR_* line of an AER file, else the sum of its counters."""
    counts: list[int] = []
    for line in text.splitlines():
        name, _, value = line.rpartition(" ")
        if not value.isdigit():
            continue
        if name.startswith("TOTAL_ERR"):
            return int(value)
        counts.append(int(value))
    return sum(counts)


def read_pci_device(root: Path, address: str) -> PciDevice:
    """One PCI function's link (current and maximum speed and width) and AER totals."""
    base = root / "sys/bus/pci/devices" / address
    device = PciDevice(address=address)
    if not base.exists():
        device.not_read.append(f"PCI {address}: no {base.relative_to(root)} in sysfs")
        return device
    device.current_speed = _read(base / "current_link_speed")
    device.max_speed = _read(base / "max_link_speed")
    device.current_width = _int(_read(base / "current_link_width"))
    device.max_width = _int(_read(base / "max_link_width"))
    numa = _int(_read(base / "numa_node"))
    device.numa_node = numa if numa is not None and numa >= 0 else None
    device.path = os.path.realpath(base)
    totals: dict[str, int] = {}
    missing: list[str] = []
    for key, name in AER_FILES.items():
        text = _read(base / name)
        if text is None:
            missing.append(name)
        else:
            totals[key] = _aer_total(text)
    device.aer = totals or None
    if missing:
        device.not_read.append(f"PCIe AER of {address}: no {', '.join(missing)} in sysfs")
    return device


def upstream_limits(root: Path, device: PciDevice) -> tuple[str | None, int | None]:
    """The maximum speed and width of the port above the device (the slot's limit), if sysfs
    has them: a gen5 card in a gen4 slot is not downtrained."""
    if device.path is None:
        return None, None
    parent = Path(device.path).parent
    if not (parent / "max_link_speed").exists():
        return None, None
    return _read(parent / "max_link_speed"), _int(_read(parent / "max_link_width"))


def speed_gts(text: str | None) -> float | None:
    """'32.0 GT/s PCIe' -> 32.0."""
    if not text:
        return None
    try:
        return float(text.split()[0])
    except (ValueError, IndexError):
        return None


def _port_state(text: str | None) -> str | None:
    """'4: ACTIVE' -> 'ACTIVE', '5: LinkUp' -> 'LinkUp'."""
    if text is None:
        return None
    return text.partition(":")[2].strip() or text


def read_ib_ports(root: Path, devices: list[str]) -> tuple[list[IbPort], list[str]]:
    """Every port of the RDMA devices (all, or those named), and what was not there."""
    base = root / "sys/class/infiniband"
    if not base.is_dir():
        return [], ["InfiniBand/RoCE: no /sys/class/infiniband (no RDMA devices)"]
    names = sorted(p.name for p in base.iterdir())
    missing = [f"InfiniBand/RoCE: device {d} not found" for d in devices if d not in names]
    if devices:
        names = [n for n in names if n in devices]
    if not names:
        return [], missing or ["InfiniBand/RoCE: no devices under /sys/class/infiniband"]
    ports: list[IbPort] = []
    for name in names:
        device_link = base / name / "device"
        address = Path(os.path.realpath(device_link)).name if device_link.exists() else None
        ports_dir = base / name / "ports"
        for port_dir in sorted(ports_dir.iterdir() if ports_dir.is_dir() else []):
            if not port_dir.name.isdigit():
                continue
            port = IbPort(device=name, port=int(port_dir.name), pci_address=address)
            port.state = _port_state(_read(port_dir / "state"))
            port.phys_state = _port_state(_read(port_dir / "phys_state"))
            port.rate_text = _read(port_dir / "rate")
            match = _RATE.match(port.rate_text or "")
            port.rate_gbps = float(match.group(1)) if match else None
            port.link_layer = _read(port_dir / "link_layer")
            for counter in IB_COUNTERS:
                value = _int(_read(port_dir / "counters" / counter))
                if value is not None:
                    port.counters[counter] = value
            absent = [c for c in IB_COUNTERS if c not in port.counters]
            if absent:
                missing.append(f"{port.name}: no counters {', '.join(absent)}")
            ports.append(port)
    return ports, missing


def find_nvswitches(root: Path) -> list[str]:
    """PCI addresses of NVIDIA bridge-class functions: the NVSwitches of an HGX baseboard."""
    base = root / "sys/bus/pci/devices"
    found = []
    for entry in sorted(base.iterdir() if base.is_dir() else []):
        if _read(entry / "vendor") == _NVIDIA_VENDOR and (_read(entry / "class") or "").startswith(
            _BRIDGE_OTHER_CLASS
        ):
            found.append(entry.name)
    return found


def fabric_manager_running(root: Path) -> bool | None:
    """Whether an nv-fabricmanager process runs; None when this /proc shows only a container's
    own processes (its PID 1 is no init), so nothing can be said."""
    proc = root / "proc"
    if (_read(proc / "1/comm") or "") not in _HOST_INITS:
        return None
    for entry in proc.iterdir():
        if entry.name.isdigit() and _read(entry / "comm") == _FABRIC_MANAGER:
            return True
    return False


def read_host(root: Path, gpu_addresses: list[str], ib_devices: list[str]) -> HostState:
    """The host side of one reading (the kernel log is read by gpuval_agent.state.kernellog)."""
    host = HostState()
    host.ports, missing = read_ib_ports(root, ib_devices)
    host.not_read.extend(missing)
    wanted = list(gpu_addresses) + sorted({p.pci_address for p in host.ports if p.pci_address})
    for address in wanted:
        device = read_pci_device(root, address)
        host.pci[address] = device
        host.not_read.extend(device.not_read)
    host.nvswitches = find_nvswitches(root)
    if host.nvswitches:
        host.fabric_manager = fabric_manager_running(root)
        if host.fabric_manager is None:
            host.not_read.append(
                "fabric manager: this PID namespace does not show the host's processes"
            )
    else:
        host.not_read.append("NVSwitch: none on the PCI bus (no fabric manager needed)")
    return host
