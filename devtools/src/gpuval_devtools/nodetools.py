"""The real node's tools, and images loaded into the real node that runs now.

containerd, runc and the CNI plugins come from Debian bookworm's packages, the kubelet and
kube-proxy from the control plane's build (gpuval_devtools.binaries). Below both the real node
(gpuval_devtools.realnode), which runs them, and the image builder (gpuval_devtools.images), whose
``--load`` hands its archives to the node's containerd.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gpuval_devtools import nodenet
from gpuval_devtools.buildsteps import Log, apt_install, debian_files, stderr_log

if TYPE_CHECKING:
    from gpuval_devtools.binaries import Binaries

NODE_DEBIAN = "bookworm"


@dataclass(frozen=True)
class NodeTools:
    containerd: Path
    ctr: Path
    runc: Path
    cni_bin: Path
    kubelet: Path
    kube_proxy: Path


def node_tools(binaries: Binaries, *, log: Log) -> NodeTools:
    """containerd, runc and the CNI plugins unpacked from Debian bookworm; iptables and conntrack
    installed (the plugins and kube-proxy run them, with the system's libraries)."""
    apt_install({"iptables": "iptables", "conntrack": "conntrack"}, log=log)
    containerd = debian_files(
        "containerd",
        ["usr/bin/containerd", "usr/bin/ctr", "usr/bin/containerd-shim-runc-v2"],
        suite=NODE_DEBIAN,
        log=log,
    )
    runc = debian_files("runc", ["usr/sbin/runc"], suite=NODE_DEBIAN, log=log)["usr/sbin/runc"]
    cni = debian_files(
        "containernetworking-plugins",
        [
            "usr/lib/cni/bridge",
            "usr/lib/cni/host-local",
            "usr/lib/cni/portmap",
            "usr/lib/cni/loopback",
        ],
        suite=NODE_DEBIAN,
        log=log,
    )
    return NodeTools(
        containerd=containerd["usr/bin/containerd"],
        ctr=containerd["usr/bin/ctr"],
        runc=runc,
        cni_bin=cni["usr/lib/cni/bridge"].parent,
        kubelet=binaries.kubelet,
        kube_proxy=binaries.kube_proxy,
    )


def footprint_of_running_node() -> nodenet.Footprint:
    found = nodenet.Footprint.load()
    if found is None:
        raise FileNotFoundError(f"no real node runs on this machine ({nodenet.RUN_DIR})")
    return found


def load_into_running_node(archives: list[Path], *, log: Log = stderr_log) -> None:
    """``make images LOAD=1``: the archives into the containerd of the node running now."""
    footprint = footprint_of_running_node()
    ctr = debian_files("containerd", ["usr/bin/ctr"], suite=NODE_DEBIAN, log=log)["usr/bin/ctr"]
    for archive in archives:
        subprocess.run(
            [
                str(ctr),
                "--address",
                footprint.containerd_socket,
                "--namespace",
                "k8s.io",
                "images",
                "import",
                str(archive),
            ],
            check=True,
        )
