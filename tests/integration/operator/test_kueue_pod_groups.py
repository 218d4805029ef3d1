"""Kueue, built from its Go module and running against the real control plane, admits a GPU pod
group whole or not at all: members of a group that does not fit the quota hold no GPU (all gated,
none placed on a node, though the kwok nodes have room), and all start together when the quota
frees. Namespaces that did not opt in are left alone. No gpuval operator runs here: this pins the
set-up the operator's Kueue path is tested on (docs/kueue.md)."""

from __future__ import annotations

import json
from typing import Any

from gpuval_api.kueue import MANAGED, QUEUE_NAME_LABEL, PodGroup
from gpuval_devtools.controlplane import GPU_RESOURCE, Cluster
from gpuval_devtools.kueue import Kueue
from tests.support.kube import get_json
from tests.support.kueue import (
    condition,
    gated,
    gpu_pod,
    pods,
    wait_held_back,
    wait_placed,
)

GPUS_PER_MEMBER = 4


def _submit(cluster: Cluster, namespace: str, group: PodGroup) -> list[str]:
    names = [f"{group.name}-{i}" for i in range(group.total)]
    cluster.apply([gpu_pod(n, namespace, GPUS_PER_MEMBER, group) for n in names])
    return names


def test_a_group_over_the_quota_holds_no_gpu_and_starts_whole_when_the_quota_is_raised(
    cluster: Cluster, kueue: Kueue, kueue_namespace: str
) -> None:
    queue = kueue.queue("gpus", kueue_namespace, gpus=8)
    group = PodGroup(queue=queue.name, name="fabric-a", total=3)
    names = _submit(cluster, kueue_namespace, group)

    pending = wait_held_back(cluster, kueue, kueue_namespace, group.name, names)
    reserved = condition(pending, "QuotaReserved")
    assert reserved is not None
    assert GPU_RESOURCE in reserved["message"], "12 GPUs asked for under a quota of 8"

    queue.set_gpus(12)
    admitted = wait_placed(cluster, kueue_namespace, names)
    # Kueue sends the admitted pods to the flavor's nodes (its nodeLabels).
    assert {p["spec"]["nodeSelector"]["nvidia.com/gpu.present"] for p in admitted} == {"true"}


def test_a_waiting_group_starts_whole_when_the_group_holding_the_quota_finishes(
    cluster: Cluster, kueue: Kueue, kueue_namespace: str
) -> None:
    queue = kueue.queue("gpus", kueue_namespace, gpus=8)
    first = PodGroup(queue=queue.name, name="first", total=2)
    first_names = _submit(cluster, kueue_namespace, first)
    wait_placed(cluster, kueue_namespace, first_names)
    second = PodGroup(queue=queue.name, name="second", total=2)
    second_names = _submit(cluster, kueue_namespace, second)
    wait_held_back(cluster, kueue, kueue_namespace, second.name, second_names)

    # What a kubelet reports when the members' containers exit 0.
    for name in first_names:
        cluster.kubectl(
            "patch",
            "pod",
            name,
            "-n",
            kueue_namespace,
            "--subresource=status",
            "--type=merge",
            "-p",
            '{"status": {"phase": "Succeeded"}}',
        )
    wait_placed(cluster, kueue_namespace, second_names)


def test_pods_of_a_namespace_that_did_not_opt_in_are_left_alone(
    cluster: Cluster, kueue: Kueue, namespace: str, kueue_namespace: str
) -> None:
    """The same queued pod is gated where Kueue manages the namespace and untouched elsewhere,
    as is a plain pod: Kueue's webhook ran for all three."""
    queued = {QUEUE_NAME_LABEL: "gpus"}
    plain = gpu_pod("plain", namespace, 1)
    labelled = gpu_pod("queued", namespace, 1)
    managed = gpu_pod("queued", kueue_namespace, 1)
    labelled["metadata"]["labels"] = queued
    managed["metadata"]["labels"] = queued
    cluster.apply([plain, labelled, managed])

    untouched = wait_placed(cluster, namespace, ["plain", "queued"])
    for pod in untouched:
        assert pod["spec"].get("schedulingGates") is None
        assert MANAGED not in pod["metadata"].get("labels", {})
        assert MANAGED not in pod["metadata"].get("finalizers", [])
    (gated_pod,) = pods(cluster, kueue_namespace, ["queued"])
    assert gated(gated_pod)
    assert gated_pod["metadata"]["labels"][MANAGED] == "true"
    assert MANAGED in gated_pod["metadata"]["finalizers"]


def test_the_api_server_reaches_kueues_conversion_webhook_on_loopback(
    cluster: Cluster, kueue: Kueue, kueue_namespace: str
) -> None:
    """Kueue's CRDs serve v1beta1 and v1beta2 and convert through its webhook: reading a queue
    stored as v1beta2 in v1beta1 is answered by the manager on loopback."""
    queue = kueue.queue("gpus", kueue_namespace, gpus=8)
    old = get_json(cluster, "clusterqueues.v1beta1.kueue.x-k8s.io", queue.cluster_queue)
    assert old is not None, "the v1beta1 read failed: the conversion webhook was not reached"
    assert old["apiVersion"] == "kueue.x-k8s.io/v1beta1"
    (group,) = old["spec"]["resourceGroups"]
    quotas = {r["name"]: r["nominalQuota"] for r in group["flavors"][0]["resources"]}
    assert quotas[GPU_RESOURCE] == "8"


def test_jobs_are_still_created_while_kueue_runs_and_only_a_queued_one_waits_for_it(
    cluster: Cluster, kueue: Kueue, kueue_namespace: str
) -> None:
    """Kueue's Job webhook fails closed: it must answer (docs/kueue.md: with the pod integration
    alone, v0.17.0's panics). A Job without Kueue's queue label runs as it is; a queued one is
    suspended until Kueue admits it."""

    def dry_run(name: str, labels: dict[str, str]) -> dict[str, Any]:
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name, "namespace": kueue_namespace, "labels": labels},
            "spec": {
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "work", "image": "gpuval-test/none"}],
                    }
                }
            },
        }
        created = cluster.kubectl(
            "create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(job)
        )
        result: dict[str, Any] = json.loads(created.stdout)
        return result

    assert dry_run("plain-job", {})["spec"]["suspend"] is False
    assert dry_run("queued-job", {QUEUE_NAME_LABEL: "gpus"})["spec"]["suspend"] is True
