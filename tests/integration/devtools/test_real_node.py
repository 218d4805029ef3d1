"""The test cluster's real node (gpuval_devtools.realnode) is a real Kubernetes node: a kubelet
built from the control plane's Go module runs containers of the images built here, pods reach the
API server, Services and cluster names and nothing else, and stopping it puts the machine back as
it was, also after its owner died without stopping it."""

from __future__ import annotations

import json
import re
import signal
from collections.abc import Callable
from pathlib import Path

from gpuval_devtools import nodenet
from gpuval_devtools.controlplane import Cluster
from gpuval_devtools.realnode import GPU_RESOURCE, TAINT_KEY, RealNode
from tests.support import real
from tests.support.kube import get_json


def test_real_node_is_ready_with_its_gpus_advertised_and_admits_only_pods_that_tolerate_it(
    real_node_cluster: Cluster, real_node: RealNode
) -> None:
    node = get_json(real_node_cluster, "node", real_node.name)
    status = node["status"]
    ready = {c["type"]: c["status"] for c in status["conditions"]}
    assert ready["Ready"] == "True"
    assert status["nodeInfo"]["kubeletVersion"] == "v1.36.3"
    assert status["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://1.6.")
    addresses = {a["type"]: a["address"] for a in status["addresses"]}
    assert addresses["InternalIP"] == nodenet.host_ip()
    assert not addresses["InternalIP"].startswith("127.")
    # No device plugin: the capacity was patched through the status subresource and the
    # kubelet keeps it and copies it to allocatable.
    assert status["capacity"][GPU_RESOURCE] == str(real_node.gpus)
    assert status["allocatable"][GPU_RESOURCE] == str(real_node.gpus)
    assert {t["key"] for t in node["spec"]["taints"]} == {TAINT_KEY}
    # kwok leaves it alone: it manages only the nodes annotated as its own.
    assert "kwok.x-k8s.io/node" not in node["metadata"].get("annotations", {})


def test_a_pod_reaches_the_api_server_services_and_names_of_the_cluster_and_no_other_name(
    real_node_cluster: Cluster, real_node: RealNode, namespace: str
) -> None:
    script = """
import json, os, socket, ssl, urllib.request
sa = "/var/run/secrets/kubernetes.io/serviceaccount"
host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]
context = ssl.create_default_context(cafile=sa + "/ca.crt")
token = open(sa + "/token").read()
request = urllib.request.Request(
    f"https://{host}:{port}/version", headers={"Authorization": "Bearer " + token}
)
out = {"host": host, "version": json.load(urllib.request.urlopen(request, context=context))}
out["dns"] = socket.gethostbyname("kubernetes.default.svc.cluster.local")
try:
    socket.gethostbyname("example.com")
    out["outside"] = "resolved"
except OSError as exc:
    out["outside"] = type(exc).__name__
print(json.dumps(out))
"""
    real_node_cluster.apply([real.script_pod("probe", namespace, real_node.name, script)])
    phase = real.wait_pod_done(real_node_cluster, namespace, "probe")
    log = real.logs(real_node_cluster, namespace, "probe")
    assert phase == "Succeeded", log
    result = json.loads(log.strip().splitlines()[-1])
    assert result["host"] == nodenet.API_SERVICE_IP
    assert result["version"]["gitVersion"] == "v1.36.3"
    assert result["dns"] == nodenet.API_SERVICE_IP
    assert result["outside"] == "gaierror", "names outside the cluster must not resolve"


def _iptables_rules(text: str) -> list[str]:
    """iptables-save output without comments and packet counters."""
    return [
        re.sub(r"\[\d+:\d+\]", "", line)
        for line in text.splitlines()
        if line and not line.startswith("#")
    ]


def _assert_machine_as_before(footprint: nodenet.Footprint) -> None:
    for tool, saved in footprint.iptables.items():
        now = nodenet._sh(f"{tool}-save")
        assert _iptables_rules(now) == _iptables_rules(saved), tool
    for key, value in footprint.sysctls.items():
        assert (Path("/proc/sys") / key).read_text().strip() == value, key
    assert not Path(f"/sys/class/net/{nodenet.BRIDGE}").exists()
    assert nodenet._mountpoints_under(footprint.root) == []
    assert nodenet._pids_with_argument(footprint.containerd_socket) == []
    assert not nodenet._cgroup_dirs()
    assert nodenet.Footprint.load() is None
    for created in footprint.created_dirs:
        assert not Path(created).exists(), f"{created} was made by the node and is still there"


def test_stopping_the_node_puts_the_machine_back_and_a_dead_owners_node_is_swept(
    real_node_cluster: Cluster, real_node: RealNode, unique_name: Callable[[str], str]
) -> None:
    # A pod running, so there are containers, shims, mounts and a network namespace to remove.
    namespace = unique_name("ns")
    real_node_cluster.kubectl("create", "namespace", namespace)
    sleeper = real.script_pod("sleeper", namespace, real_node.name, "import time; time.sleep(600)")
    real_node_cluster.apply([sleeper])
    container = real.running_container(real_node_cluster, namespace, "sleeper")
    orphan = real_node.container_pid(container)

    # Its owner "dies": the machine lock goes, nothing is stopped. The next start sweeps it.
    real_node.exit_stack.close()
    real_node_cluster.real_node = None
    restarted = RealNode.start(real_node_cluster)
    real_node_cluster.real_node = restarted
    assert not Path(f"/proc/{orphan}").exists(), "the dead owner's container still runs"
    # The dead owner's daemons were this process's children: reaped here, killed by the sweep.
    for component, proc in real_node.processes.items():
        assert proc.wait(timeout=30) == -signal.SIGKILL, component

    footprint = restarted.footprint
    assert restarted.stop() == []
    _assert_machine_as_before(footprint)

    real_node_cluster.start_real_node()
    real_node_cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
