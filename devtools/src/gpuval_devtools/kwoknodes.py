"""What the kwok side of the local control plane is made of: the kwokctl arguments and
configuration that keep it on loopback and away from a real node, and the simulated GPU nodes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpuval_api.gfd import GPU_COUNT_LABEL, GPU_PRODUCT_LABEL, SharingStrategy, shared_labels
from gpuval_devtools.binaries import KUBE_VERSION
from gpuval_devtools.buildsteps import free_ports

GPU_RESOURCE = "nvidia.com/gpu"
# The `kubernetes` Service's address in kube-apiserver's default service range.
API_SERVICE_IP = "10.0.0.1"
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
# A pod CIDR on this machine's loopback network (all of 127.0.0.0/8 is local): kwok gives each pod
# of a node with it an address from it, which reaches the pod runner's processes here (a fabric
# rank 0 listens on every address), so an agent can dial a pod IP it read from the API server.
LOOPBACK_POD_CIDR = "127.64.0.0/16"
# kwok-controller's own defaults (v0.8.0, pkg/apis/config/v1alpha1/zz_generated.defaults.go): a
# KwokConfiguration document given to kwokctl reaches kwok-controller without them, and one
# without its parallelisms stops it ("node leases parallelism must be greater than 0").
KWOK_DEFAULT_OPTIONS: Mapping[str, Any] = {
    "cidr": "10.0.0.0/24",
    "podPlayStageParallelism": 4,
    "nodePlayStageParallelism": 4,
    "nodeLeaseParallelism": 4,
    "podsOnNodeSyncParallelism": 1,
    "enablePodsOnNodeSyncListPager": True,
    "enablePodsOnNodeSyncStreamWatch": False,
}


def loopback_args() -> list[str]:
    """kwokctl binds every component to 0.0.0.0; a test control plane belongs on loopback. Every
    port is chosen here: kwokctl picks the API server's, the controller manager's and the
    scheduler's itself, counting down from 32765, so control planes started at the same moment
    (one per pytest-xdist worker) took the same ones and all but one never came up."""
    etcd, peer, kwok, apiserver, manager, scheduler = free_ports(6)
    overrides = {
        "etcd": {
            "listen-client-urls": f"http://127.0.0.1:{etcd}",
            "advertise-client-urls": f"http://127.0.0.1:{etcd}",
            "listen-peer-urls": f"http://127.0.0.1:{peer}",
            "initial-advertise-peer-urls": f"http://127.0.0.1:{peer}",
            "initial-cluster": f"node0=http://127.0.0.1:{peer}",
        },
        "kube-apiserver": {"bind-address": "127.0.0.1"},
        "kube-controller-manager": {"bind-address": "127.0.0.1"},
        "kube-scheduler": {"bind-address": "127.0.0.1"},
        "kwok-controller": {"server-address": f"127.0.0.1:{kwok}"},
    }
    args = [
        *("--etcd-port", str(etcd), "--controller-port", str(kwok)),
        *("--kube-apiserver-port", str(apiserver)),
        *("--kube-controller-manager-port", str(manager), "--kube-scheduler-port", str(scheduler)),
    ]
    for component, flags in overrides.items():
        for key, value in flags.items():
            args += ["--extra-args", f"{component}={key}={value}"]
    return args


def kwokctl_config(workdir: Path, name: str, kwok_options: Mapping[str, Any] | None = None) -> Path:
    """kwok-controller limited to the nodes annotated as kwok's, so a real node's kubelet is left
    alone (a configuration file: kwokctl v0.8.0 panics on this flag in --extra-args); the API
    server's certificate valid for the `kubernetes` Service address, which pods of a real node
    connect to; the API server authenticating to kubelets, so `kubectl logs` reaches one;
    kube-scheduler and kube-controller-manager without leader election (below). With
    `kwok_options`, kwok-controller's own options too (a KwokConfiguration document, which
    kwokctl hands to it: e.g. podPlayStageParallelism), kwok's defaults for the rest."""
    pki = workdir / "clusters" / name / "pki"
    config = {
        "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
        "kind": "KwokctlConfiguration",
        "options": {"kubeApiserverCertSANs": [API_SERVICE_IP]},
        "componentsPatches": [
            {
                "name": "kube-apiserver",
                "extraArgs": [
                    {"key": "kubelet-client-certificate", "value": str(pki / "admin.crt")},
                    {"key": "kubelet-client-key", "value": str(pki / "admin.key")},
                    # Not the node's name first: looking it up would ask the machine's resolver.
                    {"key": "kubelet-preferred-address-types", "value": "InternalIP"},
                ],
            },
            # One kube-scheduler and one kube-controller-manager per cluster: leader election
            # only adds a way to die. With it, an API server that answers no Lease renewal for
            # longer than the renew deadline (10 s: a loaded 2-core machine, a test that stops
            # it) makes both exit ("leaderelection lost"); kwokctl's binary runtime never
            # restarts them and pods stay Pending with no hint. Without it they retry.
            *(
                {"name": component, "extraArgs": [{"key": "leader-elect", "value": "false"}]}
                for component in ("kube-scheduler", "kube-controller-manager")
            ),
            {
                "name": "kwok-controller",
                "extraArgs": [
                    {"key": "manage-all-nodes", "value": "false", "override": True},
                    {
                        "key": "manage-nodes-with-annotation-selector",
                        "value": f"{KWOK_NODE_ANNOTATION}=fake",
                    },
                ],
            },
        ],
    }
    documents: list[dict[str, Any]] = [config]
    if kwok_options:
        documents.append(
            {
                "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
                "kind": "KwokConfiguration",
                "options": {**KWOK_DEFAULT_OPTIONS, **kwok_options},
            }
        )
    path = workdir / "configs" / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump_all(documents))
    return path


@dataclass(frozen=True)
class GpuNode:
    """A simulated node (kwok) that advertises ``gpus`` NVIDIA GPUs as ``nvidia.com/gpu``; with
    ``sharing`` (time-slicing, mps) its device plugin shares each as ``replicas`` replicas: it
    advertises gpus x replicas and carries the labels GPU feature discovery sets then."""

    name: str
    gpus: int = 8
    sharing: SharingStrategy | None = None
    replicas: int = 1
    product: str = "NVIDIA-H200"
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    taints: Sequence[Mapping[str, str]] = ()
    cpu: str = "192"
    memory: str = "2Ti"
    boot_id: str = "boot-1"
    # spec.podCIDR: kwok takes its pods' IPs from it (unset: kwok's own range, 10.0.0.0/24).
    pod_cidr: str | None = None
    # More device-plugin resources, e.g. nvidia.com/mig-1g.18gb under the mixed MIG strategy.
    resources: Mapping[str, str] = field(default_factory=dict)
    # ResourceSlices that publish its GPUs as a DRA driver would (gpuval_devtools.dra), applied
    # with the node.
    slices: Sequence[Mapping[str, Any]] = ()

    def manifest(self) -> dict[str, Any]:
        labels = {
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "node-role.kubernetes.io/gpu": "",
            "type": "kwok",
            "nvidia.com/gpu.present": "true",
            GPU_PRODUCT_LABEL: self.product,
            GPU_COUNT_LABEL: str(self.gpus),
            "nvidia.com/gpu.memory": "143771",
            **(
                shared_labels(self.sharing, self.replicas, self.gpus, self.product)
                if self.sharing is not None
                else {}
            ),
            **self.labels,
        }
        resources = {
            "cpu": self.cpu,
            "memory": self.memory,
            "pods": "110",
            "ephemeral-storage": "1Ti",
            GPU_RESOURCE: str(self.gpus * self.replicas),
            **self.resources,
        }
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.name,
                "labels": labels,
                "annotations": {KWOK_NODE_ANNOTATION: "fake", **self.annotations},
            },
            "spec": {
                "taints": [dict(t) for t in self.taints],
                **({"podCIDR": self.pod_cidr} if self.pod_cidr else {}),
            },
            "status": {
                "capacity": resources,
                "allocatable": resources,
                "nodeInfo": {
                    "architecture": "amd64",
                    "operatingSystem": "linux",
                    "kubeletVersion": f"{KUBE_VERSION}-kwok",
                    # A real kubelet reports its boot; gpuval's gating re-validates on a new one.
                    "bootID": self.boot_id,
                },
            },
        }


def default_nodes(count: int, prefix: str = "gpu-node") -> list[GpuNode]:
    return [GpuNode(name=f"{prefix}-{i}") for i in range(count)]
