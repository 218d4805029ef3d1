"""The real node's files: containerd's config, the CNI network, the kubelet's and kube-proxy's
configurations, kubeconfigs and client certificates signed by the cluster's CA. Pure writing: the
processes are gpuval_devtools.realnode's."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from gpuval_devtools import nodenet
from gpuval_devtools.buildsteps import BuildError, free_port

if TYPE_CHECKING:
    from gpuval_devtools.clusteraccess import ClusterAccess
    from gpuval_devtools.nodetools import NodeTools


TAINT_KEY = "gpuval.dev/real-node"


@dataclass(frozen=True)
class NodePaths:
    root: Path

    @classmethod
    def fresh(cls, root: Path) -> NodePaths:
        """An empty node directory (logs of an earlier node of this name go too)."""
        shutil.rmtree(root, ignore_errors=True)
        paths = cls(root)
        for directory in (paths.logs, paths.pki, paths.cni_conf, paths.kubelet_root):
            directory.mkdir(parents=True)
        return paths

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def pki(self) -> Path:
        return self.root / "pki"

    @property
    def containerd_config(self) -> Path:
        return self.root / "containerd" / "config.toml"

    @property
    def containerd_socket(self) -> Path:
        return self.root / "containerd" / "containerd.sock"

    @property
    def cni_conf(self) -> Path:
        return self.root / "cni" / "net.d"

    @property
    def kubelet_root(self) -> Path:
        return self.root / "kubelet" / "root"

    @property
    def kubelet_config(self) -> Path:
        return self.root / "kubelet" / "config.yaml"

    @property
    def proxy_config(self) -> Path:
        return self.root / "kube-proxy" / "config.yaml"


def write_all(
    paths: NodePaths,
    cluster: ClusterAccess,
    *,
    node: str,
    node_ip: str,
    tools: NodeTools,
    pause: str,
) -> None:
    _write(paths.containerd_config, containerd_config(paths, tools, pause))
    _write(paths.cni_conf / "10-gpuval.conflist", json.dumps(cni_conflist(paths), indent=1))
    kubelet_kubeconfig = paths.root / "kubelet" / "kubeconfig"
    proxy_kubeconfig = paths.root / "kube-proxy" / "kubeconfig"
    node_cert = client_cert(cluster, paths.pki / "kubelet", f"system:node:{node}", "system:nodes")
    proxy_cert = client_cert(cluster, paths.pki / "kube-proxy", "system:kube-proxy", None)
    _write(kubelet_kubeconfig, kubeconfig(cluster, node_cert))
    _write(proxy_kubeconfig, kubeconfig(cluster, proxy_cert))
    # No search domains or name servers of the machine's: pods resolve cluster names only.
    _write(paths.root / "kubelet" / "resolv.conf", "")
    _write(paths.kubelet_config, yaml.safe_dump(kubelet_config(paths, cluster, node_ip)))
    _write(paths.proxy_config, yaml.safe_dump(proxy_config(paths, node, proxy_kubeconfig)))


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def containerd_config(paths: NodePaths, tools: NodeTools, pause: str) -> str:
    base = paths.root / "containerd"
    return f"""version = 2
root = "{base}/root"
state = "{base}/state"
# Snapshotters this machine cannot run would only log errors at every start.
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "{paths.containerd_socket}"

[ttrpc]
  address = "{paths.containerd_socket}.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "{base}/opt"

[plugins."io.containerd.grpc.v1.cri"]
  # Built here (images/pause): no image can be pulled.
  sandbox_image = "{pause}"
  # The sandbox lacks CAP_SYS_RESOURCE: without this runc fails ("can't get final child's PID").
  restrict_oom_score_adj = true
  # Network namespaces under the node's own state directory, so its teardown finds them all.
  netns_mounts_under_state_dir = true
  enable_selinux = false
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

[plugins."io.containerd.grpc.v1.cri".containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  BinaryName = "{tools.runc}"
  # runc's state in the node's own directory, not /run/containerd/runc.
  Root = "{base}/runc"
  SystemdCgroup = false

[plugins."io.containerd.grpc.v1.cri".cni]
  bin_dir = "{tools.cni_bin}"
  conf_dir = "{paths.cni_conf}"
  max_conf_num = 1
"""


def cni_conflist(paths: NodePaths) -> dict[str, Any]:
    return {
        "cniVersion": "1.0.0",
        "name": nodenet.CNI_NETWORK,
        "plugins": [
            {
                "type": "bridge",
                "bridge": nodenet.BRIDGE,
                "isGateway": True,
                # No masquerade: pod traffic has nowhere to go but this machine.
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": nodenet.POD_CIDR, "gateway": nodenet.GATEWAY}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(paths.root / "cni" / "ipam"),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
            {"type": "loopback"},
        ],
    }


def client_cert(
    cluster: ClusterAccess, stem: Path, user: str, group: str | None
) -> tuple[Path, Path]:
    """A client certificate for ``user`` (in ``group``) signed by the cluster's CA."""
    key, csr, crt = stem.with_suffix(".key"), stem.with_suffix(".csr"), stem.with_suffix(".crt")
    subject = (f"/O={group}" if group else "") + f"/CN={user}"
    ca_key = cluster.ca_file.with_name("ca.key")
    for argv in (
        [
            "openssl",
            "req",
            "-new",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            str(key),
            "-subj",
            subject,
            "-out",
            str(csr),
        ],
        [
            "openssl",
            "x509",
            "-req",
            "-in",
            str(csr),
            "-CA",
            str(cluster.ca_file),
            "-CAkey",
            str(ca_key),
            "-set_serial",
            "1",
            "-days",
            "7",
            "-out",
            str(crt),
        ],
    ):
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise BuildError(f"real node: {' '.join(argv[:2])} for {user} failed: {proc.stderr}")
    return crt, key


def kubeconfig(cluster: ClusterAccess, cert: tuple[Path, Path]) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": cluster.name,
                    "cluster": {
                        "server": cluster.server,
                        "certificate-authority": str(cluster.ca_file),
                    },
                }
            ],
            "users": [
                {
                    "name": "node",
                    "user": {"client-certificate": str(cert[0]), "client-key": str(cert[1])},
                }
            ],
            "contexts": [{"name": "node", "context": {"cluster": cluster.name, "user": "node"}}],
            "current-context": "node",
        }
    )


def kubelet_config(paths: NodePaths, cluster: ClusterAccess, node_ip: str) -> dict[str, Any]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": f"/{nodenet.CGROUP_ROOT}",
        # The machine has cgroup v1 and no systemd; swap may be on.
        "failCgroupV1": False,
        "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{paths.containerd_socket}",
        "address": node_ip,
        "port": free_port(),
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": free_port(),
        "readOnlyPort": 0,
        # Lowering its own OOM score needs CAP_SYS_RESOURCE, which the sandbox lacks.
        "oomScoreAdj": 0,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(cluster.ca_file)},
        },
        "authorization": {"mode": "Webhook"},
        "clusterDomain": "cluster.local",
        "clusterDNS": [nodenet.GATEWAY],
        "resolvConf": str(paths.root / "kubelet" / "resolv.conf"),
        "podLogsDir": str(paths.root / "kubelet" / "pod-logs"),
        "registerWithTaints": [
            {"key": "gpuval.dev/real-node", "value": "true", "effect": "NoSchedule"}
        ],
        # The images cannot be pulled again: never collect them, and evict only when nearly full.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "50Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "nodeStatusUpdateFrequency": "2s",
        "maxPods": 30,
    }


def kubelet_argv(paths: NodePaths, tools: NodeTools, node: str, node_ip: str) -> list[str]:
    labels = {
        "gpuval.dev/real-node": "true",
        "nvidia.com/gpu.present": "true",
    }
    return [
        str(tools.kubelet),
        "--config",
        str(paths.kubelet_config),
        "--kubeconfig",
        str(paths.root / "kubelet" / "kubeconfig"),
        "--root-dir",
        str(paths.kubelet_root),
        "--cert-dir",
        str(paths.pki / "kubelet-serving"),
        "--hostname-override",
        node,
        "--node-ip",
        node_ip,
        "--node-labels",
        ",".join(f"{k}={v}" for k, v in labels.items()),
        "--v=2",
    ]


def proxy_config(paths: NodePaths, node: str, kubeconfig_path: Path) -> dict[str, Any]:
    del paths
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": "iptables",
        "clusterCIDR": nodenet.POD_CIDR,
        "hostnameOverride": node,
        "clientConnection": {"kubeconfig": str(kubeconfig_path)},
        "healthzBindAddress": f"127.0.0.1:{free_port()}",
        "metricsBindAddress": f"127.0.0.1:{free_port()}",
        "oomScoreAdj": 0,
        # Zero: leave the machine's conntrack settings alone.
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "0s",
        },
        # Not true: that would set route_localnet on every interface of the machine.
        "iptables": {"localhostNodePorts": False, "syncPeriod": "5s", "minSyncPeriod": "0s"},
    }


def clusterdns_argv(paths: NodePaths, cluster: ClusterAccess) -> list[str]:
    pki = cluster.ca_file.parent
    del paths
    return [
        sys.executable,
        "-m",
        "gpuval_devtools.clusterdns",
        "--listen",
        nodenet.GATEWAY,
        "--server",
        cluster.server,
        "--ca",
        str(cluster.ca_file),
        "--cert",
        str(pki / "admin.crt"),
        "--key",
        str(pki / "admin.key"),
    ]
