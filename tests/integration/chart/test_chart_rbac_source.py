"""The chart's operator RBAC has one source, gpuval_operator.rbac, the list of the calls the
operator's code makes: what helm renders must equal that module's rules, so a new call in the
operator without its rule in the chart (or a rule the code no longer needs) fails here."""

from __future__ import annotations

from typing import Any

from gpuval_operator import rbac
from tests.support import chart


def _rules(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"apiGroups": r["apiGroups"], "resources": r["resources"], "verbs": r["verbs"]}
        for r in obj["rules"]
    ]


def test_cluster_role_renders_exactly_the_operators_cluster_rules() -> None:
    objs = chart.render(release="prod")
    role = chart.find(objs, "ClusterRole", "prod-gpuval-operator")
    assert _rules(role) == [r.as_dict() for r in rbac.CLUSTER_RULES]


def test_agent_namespace_role_renders_exactly_the_operators_pod_rules() -> None:
    objs = chart.render(release="prod", namespace="gpu-ops")
    role = chart.find(objs, "Role", "prod-gpuval-operator-pods")
    assert role["metadata"]["namespace"] == "gpu-ops-agents"
    assert _rules(role) == [r.as_dict() for r in rbac.AGENT_NAMESPACE_RULES]


def test_event_roles_render_exactly_the_operators_event_rules() -> None:
    objs = chart.render(release="prod", namespace="gpu-ops")
    role = chart.find(objs, "Role", "prod-gpuval-operator-events")
    assert role["metadata"]["namespace"] == rbac.EVENT_NAMESPACE
    assert _rules(role) == [r.as_dict() for r in rbac.EVENT_RULES]
    own = chart.find(objs, "Role", "prod-gpuval-operator-own")
    assert own["metadata"]["namespace"] == "gpu-ops"
    assert _rules(own) == [r.as_dict() for r in rbac.OWN_NAMESPACE_RULES]


def test_agent_cluster_role_renders_exactly_the_agents_rules() -> None:
    objs = chart.render(release="prod")
    role = chart.find(objs, "ClusterRole", "prod-gpuval-agent")
    assert _rules(role) == [r.as_dict() for r in rbac.AGENT_RULES]


def test_agents_read_pods_in_their_own_namespace_and_nothing_else_of_the_core_group() -> None:
    objs = chart.render(release="prod", namespace="gpu-ops")
    role = chart.find(objs, "Role", "prod-gpuval-agent-pods")
    assert role["metadata"]["namespace"] == "gpu-ops-agents"
    assert _rules(role) == [r.as_dict() for r in rbac.AGENT_POD_RULES]
    assert _rules(role) == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]
    binding = chart.find(objs, "RoleBinding", "prod-gpuval-agent-pods")
    assert binding["subjects"][0]["name"] == "prod-gpuval-agent"


def test_remediation_rbac_values_add_the_engines_resources_with_the_repair_loops_verbs() -> None:
    grants = [
        {"apiGroups": ["janitor.dgxc.nvidia.com"], "resources": ["rebootnodes", "gpuresets"]},
        {"apiGroups": ["self-node-remediation.medik8s.io"], "resources": ["selfnoderemediations"]},
    ]
    objs = chart.render(release="prod", values={"remediation.rbac": grants})
    role = chart.find(objs, "ClusterRole", "prod-gpuval-operator")
    expected = [*rbac.CLUSTER_RULES, *rbac.remediation_rules(grants)]
    assert _rules(role) == [r.as_dict() for r in expected]
    assert _rules(role)[-1]["verbs"] == ["get", "list", "create", "delete"]
