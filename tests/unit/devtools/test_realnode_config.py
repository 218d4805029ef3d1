"""The real node's configuration and its cluster DNS, without starting anything: what each file
must say for the node to work on this machine (design.md, "A real node in the tests")."""

from __future__ import annotations

import json
import socket
import struct
import tomllib
from pathlib import Path

import yaml

from gpuval_devtools import clusterdns, kwoknodes, nodeconfig, nodenet
from gpuval_devtools.nodetools import NodeTools


def _query(name: str, qtype: int = clusterdns.TYPE_A) -> bytes:
    labels = b"".join(bytes([len(p)]) + p.encode() for p in name.split("."))
    return (
        struct.pack("!HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0)
        + labels
        + b"\0"
        + struct.pack("!HH", qtype, clusterdns.CLASS_IN)
    )


def _services(namespace: str, service: str) -> str | None:
    return {("gv", "gpuval-metrics"): "10.0.0.195"}.get((namespace, service))


def test_cluster_dns_answers_a_service_name_with_its_cluster_ip() -> None:
    reply = clusterdns.answer(_query("gpuval-metrics.gv.svc.cluster.local"), _services)
    ident, flags, questions, answers = struct.unpack("!HHHH", reply[:8])
    assert (ident, questions, answers) == (0x1234, 1, 1)
    assert flags & 0x000F == clusterdns.NOERROR and flags & 0x8000
    assert socket.inet_ntoa(reply[-4:]) == "10.0.0.195"


def test_cluster_dns_says_nxdomain_in_the_cluster_and_refuses_every_other_name() -> None:
    unknown = clusterdns.answer(_query("nope.gv.svc.cluster.local"), _services)
    search = clusterdns.answer(_query("gpuval-metrics.gv.svc.gv.svc.cluster.local"), _services)
    outside = clusterdns.answer(_query("example.com"), _services)
    assert struct.unpack("!H", unknown[2:4])[0] & 0x000F == clusterdns.NXDOMAIN
    assert struct.unpack("!H", search[2:4])[0] & 0x000F == clusterdns.NXDOMAIN
    assert struct.unpack("!H", outside[2:4])[0] & 0x000F == clusterdns.REFUSED
    # A known name asked for another type: no error, no record (so resolvers stop there).
    aaaa = clusterdns.answer(_query("gpuval-metrics.gv.svc.cluster.local", 28), _services)
    assert struct.unpack("!HHHH", aaaa[:8])[1] & 0x000F == clusterdns.NOERROR
    assert struct.unpack("!HHHH", aaaa[:8])[3] == 0


def _tools(tmp_path: Path) -> NodeTools:
    return NodeTools(
        containerd=tmp_path / "containerd",
        ctr=tmp_path / "ctr",
        runc=tmp_path / "runc",
        cni_bin=tmp_path / "cni",
        kubelet=tmp_path / "kubelet",
        kube_proxy=tmp_path / "kube-proxy",
    )


def test_containerd_restricts_oom_scores_uses_the_local_pause_image_and_its_own_paths(
    tmp_path: Path,
) -> None:
    paths = nodeconfig.NodePaths(tmp_path / "node")
    config = tomllib.loads(
        nodeconfig.containerd_config(paths, _tools(tmp_path), "localhost/gpuval/pause:0.1.0")
    )
    cri = config["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["restrict_oom_score_adj"] is True
    assert cri["sandbox_image"] == "localhost/gpuval/pause:0.1.0"
    assert cri["netns_mounts_under_state_dir"] is True
    assert cri["containerd"]["runtimes"]["runc"]["options"]["BinaryName"] == str(tmp_path / "runc")
    assert config["grpc"]["address"] == str(paths.containerd_socket)
    for key in ("root", "state"):
        assert config[key].startswith(str(paths.root))
    json.dumps(nodeconfig.cni_conflist(paths))  # CNI reads JSON only
    plugins = [p["type"] for p in nodeconfig.cni_conflist(paths)["plugins"]]
    assert plugins == ["bridge", "portmap", "loopback"]
    assert nodeconfig.cni_conflist(paths)["plugins"][0]["ipMasq"] is False


def test_kubelet_runs_on_cgroup_v1_with_swap_and_never_loopback_or_the_machines_resolver(
    tmp_path: Path,
) -> None:
    paths = nodeconfig.NodePaths(tmp_path / "node")

    class FakeCluster:
        ca_file = tmp_path / "pki" / "ca.crt"

    config = nodeconfig.kubelet_config(paths, FakeCluster(), "192.0.2.2")  # type: ignore[arg-type]
    assert config["cgroupDriver"] == "cgroupfs"
    assert config["failCgroupV1"] is False and config["failSwapOn"] is False
    assert config["address"] == "192.0.2.2"
    assert config["clusterDNS"] == [nodenet.GATEWAY]
    assert Path(config["resolvConf"]).is_relative_to(paths.root)
    assert config["registerWithTaints"][0]["key"] == nodeconfig.TAINT_KEY
    argv = nodeconfig.kubelet_argv(paths, _tools(tmp_path), "n1", "192.0.2.2")
    assert argv[argv.index("--node-ip") + 1] == "192.0.2.2"
    proxy = nodeconfig.proxy_config(paths, "n1", tmp_path / "kubeconfig")
    assert proxy["iptables"]["localhostNodePorts"] is False
    assert proxy["clusterCIDR"] == nodenet.POD_CIDR


def test_kwok_leaves_unannotated_nodes_alone_and_the_api_server_serves_pods_of_a_real_node(
    tmp_path: Path,
) -> None:
    config = yaml.safe_load(kwoknodes.kwokctl_config(tmp_path, "c1").read_text())
    assert config["kind"] == "KwokctlConfiguration"
    patches = {
        p["name"]: {a["key"]: a["value"] for a in p["extraArgs"]}
        for p in config["componentsPatches"]
    }
    assert patches["kwok-controller"]["manage-all-nodes"] == "false"
    assert patches["kwok-controller"]["manage-nodes-with-annotation-selector"] == (
        f"{kwoknodes.KWOK_NODE_ANNOTATION}=fake"
    )
    # Pods connect to the kubernetes Service address; the API server reaches kubelets by IP.
    assert config["options"]["kubeApiserverCertSANs"] == [kwoknodes.API_SERVICE_IP]
    assert patches["kube-apiserver"]["kubelet-preferred-address-types"] == "InternalIP"


def test_kwok_controller_options_reach_it_with_kwoks_own_defaults_for_the_rest(
    tmp_path: Path,
) -> None:
    # Without options there is no KwokConfiguration: kwok-controller defaults everything.
    alone = list(yaml.safe_load_all(kwoknodes.kwokctl_config(tmp_path, "c1").read_text()))
    assert [d["kind"] for d in alone] == ["KwokctlConfiguration"]
    documents = list(
        yaml.safe_load_all(
            kwoknodes.kwokctl_config(tmp_path, "c2", {"podPlayStageParallelism": 32}).read_text()
        )
    )
    assert [d["kind"] for d in documents] == ["KwokctlConfiguration", "KwokConfiguration"]
    options = documents[1]["options"]
    assert options["podPlayStageParallelism"] == 32
    # The document reaches kwok-controller undefaulted: a parallelism left out is 0 and
    # stops it, so kwok's own values are written for every one not given.
    assert options["nodeLeaseParallelism"] == 4
    assert options["nodePlayStageParallelism"] == 4
    assert options["podsOnNodeSyncParallelism"] == 1
    assert options["enablePodsOnNodeSyncListPager"] is True
