"""The repair loop's tests on the real control plane: the engines' CRDs (published, vendored under
tests/fixtures/remediation), the engine's part played by the test (a node rebooted, a remediation
object marked done), and watches that see every state the API server served: the remediation
objects ever made, and the most nodes in repair at once; the engine's CRD under a group of the
test's own (installed when the test says), and the API server's own request counts."""

from __future__ import annotations

import importlib
import json
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from gpuval_api import keys
from gpuval_devtools.controlplane import Cluster

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "remediation"
REBOOT_NODE = {"apiVersion": "janitor.dgxc.nvidia.com/v1alpha1", "kind": "RebootNode"}


def install_engine_crds(cluster: Cluster) -> None:
    """The engines' published CRDs (NVSentinel's janitor, Medik8s' SNR and NHC), established."""
    for path in sorted(FIXTURES.glob("*.yaml")):
        cluster.kubectl("apply", "--server-side", "-f", str(path))
    for path in sorted(FIXTURES.glob("*.yaml")):
        cluster.kubectl("wait", "--for=condition=Established", "-f", str(path), "--timeout=60s")


def reboot_node_crd(group: str) -> dict[str, Any]:
    """NVSentinel's published RebootNode CRD, served under `group` instead of its own: a kind the
    API server does not serve until the test applies it (the module's cluster keeps the engines'
    own CRDs once a test installed them)."""
    crd: dict[str, Any] = yaml.safe_load(
        (FIXTURES / "janitor.dgxc.nvidia.com_rebootnodes.yaml").read_text()
    )
    crd["metadata"] = {"name": f"{crd['spec']['names']['plural']}.{group}"}
    crd["spec"]["group"] = group
    return crd


def api_requests(cluster: Cluster) -> Counter[str]:
    """The API server's own request counter (apiserver_request_total from its /metrics), by
    "VERB resource", as benchmarks/apiserver_requests.py reads it."""
    benchmarks = str(Path(__file__).resolve().parents[2] / "benchmarks")
    if benchmarks not in sys.path:
        sys.path.insert(0, benchmarks)  # the benchmarks import one another by name
    reader = importlib.import_module("apiserver_requests")
    text = cluster.kubectl("get", "--raw", "/metrics").stdout
    found: Counter[str] = reader.parse(text).requests
    return found


def conditions_of(node: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (node.get("status") or {}).get("conditions") or []}


def entry_of(node: dict[str, Any], validation: str) -> dict[str, Any]:
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    found: dict[str, Any] = json.loads(annotations.get(f"verdict.gpuval.dev/{validation}", "{}"))
    return found


def repair_of(node: dict[str, Any], validation: str) -> dict[str, Any]:
    found: dict[str, Any] = entry_of(node, validation).get("repair") or {}
    return found


def reboot(cluster: Cluster, node: str, boot_id: str) -> None:
    """The engine's reboot, as the API server sees it: the kubelet reports a new boot ID."""
    body = {"status": {"nodeInfo": {"bootID": boot_id}}}
    cluster.kubectl(
        "patch", "node", node, "--subresource=status", "--type=merge", "-p", json.dumps(body)
    )


def mark_rebooted(cluster: Cluster, name: str) -> None:
    """NVSentinel's janitor marks its RebootNode done: a completion time and NodeReady True."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    condition = {
        "type": "NodeReady",
        "status": "True",
        "reason": "NodeReady",
        "message": "node is ready after the reboot",
        "lastTransitionTime": stamp,
    }
    body = {"status": {"startTime": stamp, "completionTime": stamp, "conditions": [condition]}}
    cluster.kubectl(
        "patch",
        "rebootnode",
        name,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps(body),
    )


def in_repair(node: dict[str, Any]) -> bool:
    """The node's GpuRepairRequested is True: an engine acts on it now."""
    found = conditions_of(node).get(keys.NODE_CONDITION_REPAIR_REQUESTED) or {}
    return found.get("status") == "True"


class ObjectsSeen:
    """Every object a watch saw (uid -> name) and how many existed at most at once."""

    def __init__(self) -> None:
        self.uids: dict[str, str] = {}
        self.live: set[str] = set()
        self.most = 0
        self.last: dict[str, dict[str, Any]] = {}
        # uid -> the resourceVersion of its deletion: with one etcd, a revision that orders it
        # against other objects' writes (what the tests compare; clients must not).
        self.deleted: dict[str, int] = {}
        self._lock = threading.Lock()

    def apply(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        uid = str(meta.get("uid", ""))
        if kind not in ("ADDED", "MODIFIED", "DELETED") or not uid:
            return  # a bookmark, or the watch's own error (a Status)
        with self._lock:
            self.uids.setdefault(uid, str(meta.get("name", "")))
            if kind == "DELETED":
                self.live.discard(uid)
                self.deleted[uid] = int(meta.get("resourceVersion") or 0)
            else:
                self.live.add(uid)
                self.last[uid] = obj
            self.most = max(self.most, len(self.live))


class RepairsSeen:
    """The nodes in repair (GpuRepairRequested True) and out of service (gpuval's label) after
    each node event, and the most of each at once."""

    def __init__(self) -> None:
        self.requested: set[str] = set()
        self.out: set[str] = set()
        self.most_requested = 0
        self.most_out = 0
        self.ever_requested: set[str] = set()
        self._lock = threading.Lock()

    def reset_most(self) -> None:
        """Count the most at once afresh (another validation's nodes from here on)."""
        with self._lock:
            self.most_requested, self.most_out = len(self.requested), len(self.out)

    def apply(self, kind: str, node: dict[str, Any]) -> None:
        meta = node.get("metadata") or {}
        name = str(meta.get("name", ""))
        with self._lock:
            self.requested.discard(name)
            self.out.discard(name)
            if kind != "DELETED":
                if in_repair(node):
                    self.requested.add(name)
                    self.ever_requested.add(name)
                if keys.NODE_LABEL_OUT_OF_SERVICE in (meta.get("labels") or {}):
                    self.out.add(name)
            self.most_requested = max(self.most_requested, len(self.requested))
            self.most_out = max(self.most_out, len(self.out))
