"""Proofs that the local control plane is a real Kubernetes, not a mock: schema validation, RBAC,
scheduling of extended resources and garbage collection are done by the real components."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from gpuval_devtools.controlplane import GPU_RESOURCE, Cluster, GpuNode, running_cluster
from tests.support.kube import get_json, wait_for


def _widget_crd(group: str) -> dict[str, object]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "required": ["size"],
                                    "properties": {"size": {"type": "integer", "minimum": 1}},
                                }
                            },
                        }
                    },
                }
            ],
        },
    }


def test_object_violating_crd_structural_schema_is_rejected_by_the_apiserver(
    cluster: Cluster, namespace: str, unique_name: Callable[[str], str]
) -> None:
    group = f"{unique_name('g')}.test.gpuval.dev"
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(_widget_crd(group)))
    cluster.kubectl("wait", "--for=condition=Established", f"crd/widgets.{group}", "--timeout=60s")

    def widget(size: object) -> str:
        return yaml.safe_dump(
            {
                "apiVersion": f"{group}/v1",
                "kind": "Widget",
                "metadata": {"name": "w", "namespace": namespace},
                "spec": {"size": size},
            }
        )

    bad = cluster.kubectl("apply", "-f", "-", input=widget("large"), check=False)
    assert bad.returncode != 0
    assert 'spec.size: Invalid value: "string": spec.size in body must be of type integer' in (
        bad.stderr
    )
    too_small = cluster.kubectl("apply", "-f", "-", input=widget(0), check=False)
    assert "spec.size in body should be greater than or equal to 1" in too_small.stderr

    cluster.kubectl("apply", "-f", "-", input=widget(3))
    stored = get_json(cluster, "widgets." + group, "w", "-n", namespace)
    assert stored["spec"] == {"size": 3}
    cluster.kubectl("delete", "crd", f"widgets.{group}", "--wait=false")


def test_rbac_denies_a_service_account_what_it_was_not_granted(
    cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    cluster.kubectl("create", "serviceaccount", "reader", "-n", namespace)
    cluster.kubectl(
        "create", "role", "pod-reader", "--verb=get,list", "--resource=pods", "-n", namespace
    )
    cluster.kubectl(
        "create",
        "rolebinding",
        "reader-pods",
        "--role=pod-reader",
        f"--serviceaccount={namespace}:reader",
        "-n",
        namespace,
    )
    token = cluster.kubectl("create", "token", "reader", "-n", namespace).stdout.strip()
    reader = cluster.token_kubeconfig(token, tmp_path / "reader.kubeconfig")

    allowed = cluster.kubectl_as(reader, "get", "pods", "-n", namespace)
    assert allowed.returncode == 0, allowed.stderr

    denied = cluster.kubectl_as(reader, "get", "secrets", "-n", namespace)
    assert denied.returncode != 0
    assert (
        f'secrets is forbidden: User "system:serviceaccount:{namespace}:reader" cannot list '
        f'resource "secrets"' in denied.stderr
    )
    write = cluster.kubectl_as(reader, "delete", "pod", "anything", "-n", namespace)
    assert 'cannot delete resource "pods"' in write.stderr


def _gpu_pod(name: str, namespace: str, node: str, taint_key: str) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": node},
                "tolerations": [{"key": taint_key, "operator": "Exists", "effect": "NoSchedule"}],
                "containers": [
                    {
                        "name": "burn",
                        "image": "gpuval/agent:test",
                        "resources": {"limits": {GPU_RESOURCE: "8"}},
                    }
                ],
            },
        }
    )


def test_scheduler_binds_a_pod_to_free_gpus_and_leaves_a_second_one_pending(
    cluster: Cluster, namespace: str, unique_name: Callable[[str], str]
) -> None:
    node = unique_name("gpu-sched")
    taint_key = f"test.gpuval.dev/{node}"
    cluster.add_nodes(
        [GpuNode(name=node, gpus=8, taints=[{"key": taint_key, "effect": "NoSchedule"}])]
    )
    cluster.kubectl("apply", "-f", "-", input=_gpu_pod("first", namespace, node, taint_key))
    first = wait_for(
        "the first pod to be bound",
        lambda: (
            (get_json(cluster, "pod", "first", "-n", namespace) or {})
            .get("spec", {})
            .get("nodeName")
        ),
    )
    assert first == node

    cluster.kubectl("apply", "-f", "-", input=_gpu_pod("second", namespace, node, taint_key))

    def unschedulable() -> str | None:
        pod = get_json(cluster, "pod", "second", "-n", namespace) or {}
        for cond in pod.get("status", {}).get("conditions", []):
            if cond["type"] == "PodScheduled" and cond["status"] == "False":
                return str(cond.get("message", ""))
        return None

    message = wait_for("the second pod to be marked unschedulable", unschedulable)
    assert f"Insufficient {GPU_RESOURCE}" in message
    second = get_json(cluster, "pod", "second", "-n", namespace)
    assert second["status"]["phase"] == "Pending"
    assert "nodeName" not in second["spec"]

    cluster.kubectl("delete", "pod", "first", "-n", namespace, "--grace-period=0", "--force")
    bound = wait_for(
        "the second pod to be bound once the GPUs are free",
        lambda: (
            (get_json(cluster, "pod", "second", "-n", namespace) or {})
            .get("spec", {})
            .get("nodeName")
        ),
    )
    assert bound == node


def test_deleting_an_owner_garbage_collects_its_dependent(cluster: Cluster, namespace: str) -> None:
    cluster.kubectl("create", "configmap", "owner", "-n", namespace)
    owner = get_json(cluster, "configmap", "owner", "-n", namespace)
    dependent = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "dependent",
            "namespace": namespace,
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "name": "owner",
                    "uid": owner["metadata"]["uid"],
                }
            ],
        },
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(dependent))
    assert get_json(cluster, "configmap", "dependent", "-n", namespace) is not None

    cluster.kubectl("delete", "configmap", "owner", "-n", namespace)
    wait_for(
        "the dependent to be garbage-collected",
        lambda: get_json(cluster, "configmap", "dependent", "-n", namespace) is None,
    )


@pytest.mark.parametrize("component", ["kube-controller-manager", "kube-scheduler"])
def test_control_plane_components_are_the_version_built_from_go_modules(
    cluster: Cluster, component: str
) -> None:
    binary = getattr(cluster.binaries, component.replace("-", "_"))
    out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, check=True)
    server = json.loads(cluster.kubectl("get", "--raw", "/version").stdout)
    assert out.stdout.strip() == f"Kubernetes {server['gitVersion']}"


# Longer than kube-scheduler's and kube-controller-manager's Lease (15 s) and renew deadline (10 s):
# with leader election they would have given up the lead and exited.
API_SERVER_OUTAGE_SECONDS = 40


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A dead child not yet reaped by kwokctl (it is not our child) still has a /proc entry.
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    return state != "Z"


def test_scheduler_and_controller_manager_outlive_an_api_server_stopped_past_their_lease(
    unique_name: Callable[[str], str],
) -> None:
    name = unique_name("outage")
    node = f"{name}-gpu"
    with running_cluster(name, [GpuNode(name=node, gpus=8)]) as outage:
        components = {
            c: outage.component_pid(c) for c in ("kube-scheduler", "kube-controller-manager")
        }
        apiserver = outage.component_pid("kube-apiserver")
        os.kill(apiserver, signal.SIGSTOP)
        try:
            time.sleep(API_SERVER_OUTAGE_SECONDS)
        finally:
            os.kill(apiserver, signal.SIGCONT)
        wait_for(
            "the API server to answer again",
            lambda: outage.kubectl("get", "--raw", "/readyz", check=False).returncode == 0,
        )

        logs = outage.cluster_dir / "logs"
        for component, pid in components.items():
            tail = (logs / f"{component}.log").read_text(errors="replace")[-2000:]
            assert _alive(pid), f"{component} exited during the outage:\n{tail}"
        # kube-controller-manager's ReplicaSet controller makes the pod, kube-scheduler binds it.
        outage.apply([_deployment("after-outage", node)])
        bound = wait_for(
            "the Deployment's pod to be scheduled after the outage",
            lambda: [
                p["spec"].get("nodeName")
                for p in get_json(outage, "pods", "-n", "default", "-l", "app=after-outage")[
                    "items"
                ]
                if p["spec"].get("nodeName")
            ],
            timeout=90,
        )
        assert bound == [node]


def _deployment(name: str, node: str) -> dict[str, object]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": node},
                    "containers": [{"name": "c", "image": "gpuval/agent:test"}],
                },
            },
        },
    }
