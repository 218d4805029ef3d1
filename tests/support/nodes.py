"""What the operator tests set up and read on a node, shared by the gating, trust, NotRun and run
tests: a workload that holds a node's GPUs, the node as the API server has it, its taints, and
whether gpuval's node actions left it alone."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from gpuval_api import keys
from gpuval_devtools.controlplane import GPU_RESOURCE, Cluster
from tests.support.kube import get_json

# A validation's checks cut to a one-second burn: enough for a verdict, quick on 2 cores.
QUICK_CHECKS: dict[str, Any] = {"burn": {"durationSeconds": 1}}
# The node actions whose absence `untouched` proves: the unhealthy taint and a cordon.
TAINT_AND_CORDON: dict[str, Any] = {"taint": {"effect": "NoSchedule"}, "cordon": True}


@contextlib.contextmanager
def training_job(
    cluster: Cluster, node: str, name: str, gpus: int = 8
) -> Iterator[Callable[[], None]]:
    """A workload pod holding `gpus` GPUs of `node` (all 8 by default) in the default namespace;
    yields a function that ends it early, and deletes it on the way out."""
    cluster.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {
                    "nodeName": node,
                    "containers": [
                        {
                            "name": "train",
                            "image": "example.com/train:1",
                            "resources": {"limits": {GPU_RESOURCE: str(gpus)}},
                        }
                    ],
                },
            }
        ]
    )

    def end() -> None:
        cluster.kubectl("delete", "pod", name, "-n", "default", "--grace-period=0", check=False)

    try:
        yield end
    finally:
        cluster.kubectl("delete", "pod", name, "-n", "default", "--wait=false", check=False)


def node_of(cluster: Cluster, node: str) -> dict[str, Any]:
    """The Node object as the API server has it now."""
    found: dict[str, Any] = get_json(cluster, "node", node)
    return found


def taint_keys(node: dict[str, Any]) -> set[str]:
    return {t["key"] for t in node["spec"].get("taints") or []}


def untouched(node: dict[str, Any]) -> bool:
    """True when the node is neither cordoned nor tainted unhealthy by gpuval."""
    return not node["spec"].get("unschedulable") and keys.TAINT_KEY not in taint_keys(node)
