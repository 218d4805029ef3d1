"""The chart's ValidatingAdmissionPolicy, proven with real pod-bound ServiceAccount tokens: an agent
may write only the GpuNodeReport of the node its pod runs on (design.md, "Security model").

Two kwok GPU nodes, one pod of the chart's agent ServiceAccount on each (placed by kube-scheduler),
a TokenRequest bound to each pod, and the agent's own report writer (gpuval_agent.kube) patching
report status with those tokens, exactly as `gpuval-agent cluster` does in its pod.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from gpuval_agent.errors import AgentError
from gpuval_agent.kube import ApiServer, ReportWriter
from gpuval_api.reasons import Reason
from gpuval_api.report import build_operator_failure_status, build_reset_status
from gpuval_devtools.controlplane import Cluster, GpuNode
from tests.support import chart
from tests.support.kube import get_json, wait_for

NODE_NAME_KEY = "authentication.kubernetes.io/node-name"


def _bound_to(cluster: Cluster, namespace: str, pod: str, node: str) -> bool:
    return chart.scheduled_node(cluster, namespace, pod) == node


@dataclass(frozen=True)
class Agents:
    release: chart.Release
    namespace: str
    nodes: tuple[str, str]
    pods: tuple[str, str]
    reports: tuple[str, str]
    workdir: Path

    def token_file(self, token: str, name: str) -> Path:
        path = self.workdir / name
        path.write_text(token)
        return path

    def writer(self, cluster: Cluster, token_file: Path, report: str) -> ReportWriter:
        server = ApiServer(cluster.server, token_file, cluster.ca_file)
        return ReportWriter(server, report, budget=0)


@contextlib.contextmanager
def deploy_agents(
    cluster: Cluster, workdir: Path, values: dict[str, Any] | None = None
) -> Iterator[Agents]:
    """A release of the chart, two GPU nodes, an agent-identity pod on each, a report for each."""
    tag = uuid.uuid4().hex[:6]
    chart.restricted_namespace(cluster, f"adm-{tag}")
    release = chart.install(cluster, chart.new_release_name(), f"adm-{tag}", values)
    # The agents' pods and tokens live in the agents' namespace, which the chart creates.
    namespace = release.agent_namespace
    nodes = (f"adm-{tag}-a", f"adm-{tag}-b")
    cluster.add_nodes([GpuNode(name=n) for n in nodes])
    pods = (f"agent-{tag}-a", f"agent-{tag}-b")
    reports = (f"report-{tag}-a", f"report-{tag}-b")
    cluster.apply(
        [
            chart.pinned_pod(p, namespace, n, release.agent_sa)
            for p, n in zip(pods, nodes, strict=True)
        ]
        + [chart.report(r, n) for r, n in zip(reports, nodes, strict=True)]
    )
    for pod, node in zip(pods, nodes, strict=True):
        wait_for(
            f"kube-scheduler to bind {pod} to {node}",
            functools.partial(_bound_to, cluster, namespace, pod, node),
        )
    try:
        yield Agents(release, namespace, nodes, pods, reports, workdir)
    finally:
        cluster.kubectl("delete", "gpunodereports", *reports, "--wait=false", check=False)
        chart.uninstall(cluster, release)
        cluster.kubectl("delete", "namespace", release.namespace, "--wait=false", check=False)
        for node in nodes:
            cluster.kubectl("delete", "node", node, "--wait=false", check=False)


@pytest.fixture(scope="module")
def agents(
    cluster: Cluster, install_crds: list[str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Agents]:
    with deploy_agents(cluster, tmp_path_factory.mktemp("admission")) as agents:
        # The API server enforces a new policy once its informer has it: wait until a token
        # without a node is refused before any assertion relies on the policy.
        unbound = agents.token_file(
            chart.token_for(cluster, agents.namespace, agents.release.agent_sa), "unbound-probe"
        )
        probe = agents.writer(cluster, unbound, agents.reports[0])

        def enforced() -> bool:
            try:
                probe.patch_status({"message": "probe"})
            except AgentError as exc:
                return agents.release.policy in str(exc)
            return False

        wait_for(f"the API server to enforce {agents.release.policy}", enforced, timeout=30)
        yield agents


def status_of(cluster: Cluster, report: str) -> dict[str, Any]:
    obj = get_json(cluster, "gpunodereport", report)
    assert obj is not None, f"GpuNodeReport {report} is gone"
    status: dict[str, Any] = obj.get("status") or {}
    return status


def test_pod_bound_agent_token_names_its_pods_node_in_claims_and_user_info(
    cluster: Cluster, agents: Agents
) -> None:
    token = chart.token_for(cluster, agents.namespace, agents.release.agent_sa, pod=agents.pods[0])

    claims = chart.jwt_claims(token)
    assert claims["kubernetes.io"]["node"]["name"] == agents.nodes[0]
    assert claims["kubernetes.io"]["pod"]["name"] == agents.pods[0]

    kubeconfig = cluster.token_kubeconfig(token, agents.workdir / "whoami.kubeconfig")
    whoami = cluster.kubectl_as(kubeconfig, "auth", "whoami", "-o", "json")
    assert whoami.returncode == 0, whoami.stderr
    user = json.loads(whoami.stdout)["status"]["userInfo"]
    assert user["username"] == agents.release.user(
        agents.release.agent_sa, agents.release.agent_namespace
    )
    assert user["extra"][NODE_NAME_KEY] == [agents.nodes[0]]


def test_agent_on_node_a_is_refused_node_bs_report_with_the_policys_message(
    cluster: Cluster, agents: Agents
) -> None:
    token = chart.token_for(cluster, agents.namespace, agents.release.agent_sa, pod=agents.pods[0])
    writer = agents.writer(cluster, agents.token_file(token, "a-to-b"), agents.reports[1])
    before = status_of(cluster, agents.reports[1])

    with pytest.raises(AgentError) as refused:
        writer.patch_status({"phase": "Completed", "verdict": "Passed", "message": "forged"})

    message = str(refused.value)
    assert "HTTP 403" in message
    assert f"ValidatingAdmissionPolicy '{agents.release.policy}'" in message
    assert (
        f"gpuval agent on node {agents.nodes[0]} may write only its own node's GpuNodeReport; "
        f"{agents.reports[1]} has spec.node {agents.nodes[1]}"
    ) in message
    assert "check the agent's ServiceAccount role" in message  # a refusal, not a late write
    assert status_of(cluster, agents.reports[1]) == before


def test_agent_on_node_a_writes_node_as_report(cluster: Cluster, agents: Agents) -> None:
    token = chart.token_for(cluster, agents.namespace, agents.release.agent_sa, pod=agents.pods[0])
    writer = agents.writer(cluster, agents.token_file(token, "a-to-a"), agents.reports[0])

    answer = writer.patch_status({"phase": "Running", "message": "burn started"})

    assert answer["status"]["phase"] == "Running"
    assert status_of(cluster, agents.reports[0])["message"] == "burn started"


def test_agent_on_node_b_writes_node_bs_report_and_not_node_as(
    cluster: Cluster, agents: Agents
) -> None:
    token = agents.token_file(
        chart.token_for(cluster, agents.namespace, agents.release.agent_sa, pod=agents.pods[1]),
        "b",
    )

    agents.writer(cluster, token, agents.reports[1]).patch_status({"message": "b was here"})
    with pytest.raises(AgentError, match=f"{agents.reports[0]} has spec.node {agents.nodes[0]}"):
        agents.writer(cluster, token, agents.reports[0]).patch_status({"message": "b forged a"})

    assert status_of(cluster, agents.reports[1])["message"] == "b was here"
    assert status_of(cluster, agents.reports[0]).get("message") != "b forged a"


def test_agent_token_not_bound_to_a_pod_is_refused_for_every_report(
    cluster: Cluster, agents: Agents
) -> None:
    token = chart.token_for(cluster, agents.namespace, agents.release.agent_sa)
    assert "node" not in chart.jwt_claims(token)["kubernetes.io"]
    token_file = agents.token_file(token, "unbound")

    for report in agents.reports:
        with pytest.raises(AgentError, match=r"user info authentication\.kubernetes\.io/node-name"):
            agents.writer(cluster, token_file, report).patch_status({"message": "no node"})


def _legacy_token(cluster: Cluster, namespace: str, secret: str) -> str:
    data = (get_json(cluster, "secret", secret, "-n", namespace) or {}).get("data") or {}
    return base64.b64decode(data["token"]).decode() if "token" in data else ""


def test_long_lived_secret_token_of_the_agent_serviceaccount_is_refused(
    cluster: Cluster, agents: Agents
) -> None:
    """A legacy token Secret for the agent's ServiceAccount (what someone with Secret rights could
    mint on a compromised node) names no node, so it cannot write any report."""
    secret = f"legacy-{uuid.uuid4().hex[:6]}"
    cluster.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "type": "kubernetes.io/service-account-token",
                "metadata": {
                    "name": secret,
                    "namespace": agents.namespace,
                    "annotations": {"kubernetes.io/service-account.name": agents.release.agent_sa},
                },
            }
        ]
    )
    token = wait_for(
        "kube-controller-manager to fill the legacy token Secret",
        functools.partial(_legacy_token, cluster, agents.namespace, secret),
    )
    token_file = agents.token_file(token, "legacy")

    with pytest.raises(AgentError, match=r"user info authentication\.kubernetes\.io/node-name"):
        agents.writer(cluster, token_file, agents.reports[0]).patch_status({"message": "legacy"})


def test_policy_leaves_other_identities_alone_the_operator_writes_any_nodes_report(
    cluster: Cluster, agents: Agents
) -> None:
    # The operator records a node's failure itself when the node's agent could not (design.md),
    # so the policy must not apply to it.
    token = chart.token_for(cluster, agents.release.namespace, agents.release.operator_sa)
    writer = agents.writer(cluster, agents.token_file(token, "operator"), agents.reports[1])

    answer = writer.patch_status({"message": "operator wrote this"})

    assert answer["status"]["message"] == "operator wrote this"


def test_a_late_write_by_the_agent_to_a_report_the_operator_settled_is_refused(
    cluster: Cluster, agents: Agents
) -> None:
    """Issue 34 part 6: the operator settled node A's verdict itself (its agent hung: TimedOut);
    the agent's late write, with the token its kubelet keeps through the termination grace, is
    refused by the API server, while the operator still writes the report."""
    operator_token = chart.token_for(cluster, agents.release.namespace, agents.release.operator_sa)
    operator = agents.writer(
        cluster, agents.token_file(operator_token, "settler"), agents.reports[0]
    )
    agent_token = chart.token_for(
        cluster, agents.namespace, agents.release.agent_sa, pod=agents.pods[0]
    )
    agent = agents.writer(cluster, agents.token_file(agent_token, "late"), agents.reports[0])
    settled = build_operator_failure_status(
        Reason.TIMED_OUT, "agent pod did not finish within 600s", None, datetime.now(UTC)
    )
    operator.patch_status(settled)
    try:
        with pytest.raises(AgentError) as refused:
            agent.patch_status({"phase": "Completed", "verdict": "Passed", "message": "late"})
        after = status_of(cluster, agents.reports[0])
        # The operator itself still writes it (here: the reset before a next attempt, which
        # clears the mark), and the agent of that attempt may write again.
        operator.patch_status(build_reset_status())
        agent.patch_status({"phase": "Running", "message": "next attempt"})
        again = status_of(cluster, agents.reports[0])
    finally:
        operator.patch_status(build_reset_status())

    message = str(refused.value)
    assert "HTTP 403" in message
    # Issue 43 part 8: a late write is said as late, not as a missing permission.
    assert "was settled by the operator before this agent wrote it" in message
    assert "nothing is wrong with permissions" in message and "ServiceAccount" not in message
    assert f"ValidatingAdmissionPolicy '{agents.release.policy}'" in message
    assert (
        f"GpuNodeReport {agents.reports[0]} was settled by the gpuval operator (status.settledBy "
        "operator, verdict Failed TimedOut): its agent may no longer write it"
    ) in message
    assert (after["verdict"], after["reason"], after["settledBy"]) == (
        "Failed",
        "TimedOut",
        "operator",
    )
    assert again["message"] == "next attempt" and "settledBy" not in again


def test_without_the_policy_rbac_alone_lets_an_agent_forge_another_nodes_report(
    cluster: Cluster, install_crds: list[str], tmp_path: Path
) -> None:
    """The negative control: the refusals above come from the policy, not from RBAC."""
    with deploy_agents(cluster, tmp_path, {"agent.admissionPolicy.enabled": False}) as agents:
        assert get_json(cluster, "validatingadmissionpolicy", agents.release.policy) is None
        token = chart.token_for(
            cluster, agents.namespace, agents.release.agent_sa, pod=agents.pods[0]
        )
        writer = agents.writer(cluster, agents.token_file(token, "forge"), agents.reports[1])

        writer.patch_status({"message": "forged by a"})

        assert status_of(cluster, agents.reports[1])["message"] == "forged by a"
