"""`helm install` of charts/gpuval into the local control plane, then the real operator, running
with the chart's ServiceAccount token and the chart's configuration, reconciles a GpuValidation end
to end: agent pods under the chart's agent ServiceAccount (their reports written through the
admission policy by the real agent), node labels, taints and cordons, Events, status, finalizer
removal.

The operator runs in-process (kopf_runner); the pod runner stands in for the kubelet of the kwok
nodes and runs the real agent with its simulated backend.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuval_devtools.controlplane import Cluster
from gpuval_operator import planning
from gpuval_operator.config import OperatorConfig
from gpuval_operator.spec import parse_spec
from tests.support import chart
from tests.support.kube import get_json, wait_for

MISCOMPARE = [{"kind": "miscompare", "gpu": 3}]


@pytest.fixture
def release(cluster: Cluster, install_crds: list[str]) -> Iterator[chart.Release]:
    with chart.installed(cluster, "chart") as installed:
        yield installed


def test_helm_install_creates_the_charts_objects_and_the_api_server_accepts_them(
    cluster: Cluster, release: chart.Release
) -> None:
    listed = chart.helm(
        "get", "manifest", release.name, "-n", release.namespace, kubeconfig=cluster.kubeconfig
    ).stdout
    kinds = set(re.findall(r"^kind: (\w+)$", listed, flags=re.MULTILINE))
    assert kinds >= {
        "Namespace",
        "PodDisruptionBudget",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "Deployment",
        "Service",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    }
    status = wait_for(
        "the API server to type-check the admission policy",
        lambda: (get_json(cluster, "validatingadmissionpolicy", release.policy) or {}).get(
            "status"
        ),
    )
    # The API server type-checks the CEL against the CRD's schema: a misspelt field or a wrong
    # type shows up as a warning here.
    assert status["observedGeneration"] == 1
    assert not status.get("typeChecking", {}).get("expressionWarnings"), status
    for crd in ("gpuvalidations.gpuval.dev", "gpunodereports.gpuval.dev"):
        assert get_json(cluster, "crd", crd) is not None


def _replica_failures(cluster: Cluster, namespace: str) -> list[str]:
    """Why the operator's ReplicaSets could not create pods (Pod Security refusals show here)."""
    events = get_json(cluster, "events", "-n", namespace) or {"items": []}
    return [e["message"] for e in events["items"] if e.get("reason") == "FailedCreate"]


def test_the_operator_pods_are_admitted_where_pod_security_enforces_restricted(
    cluster: Cluster, release: chart.Release
) -> None:
    # `installed` labelled the release namespace enforce=restricted before the install; the
    # ReplicaSet controller's pod creates go through Pod Security admission there.
    labels = get_json(cluster, "namespace", release.namespace)["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    selector = f"app.kubernetes.io/instance={release.name},app.kubernetes.io/component=operator"
    pods = wait_for(
        "the operator's two pods to be admitted",
        lambda: (
            len((get_json(cluster, "pods", "-n", release.namespace, "-l", selector) or {})["items"])
            == 2
            or _replica_failures(cluster, release.namespace)
        ),
        timeout=60,
    )
    assert pods is True, pods
    assert _replica_failures(cluster, release.namespace) == []
    # The agents' namespace, made by the chart, is the one that allows privileged pods.
    agents = get_json(cluster, "namespace", release.agent_namespace)["metadata"]["labels"]
    assert agents["pod-security.kubernetes.io/enforce"] == "privileged"


def test_a_privileged_agent_pod_is_refused_in_the_operators_namespace_and_admitted_in_its_own(
    cluster: Cluster, release: chart.Release
) -> None:
    """The negative control: restricted really refuses what the agents need."""
    env = chart.operator_env(release)
    config = OperatorConfig(
        agent_namespace=env["GPUVAL_AGENT_NAMESPACE"],
        agent_service_account=env["GPUVAL_AGENT_SERVICE_ACCOUNT"],
    )
    spec, errors = parse_spec({})
    assert spec is not None and errors == []
    pod = planning.build_pod(
        validation="v", uid="u", run="1-a", node="n", gpus=8, spec=spec, config=config
    )
    pod["metadata"].pop("ownerReferences")

    def dry_run(namespace: str, account: str) -> subprocess.CompletedProcess[str]:
        # Under a ServiceAccount of that namespace: admission looks it up before Pod Security.
        placed = {
            **pod,
            "metadata": {**pod["metadata"], "namespace": namespace},
            "spec": {**pod["spec"], "serviceAccountName": account},
        }
        return cluster.kubectl(
            "create", "--dry-run=server", "-f", "-", input=json.dumps(placed), check=False
        )

    refused = dry_run(release.namespace, release.operator_sa)
    assert refused.returncode != 0
    assert 'violates PodSecurity "restricted:latest"' in refused.stderr
    assert "privileged" in refused.stderr
    admitted = dry_run(release.agent_namespace, release.agent_sa)
    assert admitted.returncode == 0, admitted.stderr


def _completed(cluster: Cluster, name: str) -> dict[str, Any] | None:
    obj = get_json(cluster, "gpuvalidation", name)
    status = (obj or {}).get("status") or {}
    if (status.get("run") or {}).get("completedAt"):
        result: dict[str, Any] = status
        return result
    return None


def _run_helm_test_script(release: chart.Release, port: int) -> subprocess.CompletedProcess[str]:
    """The `helm test` pod's script, run here against the in-process operator: kwok never runs a
    pod's containers, so the script is pointed at the operator's local port instead of the
    Service."""
    objs = chart.render(release=release.name, namespace=release.namespace)
    command = chart.find(objs, "Pod")["spec"]["containers"][0]["command"]
    service = chart.find(objs, "Service")
    url = f"http://{service['metadata']['name']}.{release.namespace}.svc:8080"
    script = command[-1]
    assert url in script
    return subprocess.run(
        [sys.executable, "-c", script.replace(url, f"http://127.0.0.1:{port}")],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def _reports_by_node(cluster: Cluster, validation: str) -> dict[str, dict[str, Any]]:
    listed = get_json(cluster, "gpunodereports", "-l", f"gpuval.dev/validation={validation}")
    return {r["spec"]["node"]: r for r in (listed or {}).get("items", [])}


def test_operator_with_the_charts_serviceaccount_reconciles_a_validation_end_to_end(
    *,
    cluster: Cluster,
    release: chart.Release,
    kopf_runner: Callable[..., contextlib.AbstractContextManager[Any]],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    pool = f"pool-{uuid.uuid4().hex[:6]}"
    good, bad = f"{pool}-good", f"{pool}-bad"
    cluster.add_nodes([chart.pool_node(good, pool), chart.pool_node(bad, pool, MISCOMPARE)])
    name = f"chart-{pool}"
    port = chart.operator_as_chart_serviceaccount(cluster, release, tmp_path, monkeypatch)
    try:
        with (
            chart.podrunner(cluster, release.agent_namespace, tmp_path),
            kopf_runner() as runner,
        ):
            cluster.apply([chart.validation(name, pool)])
            status = wait_for(
                f"GpuValidation {name} to complete its run",
                lambda: _completed(cluster, name),
                timeout=180,
                interval=1,
            )
            metrics = chart.scrape(port)
            helm_test = _run_helm_test_script(release, port)
            reports = _reports_by_node(cluster, name)
            nodes = {n: get_json(cluster, "node", n) for n in (good, bad)}
            pods = get_json(
                cluster,
                "pods",
                "-n",
                release.agent_namespace,
                "-l",
                f"gpuval.dev/validation={name}",
            )
            cluster.kubectl("delete", "gpuvalidation", name, "--wait=false")
            wait_for(
                f"the operator to remove its finalizer from {name}",
                lambda: get_json(cluster, "gpuvalidation", name) is None,
                timeout=60,
            )
        assert runner.exit_code == 0, runner.output
        # kopf and the operator log through `logging`: pytest's caplog holds every record.
        operator_log = "\n".join(r.getMessage() for r in caplog.records)
        operator_loggers = {r.name.split(".")[0] for r in caplog.records}
    finally:
        cluster.kubectl("delete", "gpuvalidation", name, "--wait=false", check=False)
        for node in (good, bad):
            cluster.kubectl("delete", "node", node, "--wait=false", check=False)

    assert status["nodes"]["passed"] == 1, status["failingNodes"]
    assert status["nodes"]["failed"] == 1, status["failingNodes"]
    assert [(f["node"], f["reason"]) for f in status["failingNodes"]] == [(bad, "BurnMismatch")]

    # The agents ran as the chart's agent ServiceAccount, in the agents' own namespace.
    assert {p["spec"]["nodeName"] for p in pods["items"]} == {good, bad}
    assert {p["spec"]["serviceAccountName"] for p in pods["items"]} == {release.agent_sa}

    # Each report carries the agent's whole result document: the agent wrote it, through the
    # admission policy, with a token bound to its pod on that node.
    assert reports[good]["status"]["verdict"] == "Passed"
    assert reports[bad]["status"]["verdict"] == "Failed"
    assert reports[bad]["status"]["reason"] == "BurnMismatch"
    for node in (good, bad):
        assert reports[node]["status"]["result"]["environment"], reports[node]["status"]

    # Node labels, taint and cordon: the operator's patches on nodes were allowed.
    assert nodes[good]["metadata"]["labels"]["gpuval.dev/verdict"] == "passed"
    assert nodes[bad]["metadata"]["labels"]["gpuval.dev/verdict"] == "failed"
    assert nodes[bad]["spec"].get("unschedulable") is True
    assert "gpuval.dev/unhealthy" in {t["key"] for t in nodes[bad]["spec"].get("taints", [])}

    assert helm_test.returncode == 0, helm_test.stdout + helm_test.stderr
    assert helm_test.stdout.strip().endswith("/metrics: ok")

    # Every call the operator made was allowed: its client counts answers by HTTP status.
    assert 'gpuval_operator_api_requests_total{code="403"' not in metrics
    assert not re.search(r'code="403"', metrics), metrics
    assert {"kopf", "gpuval_operator"} <= operator_loggers  # the log check below sees both
    assert "Forbidden" not in operator_log and "HTTP 403" not in operator_log, operator_log
    assert f'gpuval_node_passed{{node="{good}",validation="{name}"}} 1.0' in metrics
    assert f'gpuval_node_passed{{node="{bad}",validation="{name}"}} 0.0' in metrics

    # Events about cluster-scoped objects go to `default`, where `kubectl describe` finds them.
    events = get_json(cluster, "events", "-n", "default") or {"items": []}
    involved = {(e["involvedObject"]["kind"], e["involvedObject"]["name"]) for e in events["items"]}
    assert ("GpuValidation", name) in involved, sorted(involved)


PROMETHEUS_OPERATOR_KINDS = {"ServiceMonitor", "PrometheusRule"}


@pytest.mark.parametrize(
    "values_file", sorted((chart.CHART / "ci").glob("*-values.yaml")), ids=lambda p: p.name
)
def test_every_ci_scenario_passes_the_api_servers_server_side_dry_run(
    cluster: Cluster, install_crds: list[str], values_file: Path
) -> None:
    """The rendered objects of each lint scenario against the real API server's schemas and
    admission (the Prometheus Operator's kinds aside: their CRDs are not installed here)."""
    namespace = f"dry-{uuid.uuid4().hex[:6]}"
    objs = chart.render(
        release=chart.new_release_name(), namespace=namespace, values_files=[values_file]
    )
    namespaces = {namespace} | {
        o["metadata"]["namespace"] for o in objs if o["metadata"].get("namespace")
    }
    created = [ns for ns in sorted(namespaces) if get_json(cluster, "namespace", ns) is None]
    for ns in created:
        cluster.kubectl("create", "namespace", ns)
    try:
        core = [o for o in objs if o["kind"] not in PROMETHEUS_OPERATOR_KINDS]
        proc = cluster.kubectl(
            "apply",
            "--dry-run=server",
            "--server-side",
            "-f",
            "-",
            input="\n---\n".join(yaml.safe_dump(o) for o in core),
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.count("(server dry run)") == len(core), proc.stdout
    finally:
        for ns in created:
            cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
