"""The repair loop at scale (`--remediation FRACTION` of benchmarks/operator_scale.py): that share
of the nodes fails with a reboot-class XID (KernelXidReboot) until it is repaired, the validation
hands failed nodes to the engine in mode Template (NVIDIA NVSentinel's RebootNode, its published
CRD from tests/fixtures/remediation), and a stand-in engine plays NVSentinel's janitor: each
RebootNode it sees is, after `REBOOT_SECONDS`, answered by a new boot ID on its node and its status
marked done, and the node's stand-in agent passes from then on.

Measured against ../shared/targets.md ("repair hand-over"): repair requests (RebootNodes made, one
per failure), the most nodes in repair and out of service at any moment (polled every 0.25 s)
against the breaker (nodeActions.maxNodes, 10 % of the nodes by default), the time from failure to
back in service (median, max) read from each node's record, and the operator's memory and writes
per node over the whole loop.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from gpuval_api import keys
from gpuval_api.labels import label_value
from gpuval_devtools.controlplane import Cluster
from gpuval_operator.kube import Follower, KubeClient, q
from scale_figures import operator_writes, rss_kib

FIXTURE = (
    Path(__file__).resolve().parents[1]
    / "tests"
    / "fixtures"
    / "remediation"
    / "janitor.dgxc.nvidia.com_rebootnodes.yaml"
)
REBOOT_NODES = "/apis/janitor.dgxc.nvidia.com/v1alpha1/rebootnodes"
# The stand-in janitor's reboot: from its RebootNode to the node's new boot ID and the object done.
REBOOT_SECONDS = 5.0
REMEDIATION_SPEC = {
    "mode": "Template",
    "template": {
        "apiVersion": "janitor.dgxc.nvidia.com/v1alpha1",
        "kind": "RebootNode",
        "spec": {"nodeName": "$(NODE_NAME)", "force": False},
    },
}
# A node in repair is out of service: the validation taints failures (maxNodes: its default, 10%).
NODE_ACTIONS = {"label": True, "taint": {"effect": "NoSchedule"}}


def failing(names: list[str], fraction: float) -> set[str]:
    """Every n-th node, `fraction` of them."""
    if fraction <= 0:
        return set()
    step = max(1, round(1 / fraction))
    return set(names[::step])


def failed_status(node: str) -> dict[str, Any]:
    """What the agent writes on a node whose kernel log holds XID 79 (the state check)."""
    message = (
        "GPU 2: XID 79 (ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS) 1 time in the kernel log since "
        f"boot ({node})"
    )
    return {
        "phase": "Completed",
        "verdict": "Failed",
        "reason": "KernelXidReboot",
        "message": message,
        "failures": [{"check": "state", "gpu": 2, "reason": "KernelXidReboot", "message": message}],
    }


class StandInJanitor:
    """Plays NVSentinel's janitor: reboots the node of each RebootNode and marks it done; the
    nodes it rebooted pass from then on (`healed`)."""

    def __init__(self, client: KubeClient, broken: set[str]) -> None:
        self.client = client
        self.broken = broken
        self.healed: set[str] = set()
        self.seen: dict[str, str] = {}  # uid -> node
        self.live: set[str] = set()
        self.most_live = 0
        self.tasks: set[asyncio.Task[None]] = set()
        self.boots = 0
        self._listing: set[str] = set()

    def fails(self, node: str) -> bool:
        return node in self.broken and node not in self.healed

    def on_object(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        uid = str(meta.get("uid"))
        if kind == "DELETED":
            self.live.discard(uid)
            return
        self.live.add(uid)
        self.most_live = max(self.most_live, len(self.live))
        if uid in self.seen:
            return
        node = str((obj.get("spec") or {}).get("nodeName"))
        self.seen[uid] = node
        task = asyncio.ensure_future(self.reboot(str(meta.get("name")), node))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def on_page(self, items: list[dict[str, Any]], first: bool, last: bool) -> None:
        """A (re)list: objects deleted while the watch was down are gone from `live`."""
        if first:
            self._listing = set()
        for obj in items:
            self._listing.add(str((obj.get("metadata") or {}).get("uid")))
            self.on_object("ADDED", obj)
        if last:
            self.live &= self._listing

    async def reboot(self, name: str, node: str) -> None:
        await asyncio.sleep(REBOOT_SECONDS)
        self.healed.add(node)
        self.boots += 1
        await self.client.request(
            "PATCH",
            f"/api/v1/nodes/{q(node)}/status",
            body={"status": {"nodeInfo": {"bootID": f"boot-{self.boots}"}}},
            content_type="application/merge-patch+json",
        )
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        done = {
            "type": "NodeReady",
            "status": "True",
            "reason": "NodeReady",
            "message": "rebooted (stand-in janitor)",
            "lastTransitionTime": stamp,
        }
        await self.client.request(
            "PATCH",
            f"{REBOOT_NODES}/{q(name)}/status",
            body={"status": {"completionTime": stamp, "conditions": [done]}},
            content_type="application/merge-patch+json",
        )


def install(cluster: Cluster) -> None:
    cluster.kubectl("apply", "--server-side", "-f", str(FIXTURE))
    cluster.kubectl("wait", "--for=condition=Established", "-f", str(FIXTURE), "--timeout=60s")


def follow(client: KubeClient, janitor: StandInJanitor) -> Follower:
    return Follower(
        client,
        REBOOT_NODES,
        f"{keys.LABEL_VALIDATION}={label_value('scale')}",
        janitor.on_page,
        janitor.on_object,
    )


async def _nodes_out(client: KubeClient) -> tuple[int, int]:
    """Nodes out of service (gpuval's label) and nodes asked for a repair (condition)."""
    page = await client.get("/api/v1/nodes", labelSelector=keys.NODE_LABEL_OUT_OF_SERVICE)
    items = page.get("items") or []
    asked = sum(
        1
        for n in items
        for c in (n.get("status") or {}).get("conditions") or []
        if c.get("type") == keys.NODE_CONDITION_REPAIR_REQUESTED and c.get("status") == "True"
    )
    return len(items), asked


async def _records(client: KubeClient, names: set[str]) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    key = f"verdict.gpuval.dev/{label_value('scale')}"
    async for items, _, _ in client.pages("/api/v1/nodes", "gpuval.dev/scale=yes"):
        for node in items:
            name = node["metadata"]["name"]
            if name in names:
                entry = json.loads((node["metadata"].get("annotations") or {}).get(key, "{}"))
                found[name] = entry.get("repair") or {}
    return found


async def measure_repairs(
    client: KubeClient,
    janitor: StandInJanitor,
    *,
    port: int,
    op_pid: int,
    nodes: int,
    limit: int,
    writes_before: int,
    give_up_after: float = 1800,
) -> dict[str, Any]:
    """Until every failing node is back in service after its repair: the figures."""
    started = time.monotonic()
    peak, most_out, most_asked, most_objects = 0, 0, 0, 0
    records: dict[str, dict[str, Any]] = {}
    while time.monotonic() - started < give_up_after:
        await asyncio.sleep(0.25)
        peak = max(peak, rss_kib(op_pid))
        out, asked = await _nodes_out(client)
        most_out, most_asked = max(most_out, out), max(most_asked, asked)
        listed = (await client.get(REBOOT_NODES)).get("items") or []
        most_objects = max(most_objects, len(listed))
        if int(time.monotonic() - started) % 5 == 0:
            records = await _records(client, janitor.broken)
            back = sum(1 for r in records.values() if r.get("state") == "Repaired")
            broken = len(janitor.broken)
            print(
                f"\r{time.monotonic() - started:7.1f}s  repairs asked {len(janitor.seen):5d}  "
                f"in repair {asked:4d}  out of service {out:4d}  back {back:5d}/{broken}",
                end="",
                file=sys.stderr,
                flush=True,
            )
            if back == len(janitor.broken):
                break
    print(file=sys.stderr)
    records = await _records(client, janitor.broken)
    seconds = [
        r["back"] - r["failed"] for r in records.values() if r.get("back") and r.get("failed")
    ]
    per_node: dict[str, int] = {}
    for node in janitor.seen.values():
        per_node[node] = per_node.get(node, 0) + 1
    writes = operator_writes(port) - writes_before
    return {
        "repairFailingNodes": len(janitor.broken),
        "repairBreakerLimit": limit,
        "repairRequests": len(janitor.seen),
        "repairRequestsPerFailingNodeMax": max(per_node.values(), default=0),
        "repairMostInRepairAtOnce": most_asked,
        "repairMostOutOfServiceAtOnce": most_out,
        # Polled (a list every 0.25 s), and as the janitor's watch saw them.
        "repairMostObjectsAtOnce": most_objects,
        "repairMostObjectsAtOnceWatched": janitor.most_live,
        "repairBackInService": len(seconds),
        "repairBackInServiceSecondsMedian": round(statistics.median(seconds), 1)
        if seconds
        else None,
        "repairBackInServiceSecondsMax": max(seconds) if seconds else None,
        "repairLoopSeconds": round(time.monotonic() - started, 1),
        "operatorPeakRssDuringRepairsMiB": round(peak / 1024, 1),
        "operatorWritesPerNodeWithRepairs": round(writes / nodes, 2),
    }
