"""Helpers for the tests that run gpuval's images as real pods on the test cluster's real node
(gpuval_devtools.realnode): pods placed there, their containers looked at from the host, the
chart installed the way docs/install.md says, validations that select the real node."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from gpuval_devtools.controlplane import Cluster
from gpuval_devtools.imagespecs import AGENT_CPU, OPERATOR
from gpuval_devtools.realnode import TAINT_KEY, RealNode
from tests.support import chart
from tests.support.kube import get_json, wait_for

TOLERATION = {"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}
OPERATOR_IMAGE = OPERATOR.ref()
AGENT_IMAGE = AGENT_CPU.ref()
OPERATOR_REPOSITORY = OPERATOR_IMAGE.rpartition(":")[0]


def placed_on(node: str) -> dict[str, Any]:
    """Pod spec fields that put a pod on the real node ``node``."""
    return {"nodeSelector": {"kubernetes.io/hostname": node}, "tolerations": [TOLERATION]}


def script_pod(name: str, namespace: str, node: str, script: str) -> dict[str, Any]:
    """A pod on the real node that runs ``script`` with the operator image's python3, as the
    operator runs (non-root, read-only root filesystem)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "restartPolicy": "Never",
            **placed_on(node),
            "containers": [
                {
                    "name": "main",
                    "image": OPERATOR_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["python3", "-c", script],
                    "securityContext": {"runAsUser": 65532, "readOnlyRootFilesystem": True},
                }
            ],
        },
    }


def pod_phase(cluster: Cluster, namespace: str, name: str) -> str:
    pod = get_json(cluster, "pod", name, "-n", namespace) or {}
    return str((pod.get("status") or {}).get("phase") or "")


def wait_pod_done(cluster: Cluster, namespace: str, name: str, timeout: float = 120) -> str:
    return str(
        wait_for(
            f"pod {namespace}/{name} to end",
            lambda: (
                p if (p := pod_phase(cluster, namespace, name)) in ("Succeeded", "Failed") else ""
            ),
            timeout=timeout,
        )
    )


def logs(cluster: Cluster, namespace: str, pod: str) -> str:
    """The pod's log, through the API server and the real node's kubelet (`kubectl logs`)."""
    proc = cluster.kubectl("logs", pod, "-n", namespace, check=False)
    assert proc.returncode == 0, f"kubectl logs {namespace}/{pod}: {proc.stderr}"
    return proc.stdout


def running_container(cluster: Cluster, namespace: str, pod: str) -> str:
    """The container ID of the pod's first container, once it is running."""

    def running() -> str:
        obj = get_json(cluster, "pod", pod, "-n", namespace) or {}
        for status in (obj.get("status") or {}).get("containerStatuses") or []:
            if "running" in (status.get("state") or {}):
                return str(status["containerID"])
        return ""

    return str(wait_for(f"a running container in pod {namespace}/{pod}", running, timeout=120))


def process_uid(pid: int) -> int:
    """The effective UID of a host process (/proc/<pid>/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[2])
    raise AssertionError(f"no Uid line in /proc/{pid}/status")


def root_mount_options(pid: int) -> set[str]:
    """The mount options of the root filesystem as the process sees it (its mount namespace)."""
    for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines():
        fields = line.split()
        if fields[4] == "/":
            return set(fields[5].split(","))
    raise AssertionError(f"no root mount in /proc/{pid}/mountinfo")


def projected_token(node: RealNode, pod_uid: str) -> str:
    """The ServiceAccount token the kubelet projected into a pod, read from the node's disk."""
    volumes = node.paths.kubelet_root / "pods" / pod_uid / "volumes" / "kubernetes.io~projected"
    tokens = sorted(volumes.glob("kube-api-access-*/token"))
    assert tokens, f"no projected token under {volumes}"
    return tokens[0].read_text()


def token_claims(token: str) -> dict[str, Any]:
    payload = token.split(".")[1]
    claims: dict[str, Any] = json.loads(
        base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
    )
    return claims


def install_as_documented(
    cluster: Cluster, namespace: str, node: str, release: str = "gpuval"
) -> tuple[chart.Release, float]:
    """docs/install.md's `helm install`, with the images built here and the operator placed on
    the real node; returns the release and the seconds from `helm install` to the operator
    pod's Ready condition."""
    # The operator's namespace enforces `restricted`; the chart makes the agents' privileged one.
    chart.restricted_namespace(cluster, namespace)
    started = time.monotonic()
    chart.helm(
        "install",
        release,
        str(chart.CHART),
        "--namespace",
        namespace,
        "--set",
        f"operator.image.repository={OPERATOR_REPOSITORY}",
        *chart.set_args(
            {
                "operator.image.pullPolicy": "Never",
                "operator.nodeSelector": {"kubernetes.io/hostname": node},
                "operator.tolerations": [TOLERATION],
            }
        ),
        "--wait",
        "--timeout",
        "180s",
        kubeconfig=cluster.kubeconfig,
        timeout=240,
    )
    ready = wait_for("the operator pod to be Ready", lambda: operator_ready_at(cluster, namespace))
    return chart.Release(name=release, namespace=namespace, fullname=release), ready - started


def operator_ready_at(cluster: Cluster, namespace: str) -> float | None:
    """monotonic() at the first poll that sees the operator pod Ready (None before)."""
    pods = get_json(cluster, "pods", "-n", namespace, "-l", "app.kubernetes.io/component=operator")
    for pod in (pods or {}).get("items", []):
        for cond in (pod.get("status") or {}).get("conditions") or []:
            if cond["type"] == "Ready" and cond["status"] == "True":
                return time.monotonic()
    return None


def operator_pods(cluster: Cluster, namespace: str) -> list[dict[str, Any]]:
    """The chart's operator replicas (two by default), those not being deleted."""
    pods = get_json(cluster, "pods", "-n", namespace, "-l", "app.kubernetes.io/component=operator")
    return [p for p in (pods or {}).get("items", []) if not p["metadata"].get("deletionTimestamp")]


def lease_holder(cluster: Cluster, release: chart.Release) -> str | None:
    """The pod holding the operator's leader Lease: its identity is `<pod name>-<6 hex>`."""
    lease = get_json(cluster, "lease", f"{release.fullname}-operator", "-n", release.namespace)
    holder = ((lease or {}).get("spec") or {}).get("holderIdentity")
    return str(holder).rsplit("-", 1)[0] if holder else None


def leader_pod(cluster: Cluster, release: chart.Release) -> dict[str, Any] | None:
    """The operator replica that holds the Lease (None while no live replica does)."""
    holder = lease_holder(cluster, release)
    for pod in operator_pods(cluster, release.namespace):
        if pod["metadata"]["name"] == holder:
            return pod
    return None


def validation_of(
    name: str,
    pool: str,
    *,
    burn_seconds: float = 2,
    time_scale: float = 0.01,
    resources: Mapping[str, Any] | None = None,
    timeout: int = 180,
    retry: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """A GpuValidation of the pool's nodes with the CPU agent image (simulated backend), its
    agent pods allowed onto the real node; a node gpuval could not test is tried once unless
    `retry` says otherwise."""
    agent: dict[str, Any] = {
        "image": AGENT_IMAGE,
        "imagePullPolicy": "Never",
        "env": [
            {"name": "GPUVAL_BACKEND", "value": "simulated"},
            {"name": "GPUVAL_SIMULATE", "value": json.dumps({"timeScale": time_scale})},
        ],
        "tolerations": [TOLERATION],
    }
    if resources is not None:
        agent["resources"] = dict(resources)
    return {
        "apiVersion": "gpuval.dev/v1alpha1",
        "kind": "GpuValidation",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"matchLabels": {chart.POOL_LABEL: pool}},
            "nodeTimeoutSeconds": timeout,
            "checks": {"burn": {"durationSeconds": burn_seconds}},
            "agent": agent,
            "retry": dict(retry or {"attempts": 1}),
        },
    }


def completed(cluster: Cluster, name: str) -> dict[str, Any] | None:
    obj = get_json(cluster, "gpuvalidation", name) or {}
    status = obj.get("status") or {}
    return status if (status.get("run") or {}).get("completedAt") else None


def reports_by_node(cluster: Cluster, validation: str) -> dict[str, dict[str, Any]]:
    listed = get_json(cluster, "gpunodereports", "-l", f"gpuval.dev/validation={validation}")
    return {r["spec"]["node"]: r for r in (listed or {}).get("items", [])}


def agent_pods(cluster: Cluster, namespace: str, validation: str) -> list[dict[str, Any]]:
    listed = get_json(cluster, "pods", "-n", namespace, "-l", f"gpuval.dev/validation={validation}")
    return list((listed or {}).get("items", []))


def pool_label(cluster: Cluster, node: str, pool: str | None) -> None:
    """Puts the node into the test's pool (None: takes it out)."""
    value = f"{chart.POOL_LABEL}={pool}" if pool else f"{chart.POOL_LABEL}-"
    cluster.kubectl("label", "node", node, value, "--overwrite")


def first(items: Sequence[Any], what: str, predicate: Callable[[Any], bool]) -> Any:
    for item in items:
        if predicate(item):
            return item
    raise AssertionError(f"no {what} among {len(items)}")
