"""What the state check reads: plain data, JSON-able (dataclasses.asdict) for the evidence."""

from __future__ import annotations

from dataclasses import dataclass, field

# Keys of the ECC counters (GpuState.ecc and each entry of ecc_locations).
UNCORRECTED_VOLATILE = "uncorrectedVolatile"
CORRECTED_VOLATILE = "correctedVolatile"
UNCORRECTED_AGGREGATE = "uncorrectedAggregate"
CORRECTED_AGGREGATE = "correctedAggregate"

# NVLink error counters, as nvidia-smi names them.
NVLINK_COUNTERS = ("replay", "recovery", "crcFlit", "crcData")


@dataclass(slots=True)
class NvLink:
    """One NVLink of a GPU that NVML reports (links it answers 'not supported' for are left out)."""

    link: int
    active: bool
    speed_mbps: int | None = None
    remote_bus_id: str | None = None
    errors: dict[str, int] = field(default_factory=dict)


# nvmlGpuFabricState_t, as nvml.h names the states (NVML_GPU_FABRIC_STATE_<name>).
NOT_SUPPORTED = "NOT_SUPPORTED"
COMPLETED = "COMPLETED"
FABRIC_SUCCESS = "Success"


@dataclass(slots=True)
class GpuFabric:
    """NVML's GPU fabric info (NVSwitch systems)."""

    state: str  # NOT_SUPPORTED, NOT_STARTED, IN_PROGRESS or COMPLETED
    status: str | None = None  # the registration's NVML return, FABRIC_SUCCESS when it worked
    clique_id: int | None = None
    cluster_uuid: str | None = None
    health_mask: int | None = None


@dataclass(slots=True)
class GpuState:
    """One GPU as NVML shows it at rest; None where NVML does not answer (named in not_read)."""

    index: int
    name: str | None = None
    bus_id: str | None = None  # NVML's form, 00000000:18:00.0
    ecc_enabled: bool | None = None
    ecc: dict[str, int] = field(default_factory=dict)
    ecc_locations: dict[str, dict[str, int]] = field(default_factory=dict)
    remapped_correctable: int | None = None
    remapped_uncorrectable: int | None = None
    remap_pending: bool | None = None
    remap_failed: bool | None = None
    remap_histogram: dict[str, int] | None = None  # max, high, partial, low, none
    retired_pages: dict[str, int] | None = None  # singleBit, doubleBit
    retired_pending: bool | None = None
    nvlinks: list[NvLink] = field(default_factory=list)
    pcie_gen: int | None = None
    pcie_max_gen: int | None = None
    pcie_width: int | None = None
    pcie_max_width: int | None = None
    pcie_replays: int | None = None
    clocks_event_bits: int | None = None
    power_limit_watts: float | None = None
    default_power_limit_watts: float | None = None
    fabric: GpuFabric | None = None
    not_read: list[str] = field(default_factory=list)


@dataclass(slots=True)
class PciDevice:
    """A PCI function in sysfs (a GPU or a network adapter)."""

    address: str  # sysfs form, 0000:18:00.0
    current_speed: str | None = None  # as sysfs writes it, e.g. "32.0 GT/s PCIe"
    max_speed: str | None = None
    current_width: int | None = None
    max_width: int | None = None
    aer: dict[str, int] | None = None  # correctable, nonfatal, fatal totals
    numa_node: int | None = None
    path: str | None = None  # the resolved sysfs path, which names every bridge above it
    not_read: list[str] = field(default_factory=list)


@dataclass(slots=True)
class IbPort:
    """One InfiniBand/RoCE port from /sys/class/infiniband/<device>/ports/<port>/."""

    device: str
    port: int
    state: str | None = None  # "ACTIVE" (from "4: ACTIVE")
    phys_state: str | None = None  # "LinkUp"
    rate_gbps: float | None = None
    rate_text: str | None = None
    link_layer: str | None = None  # InfiniBand or Ethernet (RoCE)
    counters: dict[str, int] = field(default_factory=dict)
    pci_address: str | None = None

    @property
    def name(self) -> str:
        return f"{self.device} port {self.port}"


@dataclass(slots=True)
class KernelXid:
    """One XID line of the kernel log."""

    xid: int
    pci: str  # as the line writes it, e.g. 0000:18:00
    line: int  # its index among the log lines read
    text: str
    since_boot: float | None = None  # seconds after boot it was logged, where the line says


@dataclass(slots=True)
class KernelLog:
    """What the kernel log (since boot, as far as the ring buffer reaches) says about XIDs."""

    source: str | None = None  # /dev/kmsg or dmesg; None when unreadable
    lines: list[str] = field(default_factory=list)  # the lines around each XID, numbered
    line_count: int = 0
    uptime_seconds: float | None = None  # when it was read, for each XID's age
    xids: list[KernelXid] = field(default_factory=list)
    error: str | None = None  # why it could not be read


@dataclass(slots=True)
class HostState:
    """The host side: PCI devices of the GPUs and NICs, InfiniBand ports, NVSwitches, the fabric
    manager, the kernel log."""

    pci: dict[str, PciDevice] = field(default_factory=dict)
    ports: list[IbPort] = field(default_factory=list)
    nvswitches: list[str] = field(default_factory=list)
    fabric_manager: bool | None = None  # None: this PID namespace cannot tell
    kernel_log: KernelLog = field(default_factory=KernelLog)
    not_read: list[str] = field(default_factory=list)


@dataclass(slots=True)
class Reading:
    """One reading of the whole state: the GPUs from NVML, the host from sysfs and the log."""

    label: str  # "before", "after burn", ...
    gpus: list[GpuState]
    host: HostState
    seconds: float = 0.0
