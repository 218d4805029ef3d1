"""Kueue's effect on pods and Workloads, read from the real control plane in tests: the helpers
the Kueue tests use, and the operator's Kueue tests can (docs/kueue.md, "The test API")."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpuval_api.kueue import ADMISSION_GATE, PodGroup
from gpuval_devtools.controlplane import GPU_RESOURCE, Cluster
from gpuval_devtools.kueue import Kueue
from tests.support.kube import get_json, wait_for


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


def wait_held_back(
    cluster: Cluster,
    kueue: Kueue,
    namespace: str,
    group: str,
    names: Sequence[str],
    *,
    timeout: float = 60,
) -> Mapping[str, Any]:
    """Waits until Kueue has made the pod group ``group``'s Workload, tried it against the quota
    and left it pending (``QuotaReserved`` False, reason ``Pending``); then asserts that none of
    its members ``names`` holds a GPU: every one gated, none placed on a node. Returns the
    Workload."""

    def pending() -> Mapping[str, Any] | None:
        for workload in kueue.workloads(namespace):
            reserved = condition(workload, "QuotaReserved")
            if (
                workload["metadata"]["name"] == group
                and reserved
                and (reserved["status"], reserved["reason"]) == ("False", "Pending")
            ):
                return workload
        return None

    workload: Mapping[str, Any] = wait_for(
        f"Kueue to leave the pod group {group} pending for quota", pending, timeout=timeout
    )
    found = pods(cluster, namespace, names)
    assert [p["metadata"]["name"] for p in found] == list(names)
    assert [n for n, p in zip(names, found, strict=True) if not gated(p)] == [], "ungated"
    assert [n for n, p in zip(names, found, strict=True) if placed(p)] == [], "on a node"
    return workload


def wait_placed(
    cluster: Cluster, namespace: str, names: Sequence[str], *, timeout: float = 60
) -> list[dict[str, Any]]:
    """Waits until every pod of ``names`` is ungated and placed on a node (for a Kueue pod group:
    admitted and scheduled); returns them."""

    def admitted() -> list[dict[str, Any]] | None:
        found = pods(cluster, namespace, names)
        ok = len(found) == len(names) and all(placed(p) and not gated(p) for p in found)
        return found if ok else None

    found: list[dict[str, Any]] = wait_for(
        f"the pods {', '.join(names)} to be ungated and placed", admitted, timeout=timeout
    )
    return found
