"""The operator's RBAC: exactly the verbs on exactly the resources its code calls, nothing else.

One source for the chart's ClusterRole and Roles (issue 5) and for the integration test that runs
the operator with only these permissions. kopf's part: list/watch/patch of GpuValidations (its
finalizer and annotations) and Events it posts in its own namespace.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Rule:
    api_groups: tuple[str, ...]
    resources: tuple[str, ...]
    verbs: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            "apiGroups": list(self.api_groups),
            "resources": list(self.resources),
            "verbs": list(self.verbs),
        }


# Cluster-scoped objects, or watched across the cluster.
CLUSTER_RULES = (
    Rule(("gpuval.dev",), ("gpuvalidations",), ("list", "watch", "patch")),
    Rule(("gpuval.dev",), ("gpuvalidations/status",), ("patch",)),
    Rule(("gpuval.dev",), ("gpunodereports",), ("list", "watch", "create", "deletecollection")),
    Rule(("gpuval.dev",), ("gpunodereports/status",), ("patch",)),
    Rule(("",), ("nodes",), ("get", "list", "patch")),
)
# In the agent namespace (GPUVAL_AGENT_NAMESPACE): the agent pods.
AGENT_NAMESPACE_RULES = (
    Rule(("",), ("pods",), ("list", "watch", "create", "delete", "deletecollection")),
)
# In the event namespace (GPUVAL_EVENT_NAMESPACE, by default the operator's own namespace).
EVENT_NAMESPACE_RULES = (Rule(("",), ("events",), ("create",)),)


def cluster_role(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": [r.as_dict() for r in CLUSTER_RULES],
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
