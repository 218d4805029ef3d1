"""Pure planning: which nodes a run validates, how many at a time, and the objects it creates for
each.

Nothing here calls the API; the reconciler feeds it listed nodes and sends what it builds.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuval_api import AgentEnv, keys, label_value
from gpuval_api.checks import CheckName
from gpuval_api.crd import (
    API_VERSION,
    GPU_RESOURCE,
    REPORT_KIND,
    GpuValidationSpec,
)
from gpuval_api.gfd import GpuSharing, device_resources
from gpuval_api.kubernetes import READY
from gpuval_api.kueue import QUEUE_NAME_LABEL
from gpuval_operator import names
from gpuval_operator.config import OperatorConfig
from gpuval_operator.devices import DeviceRequest


@dataclass(frozen=True, slots=True)
class Candidate:
    """A node chosen for a run, with the GPUs its agent pod asks for (`resources`: the device
    plugin's, by name, where the node advertises MIG devices; empty: `gpus` nvidia.com/gpu)."""

    name: str
    gpus: int
    resources: tuple[tuple[str, int], ...] = ()


def concurrency_limit(max_concurrent: int | str, total: int) -> int:
    """Nodes validated at a time: a count, or a percentage of `total` rounded up; at least 1."""
    if isinstance(max_concurrent, str):
        percent = int(max_concurrent.rstrip("%"))
        limit = math.ceil(total * percent / 100)
    else:
        limit = max_concurrent
    return max(1, limit)


def node_resources(node: Mapping[str, Any]) -> dict[str, int]:
    """The device plugin's GPU resources the node offers (nvidia.com/gpu, and nvidia.com/mig-*
    under the mixed MIG strategy), from its allocatable, else its capacity."""
    status = node.get("status") or {}
    return device_resources(status.get("allocatable") or status.get("capacity") or {})


def node_gpus(node: Mapping[str, Any]) -> int:
    """The devices the node's device plugin offers: its GPUs, or its MIG devices."""
    return sum(node_resources(node).values())


def mig_resources(resources: Mapping[str, int]) -> tuple[tuple[str, int], ...]:
    """What a Candidate keeps of a node's resources: all of them where any is a MIG profile's
    (mixed strategy), none otherwise (`gpus` says it: plain nvidia.com/gpu)."""
    if set(resources) <= {GPU_RESOURCE}:
        return ()
    return tuple(sorted(resources.items()))


def node_ready(node: Mapping[str, Any]) -> bool:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == READY:
            return bool(cond.get("status") == "True")
    return False


def cordoned_by_us(node: Mapping[str, Any]) -> bool:
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    return keys.NODE_ANNOTATION_CORDONED_BY in annotations


def select_nodes(
    nodes: Iterable[Mapping[str, Any]], published: Mapping[str, int] | None = None
) -> list[Candidate]:
    """Ready nodes with GPUs that take work, in name order; with `published` (DRA), a node's GPUs
    are the devices its ResourceSlices publish, not what its device plugin advertises.

    A node cordoned by someone else is left alone (it is in maintenance); one gpuval cordoned itself
    is validated again, or it could never pass and be uncordoned.
    """
    chosen = []
    for node in nodes:
        resources = node_resources(node)
        gpus = sum(resources.values())
        if published is not None:
            resources, gpus = {}, published.get(node["metadata"]["name"], 0)
        if gpus <= 0 or not node_ready(node):
            continue
        if (node.get("spec") or {}).get("unschedulable") and not cordoned_by_us(node):
            continue
        chosen.append(Candidate(node["metadata"]["name"], gpus, mig_resources(resources)))
    return sorted(chosen, key=lambda c: c.name)


def owner_reference(validation: str, uid: str) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "GpuValidation",
        "name": validation,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": False,
    }


def child_labels(validation: str, run: str, node: str) -> dict[str, str]:
    return {
        keys.LABEL_NAME: "gpuval",
        keys.LABEL_MANAGED_BY: "gpuval-operator",
        keys.LABEL_VALIDATION: label_value(validation),
        keys.LABEL_RUN: run,
        keys.LABEL_NODE: label_value(node),
    }


def build_report(
    validation: str,
    uid: str,
    run: str,
    candidate: Candidate,
    history: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The node's report of the run; `history` is the node's key figures in its last runs
    (spec.baseline), carried from report to report."""
    spec: dict[str, Any] = {"validation": validation, "run": run, "node": candidate.name}
    if history:
        spec["history"] = list(history)
    return {
        "apiVersion": API_VERSION,
        "kind": REPORT_KIND,
        "metadata": {
            "name": names.report_name(validation, run, candidate.name),
            "labels": child_labels(validation, run, candidate.name),
            "annotations": {keys.ANNOTATION_GPUS: str(candidate.gpus)},
            "ownerReferences": [owner_reference(validation, uid)],
        },
        "spec": spec,
    }


def _tolerations(spec: GpuValidationSpec) -> list[dict[str, Any]]:
    startup = spec.gating.startup_taint if spec.gating else None
    gated = [{"key": startup.key, "operator": "Exists"}] if startup else []
    always = [
        {"key": GPU_RESOURCE, "operator": "Exists"},
        {"key": keys.TAINT_KEY, "operator": "Exists"},
        # A node gpuval cordoned is validated again; without this its agent pod could never
        # schedule.
        {"key": keys.UNSCHEDULABLE_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"},
    ]
    extra = [t.model_dump(by_alias=True, exclude_none=True) for t in spec.agent.tolerations]
    # A gated node registers with the startup taint: the agent must still get on it to lift it.
    return always + gated + extra


def common_env(*, report: str, deadline: float | None) -> list[dict[str, Any]]:
    """What every agent pod (local checks or fabric) is told: the report to write, its node,
    until when."""
    env: list[dict[str, Any]] = [
        {"name": AgentEnv.REPORT_NAME, "value": report},
        {"name": AgentEnv.NODE_NAME, "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
    ]
    if deadline is not None:
        env.append({"name": AgentEnv.DEADLINE, "value": str(int(deadline))})
    return env


def spec_env(spec: GpuValidationSpec) -> list[dict[str, Any]]:
    """The spec's extra variables, last in every agent pod."""
    return [{"name": e.name, "value": e.value} for e in spec.agent.env]


def agent_env(
    *,
    report: str,
    gpus: int,
    spec: GpuValidationSpec,
    deadline: float | None,
    sharing: GpuSharing | None = None,
    baseline: Sequence[Mapping[str, str]] = (),
    uuids: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """The agent container's environment: what to write where, what to check, until when; on a
    node with shared GPUs, the physical count the agent should see and the replicas of each; the
    UUIDs of the devices the node published (DRA) for the agent to test; the GpuBaselines to
    judge against (`baseline`: gpuval_operator.baseline.judge.agent_env)."""
    # Resolved: every section says `enabled`, the profile's word written out (an agent reads
    # what it was told to run without knowing the profiles).
    told = spec.checks.resolved().model_dump(mode="json", by_alias=True)
    checks = json.dumps(told, separators=(",", ":"))
    env = common_env(report=report, deadline=deadline)
    env += [
        {"name": AgentEnv.CHECKS, "value": checks},
        {"name": AgentEnv.EXPECTED_GPUS, "value": str(sharing.physical if sharing else gpus)},
    ]
    if sharing is not None:
        env.append({"name": AgentEnv.GPU_REPLICAS, "value": str(sharing.replicas)})
    if uuids:
        env.append(device_uuids_env(uuids))
    if spec.agent.metrics_port is not None:
        env.append({"name": AgentEnv.METRICS_PORT, "value": str(spec.agent.metrics_port)})
    return env + [dict(e) for e in baseline] + spec_env(spec)


def device_uuids_env(uuids: Sequence[str]) -> dict[str, str]:
    return {"name": AgentEnv.DEVICE_UUIDS, "value": ",".join(uuids)}


def agent_container(
    spec: GpuValidationSpec,
    request: DeviceRequest,
    command: list[str],
    env: list[dict[str, Any]],
    *,
    metrics: bool = True,
) -> dict[str, Any]:
    """The agent container: all the node's GPUs (every replica of each, where the device plugin
    shares them; every MIG device; or the pod's ResourceClaim), the spec's image, resources and
    privilege (and the live metrics port, unless `metrics` is off: a fabric agent serves none)."""
    agent = spec.agent
    resources: dict[str, Any] = {
        "requests": {**agent.resources.requests, **request.limits()},
        "limits": {**agent.resources.limits, **request.limits()},
    }
    if request.template is not None:
        resources["claims"] = request.container_claims()
    container: dict[str, Any] = {
        "name": "agent",
        "image": agent.image,
        "imagePullPolicy": agent.image_pull_policy,
        "command": command,
        "env": env,
        "resources": resources,
        "securityContext": {"privileged": agent.privileged},
    }
    if metrics and agent.metrics_port is not None:
        container["ports"] = [{"name": "metrics", "containerPort": agent.metrics_port}]
    return container


def node_pod(
    *,
    name: str,
    labels: dict[str, str],
    node: str,
    owner: dict[str, Any],
    spec: GpuValidationSpec,
    config: OperatorConfig,
    container: dict[str, Any],
    annotations: Mapping[str, str] | None = None,
    host_network: bool = False,
    claims: Sequence[Mapping[str, str]] = (),
) -> dict[str, Any]:
    """A pod tied to `node` by affinity, never restarted, under the agents' ServiceAccount (on
    the node's network with `host_network`; with its ResourceClaims, `claims`).

    A manifest literal: long by nature, nothing in it decides anything.
    """
    pod_spec: dict[str, Any] = {"hostNetwork": True, "dnsPolicy": "ClusterFirstWithHostNet"}
    priority = spec.agent.priority_class_name or config.agent_priority_class
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": config.agent_namespace,
            "labels": {**labels, keys.LABEL_COMPONENT: keys.AGENT_COMPONENT},
            "annotations": {**(annotations or {}), keys.ANNOTATION_NODE: node},
            "ownerReferences": [owner],
        },
        "spec": {
            **(pod_spec if host_network else {}),
            "restartPolicy": "Never",
            # NVML reports other processes' PIDs in the host's PID namespace: the agent can name
            # them (GpuInUse) only from there.
            "hostPID": spec.agent.host_pid,
            **({"priorityClassName": priority} if priority else {}),
            # Service links would put <SERVICE>_PORT variables into the agent's environment: with
            # the chart's default release name its metrics Service `gpuval-metrics` becomes
            # GPUVAL_METRICS_PORT=tcp://..., which the agent reads as its own setting.
            "enableServiceLinks": False,
            "serviceAccountName": config.agent_service_account,
            "automountServiceAccountToken": True,
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchFields": [
                                    {"key": "metadata.name", "operator": "In", "values": [node]}
                                ]
                            }
                        ]
                    }
                }
            },
            "tolerations": _tolerations(spec),
            **({"resourceClaims": [dict(c) for c in claims]} if claims else {}),
            "containers": [container],
        },
    }


def build_pod(
    *,
    validation: str,
    uid: str,
    run: str,
    node: str,
    gpus: int,
    spec: GpuValidationSpec,
    config: OperatorConfig,
    deadline: float | None = None,
    attempt: int = 1,
    sharing: GpuSharing | None = None,
    baseline: Sequence[Mapping[str, str]] = (),
    request: DeviceRequest | None = None,
    checks: Sequence[str] | None = None,
) -> dict[str, Any]:
    """The agent pod of `node` for its local checks (its `attempt`-th in this run; `checks`: only
    these, each with the spec's settings, a re-validation after a repair). `deadline`
    (Unix seconds) is when the operator times the node out: the agent keeps retrying its report
    write until then. `sharing`: the node's GPUs are shared (`gpus` is then every replica).
    `request`: how it asks for the node's devices (default: `gpus` nvidia.com/gpu). With
    `spec.agent.queue` it carries Kueue's queue label, and waits for Kueue's admission within that
    same deadline.
    """
    report = names.report_name(validation, run, node)
    request = request or DeviceRequest.device_plugin(gpus)
    if checks:
        only = [CheckName(c) for c in checks if c in {n.value for n in CheckName}]
        spec = spec.model_copy(update={"checks": spec.checks.only(only)})
    env = agent_env(
        report=report,
        gpus=request.count,
        spec=spec,
        deadline=deadline,
        sharing=sharing,
        baseline=baseline,
        uuids=request.uuids,
    )
    labels = {**child_labels(validation, run, node), keys.LABEL_ATTEMPT: str(attempt)}
    annotations = {keys.ANNOTATION_GPU_SHARING: sharing.annotation()} if sharing else None
    if spec.agent.queue is not None:
        # Queued alone (no pod group): each agent pod is its own Kueue workload.
        labels[QUEUE_NAME_LABEL] = spec.agent.queue
    return node_pod(
        name=names.pod_name(validation, run, node, attempt),
        labels=labels,
        node=node,
        owner=owner_reference(validation, uid),
        spec=spec,
        config=config,
        container=agent_container(spec, request, ["gpuval-agent", "cluster"], env),
        annotations=annotations,
        claims=request.pod_claims(),
    )
