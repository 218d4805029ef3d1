"""charts/gpuval through the real helm (built by gpuval_devtools.controlplane): lint and template
for the defaults and every ci/*-values.yaml scenario, and what the rendered objects must hold: the
operator pod's hardening, RBAC without wildcards, the admission policy bound to the release's agent
identity, the monitoring toggles, and the schema refusing bad values by name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support import chart

CI_VALUES = sorted((chart.CHART / "ci").glob("*-values.yaml"))
SCENARIOS = [pytest.param((), id="defaults")] + [
    pytest.param((path,), id=path.name) for path in CI_VALUES
]


def test_there_are_ci_scenarios_besides_the_defaults() -> None:
    assert {p.name for p in CI_VALUES} >= {
        "default-values.yaml",
        "monitoring-values.yaml",
        "locked-down-values.yaml",
    }


@pytest.mark.parametrize("values_files", SCENARIOS)
def test_helm_lint_strict_passes(values_files: tuple[Path, ...]) -> None:
    args = ["lint", str(chart.CHART), "--strict", "--kube-version", chart.KUBE_VERSION]
    for path in values_files:
        args += ["--values", str(path)]
    proc = chart.helm(*args, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 chart(s) failed" in proc.stdout


@pytest.mark.parametrize("values_files", SCENARIOS)
def test_helm_template_renders_hardened_operator_and_wildcard_free_rbac(
    values_files: tuple[Path, ...],
) -> None:
    objs = chart.render(values_files=values_files)

    deployment = chart.find(objs, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    # Two replicas behind one leader Lease (gpuval_operator.kube.leader), preferably on two nodes.
    assert deployment["spec"]["replicas"] == 2
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["GPUVAL_LEASE_NAMESPACE"] and env["GPUVAL_LEASE_NAME"]
    # The operator-wide limit on nodes out of service (operator.maxNodesOutOfService).
    assert env["GPUVAL_MAX_NODES_OUT_OF_SERVICE"] == "10"
    assert pod["securityContext"]["runAsNonRoot"] is True
    # OpenShift's scenario leaves the UID to the SCC; wherever one is set, it is not root.
    assert pod["securityContext"].get("runAsUser") != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    # Alive (the event loop answers) and ready (leads, or a standby that read the Lease) differ.
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["resources"]["requests"]["cpu"]
    assert container["resources"]["limits"]["memory"]

    rules = list(chart.rules_of(objs))
    assert rules
    for role, rule in rules:
        for field in ("apiGroups", "resources", "verbs"):
            assert "*" not in rule.get(field, []), f"{role} has a wildcard in {field}: {rule}"
        assert "nonResourceURLs" not in rule, f"{role}: {rule}"


def _env(objs: list[dict[str, Any]]) -> dict[str, str]:
    container = chart.find(objs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


def test_operator_is_told_the_agents_namespace_and_serviceaccount_the_policy_governs() -> None:
    objs = chart.render(release="prod", namespace="gpu-ops")

    env = _env(objs)
    policy = chart.find(objs, "ValidatingAdmissionPolicy")
    binding = chart.find(objs, "ValidatingAdmissionPolicyBinding")
    agent_sa = chart.find(objs, "ServiceAccount", env["GPUVAL_AGENT_SERVICE_ACCOUNT"])

    assert env["GPUVAL_AGENT_NAMESPACE"] == "gpu-ops-agents"
    assert agent_sa["metadata"]["namespace"] == "gpu-ops-agents"
    (condition,) = policy["spec"]["matchConditions"]
    agent_user = f"system:serviceaccount:gpu-ops-agents:{env['GPUVAL_AGENT_SERVICE_ACCOUNT']}"
    assert condition["expression"] == f'request.userInfo.username == "{agent_user}"'
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]


def test_agent_role_grants_only_the_patch_of_report_status() -> None:
    objs = chart.render(release="prod")
    role = chart.find(objs, "ClusterRole", "prod-gpuval-agent")
    binding = chart.find(objs, "ClusterRoleBinding", "prod-gpuval-agent")

    assert role["rules"] == [
        {"apiGroups": ["gpuval.dev"], "resources": ["gpunodereports/status"], "verbs": ["patch"]}
    ]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "prod-gpuval-agent", "namespace": "gpuval-system-agents"}
    ]


def test_operator_touches_agent_pods_and_claim_templates_and_posts_events_where_they_show() -> None:
    objs = chart.render(release="prod", namespace="gpu-ops")
    cluster_resources = {
        resource
        for obj in objs
        if obj["kind"] == "ClusterRole"
        for rule in obj["rules"]
        for resource in rule["resources"]
    }
    pods = chart.find(objs, "Role", "prod-gpuval-operator-pods")
    events = chart.find(objs, "Role", "prod-gpuval-operator-events")
    own = chart.find(objs, "Role", "prod-gpuval-operator-own")

    assert not cluster_resources & {"pods", "events", "secrets", "configmaps"}
    assert pods["metadata"]["namespace"] == "gpu-ops-agents"
    # The agent pods, and with spec.agent.devices dra the ResourceClaimTemplates they claim from.
    assert [r["resources"] for r in pods["rules"]] == [["pods"], ["resourceclaimtemplates"]]
    # Events about cluster-scoped objects are shown only from `default`; kopf's go home.
    assert events["metadata"]["namespace"] == "default"
    assert own["metadata"]["namespace"] == "gpu-ops"
    create_events = {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}
    assert events["rules"] == [create_events] and create_events in own["rules"]


def test_monitoring_objects_are_absent_by_default_and_present_when_toggled() -> None:
    default_kinds = {o["kind"] for o in chart.render()}
    monitoring = chart.render(values_files=[chart.CHART / "ci" / "monitoring-values.yaml"])

    assert not default_kinds & {"ServiceMonitor", "PrometheusRule", "ConfigMap"}
    monitor = chart.find(monitoring, "ServiceMonitor")
    rule = chart.find(monitoring, "PrometheusRule")
    dashboard = chart.find(monitoring, "ConfigMap", "gpuval-dashboard")
    grafana_alert = chart.find(monitoring, "ConfigMap", "gpuval-grafana-alert")
    service = chart.find(monitoring, "Service")
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["spec"]["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"]
    for key, value in monitor["spec"]["selector"]["matchLabels"].items():
        assert service["metadata"]["labels"][key] == value
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    alerts = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    assert set(alerts) == {
        "GpuvalNodeFailedBurn",
        "GpuvalNodeFailed",
        "GpuvalNodeFabricFailed",
        "GpuvalNodeNeedsRepair",
        "GpuvalNodeActionsHeld",
        "GpuvalFleetNotUniform",
        "GpuvalValidationStale",
        "GpuvalAgentPodsUnschedulable",
        "GpuvalNodeUntested",
        "GpuvalProofTooOld",
    }
    for name, alert in alerts.items():
        assert alert["labels"]["team"] == "gpu-infra"
        assert alert["annotations"]["runbook_url"].endswith(f"#{name.lower()}")
        assert "{{ $labels.validation }}" in alert["annotations"]["description"]
    assert "604800" in alerts["GpuvalValidationStale"]["expr"]
    assert dashboard["metadata"]["namespace"] == "monitoring"
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(dashboard["data"]["gpuval.json"])["uid"] == "gpuval-overview"
    assert grafana_alert["metadata"]["namespace"] == "monitoring"
    assert grafana_alert["metadata"]["labels"]["grafana_alert"] == "1"


def test_pinned_digest_wins_over_the_tag() -> None:
    digest = "sha256:" + "ab" * 32
    objs = chart.render(values={"operator.image.digest": digest, "operator.image.tag": "9.9"})
    container = chart.find(objs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == f"ghcr.io/gpuval/gpuval-operator@{digest}"


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"metrics.port": 80}, "at '/metrics/port': minimum: got 80"),
        ({"operator.image.digest": "latest"}, "at '/operator/image/digest'"),
        ({"agent.admissionPolicy.validationActions": ["Block"]}, "validationActions/0"),
        ({"prometheusRule.nodeFailed.for": "five minutes"}, "'/prometheusRule/nodeFailed/for'"),
        ({"operator.replicas": 0}, "at '/operator/replicas': minimum: got 0"),
        (
            {"operator.leaderElection.renewSeconds": 0},
            "at '/operator/leaderElection/renewSeconds': minimum: got 0",
        ),
        ({"operator.createConcurrency": 0}, "at '/operator/createConcurrency': minimum: got 0"),
    ],
)
def test_schema_refuses_a_bad_value_naming_the_field(values: dict[str, Any], named: str) -> None:
    args = ["template", "r", str(chart.CHART), "--kube-version", chart.KUBE_VERSION]
    proc = chart.helm(*args, *chart.set_args(values), check=False)
    assert proc.returncode != 0
    assert "values don't meet the specifications of the schema" in proc.stderr
    assert named in proc.stderr


def test_a_servicemonitor_without_the_service_it_selects_is_refused_with_a_reason() -> None:
    args = ["template", "r", str(chart.CHART), "--kube-version", chart.KUBE_VERSION]
    values = {"metrics.serviceMonitor.enabled": True, "metrics.service.enabled": False}
    proc = chart.helm(*args, *chart.set_args(values), check=False)
    assert proc.returncode != 0
    assert "metrics.serviceMonitor.enabled=true needs metrics.service.enabled=true" in proc.stderr


def test_an_existing_operator_serviceaccount_must_be_named() -> None:
    args = ["template", "r", str(chart.CHART), "--kube-version", chart.KUBE_VERSION]
    proc = chart.helm(
        *args, *chart.set_args({"operator.serviceAccount.create": False}), check=False
    )
    assert proc.returncode != 0
    assert "operator.serviceAccount.name must name an existing ServiceAccount" in proc.stderr


def test_helm_test_pod_checks_the_operators_metrics_through_the_service() -> None:
    objs = chart.render(release="prod", namespace="gpu-ops")
    pod = chart.find(objs, "Pod")
    service = chart.find(objs, "Service")

    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    script = pod["spec"]["containers"][0]["command"][-1]
    assert f"http://{service['metadata']['name']}.gpu-ops.svc:8080/metrics" in script
    assert "gpuval_operator_build_info" in script


def test_agents_get_a_namespace_of_their_own_that_alone_allows_privileged_pods() -> None:
    objs = chart.render(release="prod", namespace="gpu-ops")
    (namespace,) = [o for o in objs if o["kind"] == "Namespace"]
    labels = namespace["metadata"]["labels"]

    assert namespace["metadata"]["name"] == "gpu-ops-agents"
    for mode in ("enforce", "audit", "warn"):
        assert labels[f"pod-security.kubernetes.io/{mode}"] == "privileged"
    # In the agents' namespace: the agents' identity and their read of its pods (a fabric rank
    # reads rank 0's), and the operator's right to run pods there.
    there = {
        (o["kind"], o["metadata"]["name"])
        for o in objs
        if o["metadata"].get("namespace") == "gpu-ops-agents"
    }
    assert there == {
        ("ServiceAccount", "prod-gpuval-agent"),
        ("Role", "prod-gpuval-agent-pods"),
        ("RoleBinding", "prod-gpuval-agent-pods"),
        ("Role", "prod-gpuval-operator-pods"),
        ("RoleBinding", "prod-gpuval-operator-pods"),
    }
    assert chart.find(objs, "Deployment")["metadata"]["namespace"] == "gpu-ops"


COMPONENT = "app.kubernetes.io/component"


def test_the_agents_namespace_can_be_named_or_be_the_release_namespace_when_not_created() -> None:
    named = chart.render(values={"agent.namespace.name": "gpu-burn"})
    assert chart.find(named, "Namespace")["metadata"]["name"] == "gpu-burn"
    assert _env(named)["GPUVAL_AGENT_NAMESPACE"] == "gpu-burn"

    shared = chart.render(
        namespace="gpuval-system",
        values={"agent.namespace.name": "gpuval-system", "agent.namespace.create": False},
    )
    assert [o for o in shared if o["kind"] == "Namespace"] == []
    assert _env(shared)["GPUVAL_AGENT_NAMESPACE"] == "gpuval-system"


def test_creating_the_release_namespace_as_the_agents_one_is_refused_with_the_fix() -> None:
    args = ["template", "r", str(chart.CHART), "--namespace", "ops", "--kube-version"]
    values = {"agent.namespace.name": "ops"}
    proc = chart.helm(*args, chart.KUBE_VERSION, *chart.set_args(values), check=False)
    assert proc.returncode != 0
    assert "agent.namespace.name=ops is the release's own namespace" in proc.stderr
    assert "agent.namespace.create=false" in proc.stderr


def test_a_restricted_agents_namespace_is_refused_with_what_admits_the_agents() -> None:
    """Pod Security's `restricted` level admits no agent pod (issue 34 part 1): refused with the
    levels that work, and what `baseline` asks of every GpuValidation."""
    args = ["template", "r", str(chart.CHART), "--kube-version", chart.KUBE_VERSION]
    values = {"agent.namespace.podSecurityLevel": "restricted"}
    proc = chart.helm(*args, *chart.set_args(values), check=False)
    assert proc.returncode != 0
    assert "agent.namespace.podSecurityLevel=restricted admits no agent pod" in proc.stderr
    assert "spec.agent.privileged: false and spec.agent.hostPID: false" in proc.stderr
    baseline = chart.render(values={"agent.namespace.podSecurityLevel": "baseline"})
    labels = chart.find(baseline, "Namespace")["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "baseline"


def test_two_operator_replicas_get_a_disruption_budget_and_spread_over_zones_and_nodes() -> None:
    objs = chart.render(release="prod")
    pod = chart.find(objs, "Deployment")["spec"]["template"]
    budget = chart.find(objs, "PodDisruptionBudget")

    assert budget["spec"]["maxUnavailable"] == 1
    assert (
        budget["spec"]["selector"]["matchLabels"]
        == chart.find(objs, "Deployment")["spec"]["selector"]["matchLabels"]
    )
    (zones,) = pod["spec"]["topologySpreadConstraints"]
    assert zones["topologyKey"] == "topology.kubernetes.io/zone"
    assert zones["whenUnsatisfiable"] == "ScheduleAnyway"
    assert zones["labelSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    anti = pod["spec"]["affinity"]["podAntiAffinity"]
    assert (
        anti["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]["topologyKey"]
        == "kubernetes.io/hostname"
    )

    own = [
        {
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "DoNotSchedule",
        }
    ]
    custom = chart.render(release="prod", values={"operator.topologySpreadConstraints": own})
    (given,) = chart.find(custom, "Deployment")["spec"]["template"]["spec"][
        "topologySpreadConstraints"
    ]
    assert given["whenUnsatisfiable"] == "DoNotSchedule"
    assert given["labelSelector"] == zones["labelSelector"]
    assert not [
        o
        for o in chart.render(values={"operator.podDisruptionBudget.enabled": False})
        if o["kind"] == "PodDisruptionBudget"
    ]


def test_openshifts_scenario_leaves_uid_gid_and_fsgroup_to_the_security_context_constraint() -> (
    None
):
    objs = chart.render(values_files=[chart.CHART / "ci" / "openshift-values.yaml"])
    for pod in (
        chart.find(objs, "Deployment")["spec"]["template"]["spec"],
        chart.find(objs, "Pod")["spec"],
    ):
        context = pod["securityContext"]
        assert not {"runAsUser", "runAsGroup", "fsGroup"} & set(context), context
        assert context["runAsNonRoot"] is True
        (container,) = pod["containers"]
        assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]


def test_network_policies_are_opt_in_and_keep_each_side_to_what_it_talks_to() -> None:
    assert not [o for o in chart.render() if o["kind"] == "NetworkPolicy"]
    objs = chart.render(
        release="prod",
        namespace="gpu-ops",
        values_files=[chart.CHART / "ci" / "all-on-values.yaml"],
    )
    operator = chart.find(objs, "NetworkPolicy", "prod-gpuval-operator")
    agent = chart.find(objs, "NetworkPolicy", "prod-gpuval-agent")

    assert operator["metadata"]["namespace"] == "gpu-ops"
    assert agent["metadata"]["namespace"] == "gpu-ops-agents"
    for policy in (operator, agent):
        assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
        api = policy["spec"]["egress"][-2]
        assert [p["port"] for p in api["ports"]] == [443, 6443]
        assert [b["ipBlock"]["cidr"] for b in api["to"]] == ["10.0.0.1/32", "192.168.10.10/32"]
        assert [p["port"] for p in policy["spec"]["egress"][-1]["ports"]] == [53, 53]
    (scrape,) = operator["spec"]["ingress"]
    assert scrape["ports"] == [{"protocol": "TCP", "port": "metrics"}]
    monitoring = scrape["from"][0]["namespaceSelector"]["matchLabels"]
    assert monitoring == {"kubernetes.io/metadata.name": "monitoring"}
    # Agents talk to agents (the fabric) and are reached by nothing else.
    agents = {"matchLabels": {COMPONENT: "agent"}}
    assert agent["spec"]["podSelector"] == agents
    assert agent["spec"]["ingress"] == [{"from": [{"podSelector": agents}]}]
    assert agent["spec"]["egress"][0] == {"to": [{"podSelector": agents}]}
