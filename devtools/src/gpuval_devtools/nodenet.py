"""The real node's footprint on the machine, recorded before it starts and removed after it stops,
also after a crash: the pod bridge, the iptables rules (ours, kube-proxy's, the kubelet's, the CNI
plugins'), the sysctls the kubelet and the CNI bridge plugin change, mounts, cgroups and processes.

Only one real node runs on a machine at a time (a lock in /run): its bridge, pod network and
iptables state are the machine's. Traffic stays on the machine: pods reach the API server through
a DNAT to loopback and each other over the bridge; forwarding between the bridge and any other
interface is dropped both ways.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO

from gpuval_devtools.buildsteps import BuildError, Log
from gpuval_devtools.kwoknodes import API_SERVICE_IP

BRIDGE = "gpuval0"
POD_CIDR = "10.244.0.0/24"
GATEWAY = "10.244.0.1"
GATEWAY_PREFIX = f"{GATEWAY}/24"
CHAIN = "GPUVAL-NODE"
CGROUP_ROOT = "gpuval"
CNI_NETWORK = "gpuval-node"
RUN_DIR = Path("/run/gpuval-realnode")
CGROUP_FS = Path("/sys/fs/cgroup")
# Changed by the kubelet (setupKernelTunables), kube-proxy or the CNI bridge plugin.
SYSCTLS = (
    "net/ipv4/ip_forward",
    "net/ipv4/conf/all/route_localnet",
    "net/bridge/bridge-nf-call-iptables",
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
)


# Fixed paths the kubelet and containerd write whatever their configuration says: the device
# plugin socket directory, the container log links, the shims' sockets (/run/containerd/s), the
# CNI result cache. Removed at the end when the node created them.
MACHINE_DIRS = ("/var/lib/kubelet", "/var/log/containers", "/run/containerd", "/var/lib/cni")


@dataclass
class Footprint:
    """What the machine looked like before the node, and what the node started."""

    root: str
    containerd_socket: str
    iptables: dict[str, str] = field(default_factory=dict)
    sysctls: dict[str, str] = field(default_factory=dict)
    pids: dict[str, int] = field(default_factory=dict)
    created_dirs: list[str] = field(default_factory=list)

    def save(self) -> None:
        RUN_DIR.mkdir(parents=True, exist_ok=True)
        (RUN_DIR / "state.json").write_text(json.dumps(asdict(self)))

    @classmethod
    def load(cls) -> Footprint | None:
        path = RUN_DIR / "state.json"
        return cls(**json.loads(path.read_text())) if path.is_file() else None


@contextlib.contextmanager
def machine_lock(*, log: Log, timeout: float = 1800) -> Iterator[IO[str]]:
    """Held while a real node runs; another waits for it (one node per machine)."""
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    handle = (RUN_DIR / "lock").open("a+")
    deadline = time.monotonic() + timeout
    told = False
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError as busy:
            if not told:
                log(f"another real node runs on this machine ({RUN_DIR}/lock); waiting for it")
                told = True
            if time.monotonic() > deadline:
                handle.close()
                raise BuildError(
                    f"real node: {RUN_DIR}/lock still held after {timeout:.0f}s"
                ) from busy
            time.sleep(2)
    try:
        yield handle
    finally:
        handle.close()


def _sh(*argv: str, check: bool = True, input: str | None = None) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, input=input)
    if check and proc.returncode != 0:
        raise BuildError(f"real node: `{' '.join(argv)}` exited {proc.returncode}: {proc.stderr}")
    return proc.stdout


def record(root: Path, containerd_socket: Path) -> Footprint:
    footprint = Footprint(root=str(root), containerd_socket=str(containerd_socket))
    for tool in ("iptables", "ip6tables"):
        footprint.iptables[tool] = _sh(f"{tool}-save")
    for key in SYSCTLS:
        path = Path("/proc/sys") / key
        if path.exists():
            footprint.sysctls[key] = path.read_text().strip()
    footprint.created_dirs = [d for d in MACHINE_DIRS if not Path(d).exists()]
    footprint.save()
    return footprint


def host_ip() -> str:
    """The machine's first global IPv4 address: the node's InternalIP (never loopback)."""
    for line in _sh("ip", "-4", "-o", "addr", "show", "scope", "global").splitlines():
        fields = line.split()
        return fields[fields.index("inet") + 1].split("/")[0]
    raise BuildError("real node: this machine has no global IPv4 address for the node's IP")


def _ipt(*args: str) -> None:
    _sh("iptables", "-w", "5", *args)


def setup_network(api_port: int) -> None:
    """The pod bridge (made here so the cluster DNS can bind its address before the first pod),
    pods' way to the API server, and the fence that keeps pod traffic on the machine."""
    _sh("ip", "link", "add", BRIDGE, "type", "bridge")
    _sh("ip", "addr", "add", GATEWAY_PREFIX, "dev", BRIDGE)
    _sh("ip", "link", "set", BRIDGE, "up")
    # The API server listens on loopback only: pods reach it by a DNAT to 127.0.0.1, which the
    # kernel routes only from an interface with route_localnet.
    Path(f"/proc/sys/net/ipv4/conf/{BRIDGE}/route_localnet").write_text("1")
    Path("/proc/sys/net/ipv4/ip_forward").write_text("1")
    _ipt("-N", CHAIN)
    _ipt("-A", CHAIN, "-i", BRIDGE, "!", "-o", BRIDGE, "-j", "DROP")
    _ipt("-A", CHAIN, "-o", BRIDGE, "!", "-i", BRIDGE, "-j", "DROP")
    _ipt("-I", "FORWARD", "1", "-j", CHAIN)
    _ipt("-t", "nat", "-N", CHAIN)
    _ipt(
        "-t",
        "nat",
        "-A",
        CHAIN,
        "-i",
        BRIDGE,
        "-d",
        API_SERVICE_IP,
        "-p",
        "tcp",
        "--dport",
        "443",
        "-j",
        "DNAT",
        "--to-destination",
        f"127.0.0.1:{api_port}",
    )
    _ipt("-t", "nat", "-I", "PREROUTING", "1", "-j", CHAIN)


def setup_cgroups() -> None:
    """The kubelet's cgroup root, in every cgroup v1 hierarchy (the kubelet wants it to exist)."""
    for hierarchy in CGROUP_FS.iterdir():
        if hierarchy.is_dir() and (hierarchy / "cgroup.procs").exists():
            (hierarchy / CGROUP_ROOT).mkdir(exist_ok=True)


def _mountpoints_under(root: str) -> list[str]:
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point == root or point.startswith(root + "/"):
            points.append(point)
    return sorted(points, key=len, reverse=True)


def _mounted(point: str) -> bool:
    return point in _mountpoints_under(point)


def _kill(pids: Sequence[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _cgroup_dirs() -> list[Path]:
    return [h / CGROUP_ROOT for h in CGROUP_FS.iterdir() if (h / CGROUP_ROOT).is_dir()]


def _pids_in_cgroups() -> list[int]:
    pids = []
    for top in _cgroup_dirs():
        for procs in top.rglob("cgroup.procs"):
            with contextlib.suppress(OSError):
                pids += [int(p) for p in procs.read_text().split()]
    return pids


def _pids_with_argument(text: str) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError):
                if text in (proc / "cmdline").read_bytes().decode(errors="replace"):
                    found.append(int(proc.name))
    return found


def _listening_sockets(pids: Sequence[int]) -> list[Path]:
    """The paths of the Unix sockets these processes hold (a shim's, in /run/containerd/s)."""
    inodes = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                with contextlib.suppress(OSError):
                    target = os.readlink(fd)
                    if target.startswith("socket:["):
                        inodes.add(target[8:-1])
    paths = []
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 8 and fields[6] in inodes and fields[7].startswith("/"):
            paths.append(Path(fields[7]))
    return paths


def kill_everything(footprint: Footprint) -> None:
    """SIGKILL to the node's daemons, its containers (by cgroup) and their shims (by the
    containerd socket in their command line; their own sockets removed after), then the empty
    cgroups removed."""
    _kill(list(footprint.pids.values()))
    shim_sockets = _listening_sockets(_pids_with_argument(footprint.containerd_socket))
    for _ in range(20):
        victims = _pids_in_cgroups() + _pids_with_argument(footprint.containerd_socket)
        victims = [p for p in victims if p != os.getpid()]
        if not victims:
            break
        _kill(victims)
        time.sleep(0.25)
    for socket_path in shim_sockets:
        if not str(socket_path).startswith(footprint.root):
            socket_path.unlink(missing_ok=True)
    for top in _cgroup_dirs():
        for path in sorted(top.rglob("*"), key=lambda p: len(p.parts), reverse=True):
            if path.is_dir():
                with contextlib.suppress(OSError):
                    path.rmdir()
        with contextlib.suppress(OSError):
            top.rmdir()


def teardown(footprint: Footprint, *, log: Log) -> list[str]:
    """Removes everything the node added to the machine; returns what could not be removed."""
    problems: list[str] = []
    kill_everything(footprint)
    for point in _mountpoints_under(footprint.root):
        _sh("umount", point, check=False)
        if _mounted(point):
            _sh("umount", "-l", point, check=False)
        if _mounted(point):
            problems.append(f"mount {point}")
    if Path(f"/sys/class/net/{BRIDGE}").exists():
        _sh("ip", "link", "del", BRIDGE, check=False)
    for tool, saved in footprint.iptables.items():
        # Back to the state before the node: kube-proxy's, the kubelet's and the CNI plugins'
        # chains go with ours. Tables created since are emptied (restore does not know them).
        for table in ("filter", "nat", "mangle", "raw"):
            if f"*{table}\n" not in saved:
                _sh(tool, "-w", "5", "-t", table, "-F", check=False)
                _sh(tool, "-w", "5", "-t", table, "-X", check=False)
        _sh(f"{tool}-restore", "-w", "5", input=saved, check=False)
    for key, value in footprint.sysctls.items():
        with contextlib.suppress(OSError):
            (Path("/proc/sys") / key).write_text(value)
    for link in Path("/var/log/containers").glob("*.log"):
        if link.is_symlink() and os.readlink(link).startswith(footprint.root):
            link.unlink()
    # libcni caches each result in /var/lib/cni whatever containerd's config says: ours are
    # those of the sandboxes this node's containerd made (its pod network's and the loopback's).
    sandboxes = (
        Path(footprint.root) / "containerd" / "root" / "io.containerd.grpc.v1.cri" / "sandboxes"
    )
    for sandbox in sandboxes.glob("*") if sandboxes.is_dir() else []:
        for result in Path("/var/lib/cni/results").glob(f"*-{sandbox.name}-*"):
            result.unlink()
    Path("/var/lib/kubelet/device-plugins/kubelet.sock").unlink(missing_ok=True)
    for created in footprint.created_dirs:
        _remove_if_only_directories(Path(created))
    if _pids_in_cgroups():
        problems.append("processes left in the node's cgroups")
    (RUN_DIR / "state.json").unlink(missing_ok=True)
    if problems:
        log(f"real node teardown left: {', '.join(problems)}")
    return problems


def _remove_if_only_directories(top: Path) -> None:
    """Removes ``top`` when nothing but empty directories is left in it (files in it are not
    the node's: the node's own were removed before)."""
    if not top.is_dir():
        return
    for dirpath, _dirnames, filenames in os.walk(top):
        if filenames:
            return
        del dirpath
    for path in sorted(top.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        path.rmdir()
    top.rmdir()


def sweep(*, log: Log) -> None:
    """Removes a node whose owner died without stopping it (its state file survives in /run)."""
    leftover = Footprint.load()
    if leftover is not None:
        log(f"removing the leftovers of a real node that was not stopped: {leftover.root}")
        teardown(leftover, log=log)
