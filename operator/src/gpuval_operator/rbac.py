"""The operator's RBAC: exactly the verbs on exactly the resources its code calls, nothing else.

One source for the chart's ClusterRoles and Roles, the demo's and the tests' (the operator's and
the agent's), checked against the rendered chart. kopf's part: list/watch/patch of GpuValidations
(its finalizer and annotations) and Events it posts in its own namespace.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuval_api.crd import GROUP
from gpuval_api.dra import RESOURCE_GROUP


@dataclass(frozen=True, slots=True)
class Rule:
    api_groups: tuple[str, ...]
    resources: tuple[str, ...]
    verbs: tuple[str, ...]
    # Why the code needs it, for docs/operator/reference.md's generated table (never rendered
    # into a Role, never compared).
    why: str = field(default="", compare=False)

    def as_dict(self) -> dict[str, Any]:
        return {
            "apiGroups": list(self.api_groups),
            "resources": list(self.resources),
            "verbs": list(self.verbs),
        }


# Cluster-scoped objects, or watched across the cluster.
CLUSTER_RULES = (
    Rule(
        (GROUP,),
        ("gpuvalidations",),
        ("list", "watch", "patch"),
        why="kopf: one daemon per GpuValidation, its finalizer and annotations",
    ),
    Rule((GROUP,), ("gpuvalidations/status",), ("patch",), why="the status"),
    Rule(
        (GROUP,),
        ("gpunodereports",),
        ("get", "list", "watch", "create", "deletecollection"),
        why="a run's reports; get: a fabric-failed node's report, read back for its evidence "
        "(control/fabric/evidence.py)",
    ),
    Rule(
        (GROUP,),
        ("gpunodereports/status",),
        ("patch",),
        why="verdicts the operator records itself, device health, the reset before a retry",
    ),
    Rule(
        (GROUP,),
        ("gpubaselines",),
        ("list", "create"),
        why="spec.baseline: listed at each run's start; learned ones created, never changed",
    ),
    Rule(
        ("",),
        ("nodes",),
        ("get", "list", "watch", "patch"),
        why="the selected nodes; their labels, taint, cordon and entries",
    ),
    Rule(
        ("",),
        ("nodes/status",),
        ("patch",),
        why="the GpuValidated condition (a strategic merge patch); with spec.remediation "
        "GpuRepairRequested, GpuNeedsRepair",
    ),
    Rule(
        (RESOURCE_GROUP,),
        ("resourceslices",),
        ("list", "watch"),
        why="spec.agent.devices dra: the nodes' GPUs from the NVIDIA driver's ResourceSlices",
    ),
    Rule(
        (RESOURCE_GROUP,),
        ("resourceclaims",),
        ("list",),
        why="the claims that hold a node's devices, named (DevicesClaimed) when its agent pod "
        "could not be scheduled",
    ),
)
# In the agent namespace (GPUVAL_AGENT_NAMESPACE): the agent pods.
AGENT_NAMESPACE_RULES = (
    Rule(
        ("",),
        ("pods",),
        ("list", "watch", "create", "delete", "deletecollection"),
        why="the agent pods and the fabric pods",
    ),
    Rule(
        (RESOURCE_GROUP,),
        ("resourceclaimtemplates",),
        ("create", "deletecollection"),
        why="spec.agent.devices dra: each run's ResourceClaimTemplates, deleted with its pods "
        "(the claims made from them are kube-controller-manager's, owned by the pods)",
    ),
)
# Events about GpuValidations and nodes: Kubernetes keeps Events about cluster-scoped objects in
# `default` (gpuval_operator.kube.events), and kopf posts its own in the operator's namespace.
EVENT_RULES = (
    Rule(
        ("",),
        ("events",),
        ("create",),
        why="Events about GpuValidations and nodes (Kubernetes keeps Events about "
        "cluster-scoped objects in `default`)",
    ),
)
EVENT_NAMESPACE = "default"
# In the operator's namespace: the leader Lease (gpuval_operator.kube.leader), and kopf's Events.
OWN_NAMESPACE_RULES = (
    Rule(("",), ("events",), ("create",), why="kopf's Events"),
    Rule(
        ("coordination.k8s.io",),
        ("leases",),
        ("get", "watch", "create", "update"),
        why="leader election; watch: a standby sees the leader release the Lease at once "
        "(kube/leader.py)",
    ),
)
# What an agent may do: patch GpuNodeReport status, nothing else. Which report is the admission
# policy's business (RBAC cannot tie a request to the node it comes from).
AGENT_RULES = (
    Rule(
        (GROUP,),
        ("gpunodereports/status",),
        ("patch",),
        why="its node's report; the admission policy narrows it to the pod's own node, and to a "
        "report whose verdict the operator has not settled",
    ),
)
# In the agents' namespace: a fabric group's pods are made at once, before rank 0 has an
# address, so each other rank reads rank 0's pod (by name: get, never list or watch) for its IP.
# An admission policy cannot narrow a read; the namespace holds only gpuval's agent pods.
AGENT_POD_RULES = (
    Rule(("",), ("pods",), ("get",), why="a fabric rank reads rank 0's pod for its IP"),
)


# spec.remediation mode Template: the objects gpuval makes from a template, of the engine's kinds
# (NVSentinel's rebootnodes and gpuresets, Medik8s' selfnoderemediations): listed by label (its
# requests found again after a restart), made, read back on 409 and deleted once the repair ended.
# The chart adds one rule with these verbs for each entry of its `remediation.rbac` values.
REMEDIATION_VERBS = ("get", "list", "create", "delete")


def remediation_rules(grants: Iterable[Mapping[str, Any]]) -> tuple[Rule, ...]:
    """The rules for the engine's resources (each `{apiGroups, resources}` of the chart's
    `remediation.rbac`), with exactly the verbs the repair loop calls."""
    return tuple(
        Rule(tuple(g["apiGroups"]), tuple(g["resources"]), REMEDIATION_VERBS) for g in grants
    )


def cluster_role(name: str, rules: tuple[Rule, ...] = CLUSTER_RULES) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": [r.as_dict() for r in rules],
    }


def role(name: str, namespace: str, rules: tuple[Rule, ...]) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": name, "namespace": namespace},
        "rules": [r.as_dict() for r in rules],
    }


def binding(
    kind: str, name: str, account: str, account_namespace: str, namespace: str | None = None
) -> dict[str, Any]:
    """A (Cluster)RoleBinding of the (Cluster)Role `name` to a ServiceAccount."""
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": f"{kind}Binding",
        "metadata": meta,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": account_namespace}],
    }
