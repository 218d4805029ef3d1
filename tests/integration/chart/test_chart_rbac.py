"""The chart's RBAC, proven both ways on the real API server: the operator's ServiceAccount may make
exactly the calls the operator makes and nothing else; the agent's ServiceAccount may patch report
status and get pods in its own namespace (a fabric rank reads rank 0's), nothing else. Each
identity asks the API server itself (SelfSubjectRulesReview and `kubectl auth can-i` with its own
token), so the answers are the authorizer's, not the chart's text.

That the operator really needs no more is proven by test_chart_install.py, where it reconciles a
GpuValidation end to end with this identity and gets no 403.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuval_devtools.controlplane import Cluster
from tests.support import chart

Right = tuple[str, str, str]  # (API group, resource[/subresource], verb)

# Every call gpuval_operator (and kopf under it) makes, by where it makes it: the rules of
# gpuval_operator.rbac, which the chart's templates/rbac-operator.yaml renders (the rendering is
# compared with that module in test_chart_rbac_source.py); here the API server's own answer.
OPERATOR_CLUSTER_RIGHTS: set[Right] = {
    # kopf: list+watch of GpuValidations, finalizer and progress annotations by patch.
    *{("gpuval.dev", "gpuvalidations", v) for v in ("list", "watch", "patch")},
    # statuswriter: the status roll-up (merge patch on /status).
    ("gpuval.dev", "gpuvalidations/status", "patch"),
    # effects/ingest: reports created per node and run, followed by a label-selected
    # list+watch, deleted by label selector when a run is superseded.
    *{
        ("gpuval.dev", "gpunodereports", v)
        for v in ("get", "list", "watch", "create", "deletecollection")
    },
    # effects: a node's verdict written by the operator when its agent could not.
    ("gpuval.dev", "gpunodereports/status", "patch"),
    # control.baseline.driver: the GpuBaselines listed at a run's start, the learned ones created.
    *{("gpuval.dev", "gpubaselines", v) for v in ("list", "create")},
    # planning: node selection; nodes.watch: the nodes' list+watch; nodes.actor: verdict labels,
    # taints, cordon (merge patch) and the GpuValidated condition (on the node's status).
    *{("", "nodes", v) for v in ("get", "list", "watch", "patch")},
    ("", "nodes/status", "patch"),
    # nodes.slices: the NVIDIA DRA driver's ResourceSlices (list+watch); effects: the claims that
    # hold a node's devices, named when its DRA agent pod was never scheduled.
    *{("resource.k8s.io", "resourceslices", v) for v in ("list", "watch")},
    ("resource.k8s.io", "resourceclaims", "list"),
}
OPERATOR_NAMESPACE_RIGHTS: set[Right] = {
    ("", "events", "create"),
    # leader: the Lease through which one replica acts (watched by the standby).
    *{("coordination.k8s.io", "leases", v) for v in ("get", "watch", "create", "update")},
}
# In the agents' own namespace: their pods, created, followed and collected.
OPERATOR_AGENT_NAMESPACE_RIGHTS: set[Right] = {
    *{("", "pods", v) for v in ("list", "watch", "create", "delete", "deletecollection")},
    # effects: each DRA run's ResourceClaimTemplates, made and collected with its pods.
    *{("resource.k8s.io", "resourceclaimtemplates", v) for v in ("create", "deletecollection")},
}
# Stands for the release's agent namespace in the parametrized calls (random per module).
AGENTS = "<agents>"
# The API server grants these to every authenticated user; they are not the chart's.
SELF_REVIEWS = {
    ("authentication.k8s.io", "selfsubjectreviews", "create"),
    ("authorization.k8s.io", "selfsubjectaccessreviews", "create"),
    ("authorization.k8s.io", "selfsubjectrulesreviews", "create"),
}


def rights_in(cluster: Cluster, kubeconfig: Path, namespace: str) -> set[Right]:
    """What the identity of `kubeconfig` may do in `namespace` (cluster-wide rights included),
    as the API server's authorizer answers a SelfSubjectRulesReview."""
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectRulesReview",
        "spec": {"namespace": namespace},
    }
    proc = cluster.kubectl_as(
        kubeconfig, "create", "--validate=false", "-f", "-", "-o", "json", input=json.dumps(review)
    )
    assert proc.returncode == 0, proc.stderr
    status = json.loads(proc.stdout)["status"]
    assert not status.get("incomplete"), status
    rights: set[Right] = set()
    for rule in status["resourceRules"]:
        for group in rule.get("apiGroups", []):
            for resource in rule.get("resources", []):
                for verb in rule.get("verbs", []):
                    rights.add((group, resource, verb))
    return rights - SELF_REVIEWS


@pytest.fixture(scope="module")
def release(cluster: Cluster, install_crds: list[str]) -> Iterator[chart.Release]:
    namespace = f"rbac-{uuid.uuid4().hex[:6]}"
    chart.restricted_namespace(cluster, namespace)
    installed = chart.install(cluster, chart.new_release_name(), namespace)
    try:
        yield installed
    finally:
        chart.uninstall(cluster, installed)
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


@pytest.fixture(scope="module")
def operator(
    cluster: Cluster, release: chart.Release, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    token = chart.token_for(cluster, release.namespace, release.operator_sa)
    path = tmp_path_factory.mktemp("operator") / "kubeconfig"
    return chart.kubeconfig_for(cluster, token, path, release.namespace)


@pytest.fixture(scope="module")
def agent(
    cluster: Cluster, release: chart.Release, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    token = chart.token_for(cluster, release.agent_namespace, release.agent_sa)
    path = tmp_path_factory.mktemp("agent") / "kubeconfig"
    return chart.kubeconfig_for(cluster, token, path, release.agent_namespace)


def test_operator_holds_exactly_the_rights_of_its_calls_in_its_namespace(
    cluster: Cluster, release: chart.Release, operator: Path
) -> None:
    rights = rights_in(cluster, operator, release.namespace)
    assert rights == OPERATOR_CLUSTER_RIGHTS | OPERATOR_NAMESPACE_RIGHTS


def test_operator_may_run_pods_only_in_the_agents_namespace(
    cluster: Cluster, release: chart.Release, operator: Path
) -> None:
    rights = rights_in(cluster, operator, release.agent_namespace)
    assert rights == OPERATOR_CLUSTER_RIGHTS | OPERATOR_AGENT_NAMESPACE_RIGHTS


def test_operator_may_post_events_in_default_where_kubectl_describe_shows_them(
    cluster: Cluster, operator: Path
) -> None:
    rights = rights_in(cluster, operator, "default")
    assert rights == OPERATOR_CLUSTER_RIGHTS | {("", "events", "create")}


def test_operator_holds_only_its_cluster_rights_in_another_namespace(
    cluster: Cluster, operator: Path
) -> None:
    assert rights_in(cluster, operator, "kube-system") == OPERATOR_CLUSTER_RIGHTS


def can_i(cluster: Cluster, kubeconfig: Path, *args: str) -> bool:
    proc = cluster.kubectl_as(kubeconfig, "auth", "can-i", *args)
    assert proc.stdout.strip() in ("yes", "no"), proc.stdout + proc.stderr
    return proc.stdout.strip() == "yes"


@pytest.mark.parametrize(
    "request_args",
    [
        ("get", "secrets"),
        ("list", "secrets", "--all-namespaces"),
        ("get", "configmaps"),
        ("create", "serviceaccounts/token"),
        ("create", "pods", "-n", "kube-system"),
        ("list", "pods", "--all-namespaces"),
        ("create", "pods", "--subresource=exec"),
        ("create", "pods", "--subresource=eviction"),
        ("delete", "nodes"),
        ("update", "nodes"),
        ("create", "gpuvalidations.gpuval.dev"),
        ("delete", "gpuvalidations.gpuval.dev"),
        ("patch", "gpunodereports.gpuval.dev"),
        ("delete", "gpunodereports.gpuval.dev"),
        ("get", "pods"),
        # Pods only in the agents' namespace: not in its own.
        ("create", "pods"),
        ("create", "events", "-n", "kube-system"),
        ("create", "clusterrolebindings"),
        ("escalate", "clusterroles"),
        ("bind", "clusterroles"),
        ("delete", "validatingadmissionpolicies"),
        ("update", "validatingadmissionpolicybindings"),
        ("update", "customresourcedefinitions"),
        ("impersonate", "serviceaccounts"),
        # Learned baselines are created, never changed or deleted (learning again is a person's
        # call: kubectl gpuval baseline learn --replace).
        ("delete", "gpubaselines.gpuval.dev"),
        ("patch", "gpubaselines.gpuval.dev"),
        ("update", "gpubaselines.gpuval.dev"),
    ],
    ids=" ".join,
)
def test_operator_is_denied_what_it_does_not_call(
    cluster: Cluster, operator: Path, request_args: tuple[str, ...]
) -> None:
    assert not can_i(cluster, operator, *request_args)


@pytest.mark.parametrize(
    "request_args",
    [
        ("patch", "gpuvalidations.gpuval.dev"),
        ("patch", "gpuvalidations.gpuval.dev", "--subresource=status"),
        ("create", "gpunodereports.gpuval.dev"),
        ("deletecollection", "gpunodereports.gpuval.dev"),
        ("patch", "gpunodereports.gpuval.dev", "--subresource=status"),
        ("patch", "nodes"),
        ("list", "gpubaselines.gpuval.dev"),
        ("create", "gpubaselines.gpuval.dev"),
        ("create", "pods", "-n", AGENTS),
        ("deletecollection", "pods", "-n", AGENTS),
        ("create", "events"),
        ("create", "events", "-n", "default"),
    ],
    ids=" ".join,
)
def test_operator_is_allowed_each_call_it_makes(
    cluster: Cluster, release: chart.Release, operator: Path, request_args: tuple[str, ...]
) -> None:
    args = [release.agent_namespace if a == AGENTS else a for a in request_args]
    assert can_i(cluster, operator, *args)


def test_agent_may_patch_report_status_and_get_its_namespaces_pods_and_nothing_else(
    cluster: Cluster, release: chart.Release, agent: Path
) -> None:
    only = {("gpuval.dev", "gpunodereports/status", "patch")}
    assert rights_in(cluster, agent, release.agent_namespace) == only | {("", "pods", "get")}
    assert rights_in(cluster, agent, release.namespace) == only
    assert rights_in(cluster, agent, "default") == only


@pytest.mark.parametrize(
    "request_args",
    [
        ("get", "gpunodereports.gpuval.dev"),
        ("list", "gpunodereports.gpuval.dev"),
        ("patch", "gpunodereports.gpuval.dev"),
        ("create", "gpunodereports.gpuval.dev"),
        ("delete", "gpunodereports.gpuval.dev"),
        ("patch", "gpuvalidations.gpuval.dev", "--subresource=status"),
        # Pods by name in its own namespace only: no list, no watch, no pod elsewhere.
        ("list", "pods"),
        ("watch", "pods"),
        ("get", "pods", "-n", "default"),
        ("get", "pods", "--subresource=log"),
        ("list", "nodes"),
        ("patch", "nodes"),
        ("create", "events"),
        ("get", "secrets"),
        ("create", "serviceaccounts/token"),
    ],
    ids=" ".join,
)
def test_agent_is_denied_everything_but_report_status_and_its_pod_read(
    cluster: Cluster, agent: Path, request_args: tuple[str, ...]
) -> None:
    assert not can_i(cluster, agent, *request_args)
