"""docs/install.md's path on the test cluster's real node, with the images built here: `helm
install` runs the operator image as a real pod (probes pass, non-root, read-only root
filesystem), `helm test` runs as a real pod, and a GpuValidation ends with the real node
validated by the agent image's pod (privileged, in the agents' own namespace; the operator's
enforces Pod Security's restricted level), which writes its report with the ServiceAccount token the
kubelet bound to it, through the admission policy; kwok nodes of the same run keep their pod
runner. Then what only a real pod can show: a container killed from outside leaves its node NotRun
(AgentKilled: no evidence against it) and so does an OOM-killed one (PodOomKilled), an agent the
scheduler preempts for real work is NotRun (AgentPreempted), untouched and tried again, and the
leader replica's pod deleted mid-run hands the Lease to the standby, which finishes the run.

Figures (helm install -> operator Ready, apply -> the real node's verdict) are printed, never
asserted.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuval_agent.errors import AgentError
from gpuval_agent.kube import ApiServer, ReportWriter
from gpuval_devtools.controlplane import Cluster
from gpuval_devtools.realnode import RealNode
from tests.support import chart, real
from tests.support.kube import get_json, wait_for


@pytest.fixture(scope="module")
def release(real_node_cluster: Cluster, install_crds: list[str]) -> Iterator[chart.Release]:
    """The chart installed as docs/install.md says (release `gpuval`), operator on the real
    node; uninstalled at the end so no operator outlives these tests."""
    node = real_node_cluster.real_node
    assert node is not None
    namespace = f"install-{uuid.uuid4().hex[:6]}"
    installed, seconds = real.install_as_documented(real_node_cluster, namespace, node.name)
    print(f"\nhelm install -> operator pod Ready on the real node: {seconds:.1f}s")
    try:
        yield installed
    finally:
        chart.uninstall(real_node_cluster, installed)
        real_node_cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


@pytest.fixture
def pool(
    real_node_cluster: Cluster, real_node: RealNode, unique_name: Callable[[str], str]
) -> Iterator[str]:
    """A pool label value put on the real node for one test."""
    name = unique_name("pool")
    real.pool_label(real_node_cluster, real_node.name, name)
    yield name
    real.pool_label(real_node_cluster, real_node.name, None)


def test_helm_install_runs_the_operator_image_non_root_read_only_and_helm_test_passes(
    real_node_cluster: Cluster, real_node: RealNode, release: chart.Release
) -> None:
    pods = real.operator_pods(real_node_cluster, release.namespace)
    assert len(pods) == 2, "the chart runs two replicas"
    # The operator's namespace enforces Pod Security's restricted level (docs/install.md); only
    # the agents' own namespace, which the chart made, allows privileged pods.
    for namespace, level in (
        (release.namespace, "restricted"),
        (release.agent_namespace, "privileged"),
    ):
        labels = get_json(real_node_cluster, "namespace", namespace)["metadata"]["labels"]
        assert labels["pod-security.kubernetes.io/enforce"] == level, namespace
    leader = wait_for(
        "a replica to hold the leader Lease", lambda: real.leader_pod(real_node_cluster, release)
    )
    assert leader["metadata"]["name"] in {p["metadata"]["name"] for p in pods}
    for pod in pods:  # the standby is as Ready as the leader: /readyz once it read the Lease
        assert pod["spec"]["nodeName"] == real_node.name
        (status,) = pod["status"]["containerStatuses"]
        assert status["ready"] is True and status["restartCount"] == 0
        assert status["image"] == real.OPERATOR_IMAGE
        # Looked at from the host: the container's process runs as 65532 on a read-only root.
        pid = real_node.container_pid(status["containerID"])
        assert real.process_uid(pid) == 65532
        assert "ro" in real.root_mount_options(pid)

    test = chart.helm(
        "test",
        release.name,
        "--namespace",
        release.namespace,
        "--timeout",
        "120s",
        kubeconfig=real_node_cluster.kubeconfig,
        check=False,
    )
    assert test.returncode == 0, test.stdout + test.stderr
    assert "Phase:          Succeeded" in test.stdout


def test_the_real_node_is_validated_by_the_agent_image_and_kwok_nodes_by_the_pod_runner(
    *,
    real_node_cluster: Cluster,
    real_node: RealNode,
    release: chart.Release,
    pool: str,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    cluster = real_node_cluster
    kwok = [unique_name("kw"), unique_name("kw")]
    cluster.add_nodes([chart.pool_node(n, pool) for n in kwok])
    name = unique_name("val")
    try:
        with chart.podrunner(cluster, release.agent_namespace, tmp_path):
            started = time.monotonic()
            cluster.apply([real.validation_of(name, pool)])
            verdict = wait_for(
                "the real node's verdict",
                lambda: _verdict(cluster, name, real_node.name),
                timeout=180,
            )
            print(f"\napply -> the real node's verdict: {time.monotonic() - started:.1f}s")
            status = wait_for("the run to end", lambda: real.completed(cluster, name), timeout=180)
        reports = real.reports_by_node(cluster, name)
        pods = {
            p["spec"]["nodeName"]: p
            for p in real.agent_pods(cluster, release.agent_namespace, name)
        }
        log = real.logs(cluster, release.agent_namespace, pods[real_node.name]["metadata"]["name"])
    finally:
        cluster.kubectl("delete", "gpuvalidation", name, "--wait=false", check=False)
        for node in kwok:
            cluster.kubectl("delete", "node", node, "--wait=false", check=False)

    assert verdict == "Passed", reports[real_node.name]["status"]
    assert status["nodes"]["passed"] == 3, status
    # The real node's agent ran in the agent image's container, to completion, and said so.
    agent = pods[real_node.name]
    (container,) = agent["status"]["containerStatuses"]
    assert container["image"] == real.AGENT_IMAGE
    assert container["state"]["terminated"]["exitCode"] == 0
    assert "gpuval: burn passed" in log, log
    report = reports[real_node.name]["status"]
    assert report["result"]["backend"] == "simulated"
    # The report was completed while that container ran (RFC 3339 UTC strings sort as times).
    ran = container["state"]["terminated"]
    assert ran["startedAt"] <= report["completedAt"] <= ran["finishedAt"], (ran, report)
    # It wrote its report as the chart's agent ServiceAccount, which the admission policy only
    # lets write its own node's report, with the token the kubelet bound to its pod.
    assert agent["spec"]["serviceAccountName"] == release.agent_sa
    for node in kwok:
        assert reports[node]["status"]["verdict"] == "Passed"


def _verdict(cluster: Cluster, validation: str, node: str) -> str:
    report = real.reports_by_node(cluster, validation).get(node) or {}
    return str((report.get("status") or {}).get("verdict") or "")


def _failure(
    cluster: Cluster, validation: str, node: str, key: str = "failingNodes"
) -> tuple[str, str] | None:
    """The node's (reason, message) in the finished run's status list `key`: failingNodes, or
    notRunNodes for what gpuval could not test."""
    status = real.completed(cluster, validation)
    if status is None:
        return None
    for failing in status.get(key) or []:
        if failing["node"] == node:
            return str(failing["reason"]), str(failing.get("message") or "")
    return ("", "")


def test_a_killed_agent_container_is_not_run_untouched_with_exit_code_137_its_token_fenced(
    *,
    real_node_cluster: Cluster,
    real_node: RealNode,
    release: chart.Release,
    pool: str,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    cluster = real_node_cluster
    name = unique_name("kill")
    cluster.apply([real.validation_of(name, pool, burn_seconds=120, time_scale=1.0)])
    try:
        pod = wait_for(
            "the agent pod", lambda: real.agent_pods(cluster, release.agent_namespace, name)
        )[0]
        container = real.running_container(
            cluster, release.agent_namespace, pod["metadata"]["name"]
        )
        _token_writes_only_its_own_nodes_report(cluster, real_node, release, pod, tmp_path)
        os.kill(real_node.container_pid(container), signal.SIGKILL)
        failure = wait_for(
            "the run to end", lambda: _failure(cluster, name, real_node.name, "notRunNodes")
        )
        final = get_json(cluster, "pod", pod["metadata"]["name"], "-n", release.agent_namespace)
        node = get_json(cluster, "node", real_node.name)
    finally:
        cluster.kubectl("delete", "gpuvalidation", name, "--wait=false", check=False)
    terminated = final["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 137 and terminated["reason"] != "OOMKilled"
    # A SIGKILL from outside, with nothing the agent had found failing, is no evidence against
    # the node: NotRun (it would be tried again with spec.retry.attempts > 1), no action.
    reason, message = failure
    assert reason == "AgentKilled", failure
    assert "killed from outside with exit code 137" in message, message
    assert node["metadata"]["labels"].get("gpuval.dev/verdict") != "failed"
    assert not any(t["key"] == "gpuval.dev/unhealthy" for t in node["spec"].get("taints") or [])


def _token_writes_only_its_own_nodes_report(
    cluster: Cluster, node: RealNode, release: chart.Release, pod: dict[str, Any], tmp: Path
) -> None:
    """The token the kubelet projected into the running agent pod carries the real node, and the
    admission policy refuses it a write to another node's report (the agent's own writer)."""
    token = real.projected_token(node, pod["metadata"]["uid"])
    claims = real.token_claims(token)["kubernetes.io"]
    assert claims["node"]["name"] == node.name
    assert claims["pod"]["name"] == pod["metadata"]["name"]
    other = f"other-{uuid.uuid4().hex[:6]}"
    cluster.apply([chart.report(other, "some-other-node")])
    token_file = tmp / "token"
    token_file.write_text(token)
    writer = ReportWriter(ApiServer(cluster.server, token_file, cluster.ca_file), other, budget=0)
    try:
        with pytest.raises(AgentError) as refused:
            writer.patch_status({"phase": "Completed", "verdict": "Passed", "message": "forged"})
    finally:
        cluster.kubectl("delete", "gpunodereport", other, "--wait=false", check=False)
    assert "HTTP 403" in str(refused.value)
    assert f"ValidatingAdmissionPolicy '{release.policy}'" in str(refused.value)


def test_an_oom_killed_agent_leaves_its_node_not_run_as_pod_oom_killed(
    real_node_cluster: Cluster,
    real_node: RealNode,
    release: chart.Release,
    pool: str,
    unique_name: Callable[[str], str],
) -> None:
    cluster = real_node_cluster
    name = unique_name("oom")
    # The agent's interpreter and imports need about 40 MiB; 24 MiB is killed at start.
    memory = {"memory": "24Mi"}
    validation = real.validation_of(
        name,
        pool,
        resources={"limits": memory, "requests": memory},
        retry={"attempts": 2, "backoffSeconds": 0},
    )
    cluster.apply([validation])
    try:
        failure = wait_for(
            "the run to end",
            lambda: _failure(cluster, name, real_node.name, "notRunNodes"),
        )
        pods = real.agent_pods(cluster, release.agent_namespace, name)
        node = get_json(cluster, "node", real_node.name)
    finally:
        cluster.kubectl("delete", "gpuvalidation", name, "--wait=false", check=False)
    # An OOM kill under a limit the spec set is no evidence against the node: NotRun, retried
    # (spec.retry: two attempts), and no failure label or taint.
    assert len(pods) == 2, "NotRun is tried again: spec.retry.attempts"
    for pod in pods:
        terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
        assert terminated["reason"] == "OOMKilled", terminated
    reason, message = failure
    assert reason == "PodOomKilled", failure
    assert "OOM-killed" in message
    assert node["metadata"]["labels"].get("gpuval.dev/verdict") != "failed"
    assert not any(t["key"] == "gpuval.dev/unhealthy" for t in node["spec"].get("taints") or [])


def test_an_agent_preempted_for_real_work_is_not_run_untouched_and_tried_again_once_it_is_done(
    *,
    real_node_cluster: Cluster,
    real_node: RealNode,
    release: chart.Release,
    pool: str,
    unique_name: Callable[[str], str],
) -> None:
    cluster = real_node_cluster
    # The chart's own PriorityClass for agents (agent.priorityClass.create), as it renders it.
    [priority] = chart.render(
        release=release.name,
        namespace=release.namespace,
        values={"agent.priorityClass.create": True},
        show_only=["templates/agent-priorityclass.yaml"],
    )
    cluster.apply([priority])
    name, work = unique_name("yield"), unique_name("train")
    validation = real.validation_of(
        name, pool, burn_seconds=30, time_scale=1.0, retry={"attempts": 2, "backoffSeconds": 20}
    )
    validation["spec"]["agent"]["priorityClassName"] = priority["metadata"]["name"]
    validation["spec"]["nodeActions"] = {"taint": {"effect": "NoSchedule"}, "cordon": True}
    cluster.apply([validation])
    try:
        first = wait_for(
            "the agent pod", lambda: real.agent_pods(cluster, release.agent_namespace, name)
        )[0]
        real.running_container(cluster, release.agent_namespace, first["metadata"]["name"])
        # Real work asks for the node's GPUs, with the default priority (0): the scheduler
        # preempts the agent, which asked for them with the chart's lowest priority.
        cluster.apply([_training(work, release.agent_namespace, real_node.name)])
        preempted = wait_for(
            "the agent's verdict",
            lambda: _verdict_of(cluster, name, real_node.name),
            timeout=120,
        )
        node = get_json(cluster, "node", real_node.name)
        retried = wait_for(
            "the next attempt's pod, waiting for the GPUs the work holds",
            lambda: _attempt(cluster, release, name, 2),
            timeout=120,
        )
        cluster.kubectl("delete", "pod", work, "-n", release.agent_namespace)
        status = wait_for("the run to end", lambda: real.completed(cluster, name), timeout=240)
        final = get_json(cluster, "node", real_node.name)
    finally:
        cluster.kubectl("delete", "gpuvalidation", name, "--wait=false", check=False)
        cluster.kubectl(
            "delete", "pod", work, "-n", release.agent_namespace, "--wait=false", check=False
        )
        cluster.kubectl("delete", "priorityclass", priority["metadata"]["name"], check=False)
    assert first["spec"]["priority"] == -1000000 and first["spec"]["hostPID"] is True
    assert (preempted["verdict"], preempted["reason"]) == ("NotRun", "AgentPreempted"), preempted
    assert "preempted for a pod of higher priority" in preempted["message"]
    assert not any(t["key"] == "gpuval.dev/unhealthy" for t in node["spec"].get("taints") or [])
    assert not node["spec"].get("unschedulable")
    assert node["metadata"]["labels"].get("gpuval.dev/verdict") != "failed"
    assert retried["status"]["phase"] == "Pending", "a waiting agent preempts nothing"
    assert status["nodes"]["passed"] == 1, status
    assert final["metadata"]["labels"]["gpuval.dev/verdict"] == "passed"


def _training(name: str, namespace: str, node: str) -> dict[str, Any]:
    """A workload on the real node that needs all its GPUs (the default priority, 0)."""
    pod = real.script_pod(name, namespace, node, "import time; time.sleep(600)")
    pod["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "8"}}
    pod["spec"]["terminationGracePeriodSeconds"] = 1
    return pod


def _verdict_of(cluster: Cluster, validation: str, node: str) -> dict[str, Any] | None:
    report = real.reports_by_node(cluster, validation).get(node) or {}
    status: dict[str, Any] = report.get("status") or {}
    return status if status.get("verdict") else None


def _attempt(
    cluster: Cluster, release: chart.Release, validation: str, attempt: int
) -> dict[str, Any] | None:
    for pod in real.agent_pods(cluster, release.agent_namespace, validation):
        if pod["metadata"]["labels"].get("gpuval.dev/attempt") == str(attempt):
            found: dict[str, Any] = pod
            return found
    return None


def test_the_leader_pod_deleted_mid_run_hands_over_to_the_standby_which_finishes_the_run_once(
    *,
    real_node_cluster: Cluster,
    real_node: RealNode,
    release: chart.Release,
    pool: str,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    cluster = real_node_cluster
    kwok = [unique_name("kw"), unique_name("kw")]
    cluster.add_nodes([chart.pool_node(n, pool) for n in kwok])
    name = unique_name("restart")
    before = wait_for("the leader", lambda: real.leader_pod(cluster, release))
    try:
        with chart.podrunner(cluster, release.agent_namespace, tmp_path):
            cluster.apply([real.validation_of(name, pool, burn_seconds=20, time_scale=1.0)])
            pod = wait_for(
                "the real node's agent pod",
                lambda: _agent_on(cluster, release, name, real_node.name),
            )
            real.running_container(cluster, release.agent_namespace, pod)
            cluster.kubectl("delete", "pod", before["metadata"]["name"], "-n", release.namespace)
            # The standby takes the Lease once the deleted leader stops renewing it.
            after = wait_for(
                "another replica to hold the Lease",
                lambda: _new_leader(cluster, release, before["metadata"]["name"]),
                timeout=120,
            )
            status = wait_for("the run to end", lambda: real.completed(cluster, name), timeout=240)
        reports = real.reports_by_node(cluster, name)
        pods = real.agent_pods(cluster, release.agent_namespace, name)
    finally:
        cluster.kubectl("delete", "gpuvalidation", name, "--wait=false", check=False)
        for node in kwok:
            cluster.kubectl("delete", "node", node, "--wait=false", check=False)
    assert after["spec"]["nodeName"] == real_node.name
    assert status["nodes"]["total"] == 3 and status["nodes"]["passed"] == 3, status
    assert status["run"]["number"] == 1, "the new operator finished the run, not a new one"
    # Nothing duplicated: one agent pod and one report per node.
    assert sorted(p["spec"]["nodeName"] for p in pods) == sorted([real_node.name, *kwok])
    assert set(reports) == {real_node.name, *kwok}


def _agent_on(cluster: Cluster, release: chart.Release, validation: str, node: str) -> str:
    for pod in real.agent_pods(cluster, release.agent_namespace, validation):
        if pod["spec"].get("nodeName") == node:
            return str(pod["metadata"]["name"])
    return ""


def _new_leader(cluster: Cluster, release: chart.Release, old: str) -> dict[str, Any] | None:
    leader = real.leader_pod(cluster, release)
    return leader if leader is not None and leader["metadata"]["name"] != old else None


WITHOUT_HOME = (
    "import os; os.environ.pop('HOME', None); os.execvp('gpuval-operator', ['gpuval-operator'])"
)


def test_the_operator_image_runs_under_a_uid_without_passwd_entry_and_no_home(
    real_node_cluster: Cluster, real_node: RealNode, release: chart.Release
) -> None:
    """OpenShift's arbitrary UIDs, or any runAsUser the image does not list: a UID without a
    passwd entry, and no HOME (dropped before the exec: the image sets one). The operator
    starts, loads its ServiceAccount and waits as a standby on the release's Lease (issue 34
    part 3: before, kopf's getpass.getuser() raised KeyError and the credentials expanded
    ~/.kube/config)."""
    cluster, name = real_node_cluster, f"anyuid-{uuid.uuid4().hex[:6]}"
    env = chart.operator_env(release)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": release.namespace},
        "spec": {
            "restartPolicy": "Never",
            "serviceAccountName": release.operator_sa,
            "enableServiceLinks": False,
            **real.placed_on(real_node.name),
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 123456,
                "runAsGroup": 123456,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": "operator",
                    "image": real.OPERATOR_IMAGE,
                    "imagePullPolicy": "Never",
                    # The image sets HOME and has no `env`: python3 drops it, then execs.
                    "command": ["python3", "-c", WITHOUT_HOME],
                    "env": [{"name": k, "value": v} for k, v in env.items()],
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "readOnlyRootFilesystem": True,
                        "capabilities": {"drop": ["ALL"]},
                    },
                    "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
                }
            ],
            "volumes": [{"name": "tmp", "emptyDir": {}}],
        },
    }
    cluster.apply([pod])

    def started() -> dict[str, Any] | None:
        found = get_json(cluster, "pod", name, "-n", release.namespace) or {}
        states = [
            s.get("state") or {} for s in found.get("status", {}).get("containerStatuses", [])
        ]
        return found if any("running" in s or "terminated" in s for s in states) else None

    try:
        seen = wait_for("the operator container to start", started, timeout=120)
        (state,) = seen["status"]["containerStatuses"]
        assert "running" in state["state"], (state, real.logs(cluster, release.namespace, name))
        pid = real_node.container_pid(state["containerID"])
        uid = real.process_uid(pid)
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")

        def standby() -> str:
            proc = cluster.kubectl("logs", name, "-n", release.namespace, check=False)
            return proc.stdout if "is standby" in proc.stdout else ""

        log = wait_for("the operator to wait as a standby", standby, timeout=120)
        phase = real.pod_phase(cluster, release.namespace, name)
    finally:
        cluster.kubectl("delete", "pod", name, "-n", release.namespace, "--wait=false")
    assert uid == 123456
    assert not any(v.startswith(b"HOME=") for v in environ), environ
    assert phase == "Running", log
    assert "getpwuid" not in log and "home directory" not in log, log
