"""The simulated node's hardware state (TEST DOUBLE): NVML answers for the state check, and a host
tree (sysfs, /proc, /dev/kmsg) written to a temporary directory that the state check reads as its
root path, as it reads `/` on a real node.

The node looks like an HGX H200: one GPU alone has no NVLink (as the 1-GPU H200 machine answers
"not supported"); two or more GPUs have 18 active NVLinks each behind 4 NVSwitches, a fabric
manager and one 400G NDR InfiniBand adapter next to each GPU. Faults (simulated.config.FaultKind)
change what it shows at rest, and the `...-grow` faults add to its error counters while the burn
runs.
"""

from __future__ import annotations

import shutil
import tempfile
import weakref
from pathlib import Path

from gpuval_agent.backends.simulated.config import Fault, FaultKind
from gpuval_agent.state.model import (
    COMPLETED,
    CORRECTED_AGGREGATE,
    CORRECTED_VOLATILE,
    FABRIC_SUCCESS,
    NOT_SUPPORTED,
    UNCORRECTED_AGGREGATE,
    UNCORRECTED_VOLATILE,
    GpuFabric,
    GpuState,
    NvLink,
)

NVLINKS = 18
NVLINK_MBPS = 26562
NVSWITCHES = 4
_IB_COUNTERS = ("link_downed", "symbol_error", "port_rcv_errors", "link_error_recovery")
# What a `...-grow` fault adds while the burn runs.
NVLINK_GROWTH = 1200
IB_GROWTH = 40


def gpu_address(gpu: int) -> str:
    """The simulated GPU's PCI address in sysfs form (up to 64 GPUs: buses 0x10-0x8e)."""
    return f"0000:{0x10 + gpu * 2:02x}:00.0"


def nic_address(gpu: int) -> str:
    """The network adapter beside GPU `gpu`, under the same PCIe bridge."""
    return f"0000:{0x11 + gpu * 2:02x}:00.0"


def _bridge(gpu: int) -> str:
    """The PCIe bridge (switch port) above GPU `gpu` and its network adapter."""
    return f"0000:00:{gpu + 1:02x}.0"


# The host tree's directory name in the temporary directory: gpuval-simulated-host-<random>.
TREE_PREFIX = "gpuval-simulated-host-"


def _remove_tree(root: Path) -> None:
    shutil.rmtree(root, ignore_errors=True)


class SimulatedHost:
    """The simulated node's state; `faults` by kind, as the simulated backend holds them."""

    def __init__(self, gpus: int, product: str, faults: dict[FaultKind, list[Fault]]) -> None:
        self.gpus = gpus
        self.product = product
        self._faults = faults
        self._root: Path | None = None
        # Removes the tree: at close(), or when the host is collected or the interpreter ends
        # without a close (a test's backend, an agent that died of an exception): a tree of
        # 1.3 MB per run was left in the temporary directory (issue 42).
        self._remove: weakref.finalize[[Path], SimulatedHost] | None = None
        self._nvlink_growth: dict[int, int] = {}
        self._kmsg_seq = 0

    def _fault(self, kind: FaultKind, gpu: int | None = None) -> Fault | None:
        return next((f for f in self._faults.get(kind, []) if gpu is None or f.gpu == gpu), None)

    def gpu_state(self, gpu: int) -> GpuState:
        ecc = 2 if self._fault(FaultKind.ECC_UNCORRECTABLE, gpu) else 0
        counts = {
            UNCORRECTED_VOLATILE: ecc,
            CORRECTED_VOLATILE: 0,
            UNCORRECTED_AGGREGATE: ecc,
            CORRECTED_AGGREGATE: 3,
        }
        degraded = self._fault(FaultKind.PCIE_DEGRADED, gpu) is not None
        replays = self._fault(FaultKind.PCIE_REPLAYS, gpu)
        capped = self._fault(FaultKind.POWER_CAPPED, gpu) is not None
        state = GpuState(
            index=gpu,
            name=self.product,
            bus_id=f"0000{gpu_address(gpu).upper()}",
            ecc_enabled=True,
            ecc=counts,
            ecc_locations={"DRAM": dict(counts), "SRAM": {k: 0 for k in counts}},
            remapped_correctable=0,
            remapped_uncorrectable=1 if ecc else 0,
            remap_pending=self._fault(FaultKind.ROW_REMAP_PENDING, gpu) is not None,
            remap_failed=False,
            remap_histogram={"max": 3072, "high": 0, "partial": 0, "low": 0, "none": 0},
            pcie_gen=5,
            pcie_max_gen=5,
            pcie_width=8 if degraded else 16,
            pcie_max_width=16,
            pcie_replays=0 if replays is None else replays.count or 1000,
            clocks_event_bits=0x1,
            power_limit_watts=350.0 if capped else 700.0,
            default_power_limit_watts=700.0,
            not_read=["retired pages: not supported"],
        )
        if self.gpus > 1:
            state.nvlinks = [self._nvlink(gpu, link) for link in range(NVLINKS)]
            state.fabric = GpuFabric(state=COMPLETED, status=FABRIC_SUCCESS, clique_id=1)
        else:
            state.not_read.append(f"NVLink: not supported on any of {NVLINKS} links")
            state.fabric = GpuFabric(state=NOT_SUPPORTED)
        return state

    def _nvlink(self, gpu: int, link: int) -> NvLink:
        down = self._fault(FaultKind.NVLINK_DOWN, gpu)
        active = not (down is not None and link == (down.link or 0))
        errors = {"replay": 0, "recovery": 0, "crcFlit": 0, "crcData": 0}
        grows = self._fault(FaultKind.NVLINK_ERRORS_GROW, gpu)
        if grows is not None and link == (grows.link or 0):
            errors["crcFlit"] = self._nvlink_growth.get(gpu, 0)
        return NvLink(
            link=link,
            active=active,
            speed_mbps=NVLINK_MBPS if active else None,
            remote_bus_id=f"00000000:{0xE0 + link % NVSWITCHES:02X}:00.0" if active else None,
            errors=errors,
        )

    # --- the host tree -------------------------------------------------------------------------

    def root(self) -> Path:
        if self._root is None:
            self._root = Path(tempfile.mkdtemp(prefix=TREE_PREFIX))
            self._remove = weakref.finalize(self, _remove_tree, self._root)
            self._write_tree(self._root)
        return self._root

    def close(self) -> None:
        if self._remove is not None:
            self._remove()
        self._root = self._remove = None

    def _pci(self, root: Path, address: str, bridge: str, files: dict[str, str]) -> None:
        real = root / "sys/devices/pci0000:00" / bridge / address
        real.mkdir(parents=True, exist_ok=True)
        bridge_dir = real.parent
        (bridge_dir / "max_link_speed").write_text("32.0 GT/s PCIe\n")
        (bridge_dir / "max_link_width").write_text("16\n")
        for name, text in files.items():
            (real / name).write_text(text + "\n")
        link = root / "sys/bus/pci/devices" / address
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(Path("../../../devices/pci0000:00") / bridge / address)

    def _write_tree(self, root: Path) -> None:
        aer = {
            "aer_dev_correctable": "RxErr 0\nBadTLP 0\nTOTAL_ERR_COR 0",
            "aer_dev_nonfatal": "Undefined 0\nTOTAL_ERR_NONFATAL 0",
            "aer_dev_fatal": "Undefined 0\nTOTAL_ERR_FATAL 0",
        }
        for gpu in range(self.gpus):
            bridge = _bridge(gpu)
            numa = str(gpu * 2 // max(self.gpus, 1))
            link = {
                "current_link_speed": "32.0 GT/s PCIe",
                "max_link_speed": "32.0 GT/s PCIe",
                "current_link_width": "16",
                "max_link_width": "16",
                "numa_node": numa,
                "vendor": "0x10de",
                "class": "0x030200",
            }
            self._pci(root, gpu_address(gpu), bridge, link | aer)
            if self.gpus > 1:
                nic = link | aer | {"vendor": "0x15b3", "class": "0x020700"}
                self._pci(root, nic_address(gpu), bridge, nic)
                self._ib_port(root, gpu)
        if self.gpus > 1:
            for switch in range(NVSWITCHES):
                files = {"vendor": "0x10de", "class": "0x068000", "numa_node": "0"}
                self._pci(root, f"0000:{0xE0 + switch:02x}:00.0", "0000:00:1f.0", files)
            self._process(root, 1, "systemd")
            self._process(root, 4242, "nv-fabricmanager")
        kmsg = root / "dev/kmsg"
        kmsg.parent.mkdir(parents=True, exist_ok=True)
        kmsg.write_text(
            "6,1,100,-;Linux version simulated\n6,2,200,-;NVRM: loading NVIDIA driver\n"
        )
        self._kmsg_seq = 3
        for fault in self._faults.get(FaultKind.KERNEL_XID, []):
            self.log_xid(fault.gpu, fault.xid)

    def _process(self, root: Path, pid: int, comm: str) -> None:
        directory = root / "proc" / str(pid)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "comm").write_text(comm + "\n")

    def _ib_port(self, root: Path, gpu: int) -> None:
        device = root / f"sys/class/infiniband/mlx5_{gpu}"
        port = device / "ports/1"
        (port / "counters").mkdir(parents=True, exist_ok=True)
        device_link = device / "device"
        device_link.symlink_to(
            Path("../../../devices/pci0000:00") / _bridge(gpu) / nic_address(gpu)
        )
        down = self._fault(FaultKind.IB_PORT_DOWN, gpu) is not None
        (port / "state").write_text("1: DOWN\n" if down else "4: ACTIVE\n")
        (port / "phys_state").write_text("3: Disabled\n" if down else "5: LinkUp\n")
        (port / "rate").write_text("400 Gb/sec (4X NDR)\n")
        (port / "link_layer").write_text("InfiniBand\n")
        flapping = self._fault(FaultKind.IB_LINK_FLAPPING, gpu)
        for counter in _IB_COUNTERS:
            value = (flapping.count or 3) if flapping and counter == "link_downed" else 0
            (port / "counters" / counter).write_text(f"{value}\n")

    # --- what the burn changes -------------------------------------------------------------------

    def log_xid(self, gpu: int, xid: int) -> None:
        """An XID line in the simulated kernel log, as the driver writes it."""
        kmsg = self.root() / "dev/kmsg"
        bus = gpu_address(gpu)[:-2]
        line = (
            f"4,{self._kmsg_seq},{1000 + self._kmsg_seq},-;NVRM: Xid (PCI:{bus}): {xid}, "
            "pid='<unknown>', name=<unknown>, simulated XID\n"
        )
        self._kmsg_seq += 1
        with kmsg.open("a") as stream:
            stream.write(line)

    def burn_wear(self) -> None:
        """What the `...-grow` faults do while the burn loads the GPUs."""
        for fault in self._faults.get(FaultKind.NVLINK_ERRORS_GROW, []):
            self._nvlink_growth[fault.gpu] = self._nvlink_growth.get(fault.gpu, 0) + NVLINK_GROWTH
        for fault in self._faults.get(FaultKind.IB_ERRORS_GROW, []):
            counter = self.root() / f"sys/class/infiniband/mlx5_{fault.gpu}/ports/1/counters"
            path = counter / "symbol_error"
            if path.exists():
                path.write_text(f"{int(path.read_text()) + IB_GROWTH}\n")
