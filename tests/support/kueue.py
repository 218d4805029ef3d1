"""Reading Kueue's effect on pods and Workloads in tests on the real control plane."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpuval_api.kueue import ADMISSION_GATE, PodGroup
from gpuval_devtools.controlplane import GPU_RESOURCE, Cluster
from tests.support.kube import get_json


def gpu_pod(name: str, namespace: str, gpus: int, group: PodGroup | None = None) -> dict[str, Any]:
    """A pod asking for ``gpus`` GPUs, a member of ``group`` when one is given."""
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if group is not None:
        metadata |= {"labels": group.labels(), "annotations": group.annotations()}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "work",
                    "image": "gpuval-test/none",
                    "resources": {"limits": {GPU_RESOURCE: str(gpus)}},
                }
            ],
        },
    }


def pods(cluster: Cluster, namespace: str, names: Sequence[str]) -> list[dict[str, Any]]:
    """The named pods as they are now (a missing one is left out)."""
    found = get_json(cluster, "pods", "-n", namespace)
    by_name = {p["metadata"]["name"]: p for p in (found or {"items": []})["items"]}
    return [by_name[n] for n in names if n in by_name]


def gated(pod: Mapping[str, Any]) -> bool:
    """The pod waits for Kueue's admission (its scheduling gate is on)."""
    return any(g["name"] == ADMISSION_GATE for g in pod["spec"].get("schedulingGates", []))


def placed(pod: Mapping[str, Any]) -> bool:
    """The scheduler bound the pod to a node: from here on it holds that node's GPUs."""
    return bool(pod["spec"].get("nodeName"))


def condition(workload: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for cond in workload.get("status", {}).get("conditions", []):
        if cond["type"] == kind:
            found: Mapping[str, Any] = cond
            return found
    return None
