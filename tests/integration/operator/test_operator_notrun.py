"""Never blame a node for what gpuval did not do: a node whose GPUs are busy, or whose agent pod
was evicted, is NotRun, untouched by any node action, tried again, and counted apart (issue 12)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest

from gpuval_devtools.controlplane import Cluster
from gpuval_devtools.launch import AGENT_NAMESPACE
from tests.support.fleet import (
    Fleet,
    Operator,
    apply,
    by_node,
    completed_run,
    conditions,
    delete_validation,
    events_of,
    pods_of,
    reports_of,
    scrape,
    status_of,
)
from tests.support.kube import get_json, wait_for
from tests.support.nodes import QUICK_CHECKS, TAINT_AND_CORDON, node_of, training_job, untouched
from tests.support.outofservice import watching

pytestmark = pytest.mark.usefixtures("install_crds")


def test_a_busy_node_is_not_run_untouched_and_validated_on_its_next_attempt_once_free(
    cluster: Cluster, fleet: Fleet, operator: Operator, unique_name: Callable[[str], str]
) -> None:
    node = fleet.add(unique_name("busy"))
    name = unique_name("busy")
    spec = {
        "nodeTimeoutSeconds": 12,
        "checks": QUICK_CHECKS,
        "retry": {"attempts": 2, "backoffSeconds": 2},
        "nodeActions": TAINT_AND_CORDON,
    }
    with training_job(cluster, node, unique_name("training")) as end_training, operator():
        apply(cluster, fleet.validation(name, **spec))
        first = wait_for(
            "the first attempt to end NotRun",
            lambda: next(
                (r for r in reports_of(cluster, name) if (r.get("status") or {}).get("verdict")),
                None,
            ),
            timeout=60,
        )
        after_first = node_of(cluster, node)
        end_training()
        status = completed_run(cluster, name, timeout=90)
        report = by_node(reports_of(cluster, name, status["run"]["id"]))[node]
        pods = sorted(p["metadata"]["name"] for p in pods_of(cluster, name))
        final = node_of(cluster, node)
        delete_validation(cluster, name)

    assert first["status"]["verdict"] == "NotRun"
    assert first["status"]["reason"] == "PodUnschedulable" and first["status"]["failures"] == []
    assert untouched(after_first), after_first["spec"]
    assert report["verdict"] == "Passed" and status["nodes"]["passed"] == 1
    assert pods[-1].endswith("-a2"), pods  # the second attempt, its own pod
    assert final["metadata"]["labels"]["gpuval.dev/verdict"] == "passed" and untouched(final)


def test_a_node_busy_through_every_attempt_ends_not_run_with_no_action_and_its_own_signals(
    cluster: Cluster, fleet: Fleet, operator: Operator, unique_name: Callable[[str], str]
) -> None:
    node = fleet.add(unique_name("held"))
    name = unique_name("held")
    spec = {
        "nodeTimeoutSeconds": 10,
        "checks": QUICK_CHECKS,
        "retry": {"attempts": 2, "backoffSeconds": 1},
        "nodeActions": TAINT_AND_CORDON,
    }
    training = unique_name("training")
    with training_job(cluster, node, training), operator() as port:
        apply(cluster, fleet.validation(name, **spec))
        status = completed_run(cluster, name, timeout=120)
        metrics = scrape(port)
        state = node_of(cluster, node)
        work = get_json(cluster, "pod", training, "-n", "default")
        events = get_json(
            cluster, "events", "-n", "default", "--field-selector", f"involvedObject.name={node}"
        )
        delete_validation(cluster, name)

    assert status["nodes"]["notRun"] == 1 and status["nodes"]["failed"] == 0
    assert status["notRunNodes"][0]["node"] == node
    assert status["notRunNodes"][0]["reason"] == "PodUnschedulable"
    assert status["phase"] == "Succeeded"  # nothing failed: nothing was tested
    assert untouched(state)
    assert state["metadata"]["labels"]["gpuval.dev/verdict"] == "not-run"
    condition = next(c for c in state["status"]["conditions"] if c["type"] == "GpuValidated")
    assert condition["status"] == "Unknown" and condition["reason"] == "NotRun"
    assert (
        f'gpuval_node_not_run_info{{node="{node}",reason="PodUnschedulable",validation="{name}"}}'
        in metrics
    )
    assert f'gpuval_node_passed{{node="{node}"' not in metrics  # never a failure series
    assert any(e["reason"] == "NodeNotRun" for e in events["items"])
    assert work["status"]["phase"] == "Running" and not work["metadata"].get("deletionTimestamp")


def test_an_agent_pod_evicted_leaves_its_node_not_run_and_untouched(
    cluster: Cluster, fleet: Fleet, operator: Operator, unique_name: Callable[[str], str]
) -> None:
    node = fleet.add(unique_name("evict"), faults=[{"kind": "hang"}])
    name = unique_name("evict")
    spec = {"checks": QUICK_CHECKS, "retry": {"attempts": 1}}
    with operator():
        apply(cluster, fleet.validation(name, nodeActions=TAINT_AND_CORDON, **spec))
        pod = wait_for(
            "the agent pod to run",
            lambda: next(
                (
                    p
                    for p in pods_of(cluster, name)
                    if (p.get("status") or {}).get("phase") == "Running"
                ),
                None,
            ),
            timeout=60,
        )
        pod_name = pod["metadata"]["name"]
        eviction = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod_name, "namespace": AGENT_NAMESPACE},
        }
        cluster.kubectl(
            "create",
            "--raw",
            f"/api/v1/namespaces/{AGENT_NAMESPACE}/pods/{pod_name}/eviction",
            "-f",
            "-",
            input=json.dumps(eviction),
        )
        status = completed_run(cluster, name, timeout=90)
        reports = by_node(reports_of(cluster, name, status["run"]["id"]))
        state = node_of(cluster, node)
        delete_validation(cluster, name)
    assert reports[node]["verdict"] == "NotRun" and reports[node]["reason"] == "PodEvicted"
    assert f"agent pod {pod_name} was evicted" in reports[node]["message"]
    assert untouched(state)


def test_a_node_whose_gpu_another_process_uses_is_not_run_naming_it_and_untouched(
    cluster: Cluster, fleet: Fleet, operator: Operator, unique_name: Callable[[str], str]
) -> None:
    # A process outside Kubernetes computes on GPU 3 of the node (what a time-sliced GPU or a
    # host process gives): the in-cluster agent names it and does not test that GPU.
    node = fleet.add(unique_name("shared"), faults=[{"kind": "foreign-compute", "gpu": 3}])
    healthy = fleet.add(unique_name("free"))
    name = unique_name("shared")
    spec = {
        "checks": QUICK_CHECKS,
        "retry": {"attempts": 1},
        "nodeActions": TAINT_AND_CORDON,
    }
    with operator():
        apply(cluster, fleet.validation(name, **spec))
        status = completed_run(cluster, name, timeout=120)
        reports = by_node(reports_of(cluster, name, status["run"]["id"]))
        state = node_of(cluster, node)
        delete_validation(cluster, name)

    report = reports[node]
    assert (report["verdict"], report["reason"]) == ("NotRun", "GpuInUse")
    assert report["message"].startswith("GPU 3 is in use by PID 5000003 (python3 train.py")
    assert report["failures"] == []  # nothing counts against the node
    burn = next(c for c in report["result"]["checks"] if c["name"] == "burn")
    assert burn["verdict"] == "NotRun"
    assert [(o["gpu"], o["pid"], o["when"]) for o in burn["occupants"]] == [(3, 5000003, "before")]
    assert {g["index"] for g in burn["gpus"] if "tflops" in g["metrics"]} == set(range(8)) - {3}
    assert reports[healthy]["verdict"] == "Passed"
    assert status["nodes"]["notRun"] == 1 and status["nodes"]["failed"] == 0
    assert status["notRunNodes"][0] == {
        **status["notRunNodes"][0],
        "node": node,
        "reason": "GpuInUse",
    }
    assert untouched(state)
    assert state["metadata"]["labels"]["gpuval.dev/verdict"] == "not-run"


PSA_ENFORCE = "pod-security.kubernetes.io/enforce"


def test_agent_pods_refused_by_pod_security_blame_no_node_and_the_run_goes_on_once_admitted(
    cluster: Cluster, fleet: Fleet, operator: Operator, unique_name: Callable[[str], str]
) -> None:
    """Issue 34 part 1: with the agents' namespace under Pod Security `restricted`, the API
    server refuses every agent pod. That is the cluster's configuration: no node is tainted or
    cordoned (before, a healthy node of two was tainted PodFailed and cordoned), the run says so
    in one condition naming the namespace and the policy, and once the namespace admits the
    pods again the run goes on and every node gets its verdict."""
    nodes = [fleet.add(unique_name("psa")) for _ in range(2)]
    name = unique_name("psa")
    spec = {"checks": QUICK_CHECKS, "nodeActions": TAINT_AND_CORDON}

    def refused() -> dict[str, Any] | None:
        found = status_of(cluster, name)
        condition = conditions(found).get("AgentPodsRefused") or {}
        waiting = (found.get("nodes") or {}).get("waiting") == 2
        return found if condition.get("status") == "True" and waiting else None

    label = f"{PSA_ENFORCE}=restricted"
    cluster.kubectl("label", "namespace", AGENT_NAMESPACE, label, "--overwrite")
    try:
        with operator(), watching(cluster, f"gpuval-test={fleet.label}") as seen:
            apply(cluster, fleet.validation(name, **spec))
            during = wait_for("the refusal in the status", refused, timeout=90)
            reports = by_node(reports_of(cluster, name))
            nodes_then = [node_of(cluster, n) for n in nodes]
            cluster.kubectl("label", "namespace", AGENT_NAMESPACE, f"{PSA_ENFORCE}-")
            final = completed_run(cluster, name, timeout=180)
            final_reports = by_node(reports_of(cluster, name, final["run"]["id"]))
            nodes_after = [node_of(cluster, n) for n in nodes]
            events = events_of(cluster, name)
            most_out = seen.most_out
            delete_validation(cluster, name)
    finally:
        cluster.kubectl("label", "namespace", AGENT_NAMESPACE, f"{PSA_ENFORCE}-", check=False)

    condition = conditions(during)["AgentPodsRefused"]
    assert condition["reason"] == "PodSecurity", condition
    message = condition["message"]
    assert f"in namespace {AGENT_NAMESPACE}: pods " in message
    assert 'violates PodSecurity "restricted:latest"' in message, "the API server's own words"
    assert message.count("restricted:latest") == 1, "once"
    assert "not the nodes" in message
    # Issue 43 part 7: the refused nodes wait, none has a verdict, and everything says so.
    assert during["nodes"]["waiting"] == 2
    assert (during["nodes"]["notRun"], during["nodes"]["failed"]) == (0, 0)
    assert during["notRunNodes"] == []
    succeeded = conditions(during)["Succeeded"]
    assert succeeded["status"] == "Unknown"
    assert succeeded["message"].startswith("0 of 2 nodes have a verdict; 0 running, 2 waiting")
    for node in nodes:
        report = reports[node]
        assert (report["phase"], report.get("verdict")) == ("Waiting", None), report
        assert report["reason"] == "AgentPodRefused"
        assert 'violates PodSecurity "restricted:latest"' in report["message"]
        assert report["message"].count("restricted:latest") == 1
    assert all(untouched(n) for n in nodes_then)
    assert most_out == 0, "no node was tainted or cordoned at any moment"
    said = [e for e in events if e["reason"] == "AgentPodsRefused"]
    assert len(said) == 1 and said[0]["type"] == "Warning", [e["message"] for e in said]
    # What runs and waits when it was said (the second node's report may come a wave later).
    assert re.search(r"0 run, [12] nodes wait .*, 0 have a verdict", said[0]["message"]), said
    assert not any(e["reason"] in ("NodeFailed", "NodeNotRun") for e in events)
    # The namespace admits them again: the same run goes on and every node gets its verdict.
    assert final["run"]["id"] == during["run"]["id"]
    assert final["nodes"]["passed"] == 2 and final["nodes"]["notRun"] == 0
    assert {final_reports[n]["verdict"] for n in nodes} == {"Passed"}
    assert conditions(final)["AgentPodsRefused"]["status"] == "False"
    assert all(untouched(n) for n in nodes_after)
    assert {n["metadata"]["labels"]["gpuval.dev/verdict"] for n in nodes_after} == {"passed"}


def _quota(cluster: Cluster, name: str, pods: int) -> None:
    """A ResourceQuota on the agents' namespace, once kube-controller-manager has counted its
    use (until then the API server refuses every pod: its usage is unknown)."""
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": name, "namespace": AGENT_NAMESPACE},
        "spec": {"hard": {"pods": str(pods)}},
    }
    cluster.apply([quota])

    def counted() -> bool:
        found = get_json(cluster, "resourcequota", name, "-n", AGENT_NAMESPACE) or {}
        used = (found.get("status") or {}).get("used") or {}
        return used.get("pods") == "0"

    wait_for(f"ResourceQuota {name} counted, no pod in it", counted, timeout=60)


def test_a_quota_of_two_pods_paces_a_wave_of_six_waiting_nodes_are_not_run_and_all_are_tested(
    cluster: Cluster, fleet: Fleet, operator: Operator, unique_name: Callable[[str], str]
) -> None:
    """Issue 43 part 6: a ResourceQuota of 2 pods for a wave of 6. The nodes the quota keeps
    waiting are Waiting, not NotRun, and the Event, the conditions and the counts agree at every
    moment; the operator creates a pod as one of the run's ends, and every node is tested."""
    nodes = [fleet.add(unique_name("quota")) for _ in range(6)]
    name, quota = unique_name("quota"), unique_name("agents")
    spec = {
        "checks": {"burn": {"durationSeconds": 2}},
        "nodeActions": TAINT_AND_CORDON,
        "maxConcurrent": "100%",  # one wave of 6
    }
    seen: list[dict[str, Any]] = []
    waiting_reports: list[dict[str, Any]] = []

    def watch_until_done() -> dict[str, Any] | None:
        found = status_of(cluster, name)
        if found.get("nodes"):
            seen.append(found)
            if found["nodes"].get("waiting") and not waiting_reports:
                waiting_reports.extend(
                    r
                    for r in by_node(reports_of(cluster, name)).values()
                    if r.get("reason") == "AgentPodRefused"
                )
        return found if (found.get("run") or {}).get("completedAt") else None

    _quota(cluster, quota, 2)
    try:
        with operator():
            apply(cluster, fleet.validation(name, **spec))
            final = wait_for("the run's end under the quota", watch_until_done, timeout=240)
            reports = by_node(reports_of(cluster, name, final["run"]["id"]))
            events = events_of(cluster, name)
            delete_validation(cluster, name)
    finally:
        cluster.kubectl(
            "delete", "resourcequota", quota, "-n", AGENT_NAMESPACE, "--wait=false", check=False
        )

    # Waiting is not NotRun, and every count agrees with every other at every moment seen.
    during = [s for s in seen if not (s.get("run") or {}).get("completedAt")]
    assert any(s["nodes"]["waiting"] for s in during), "the quota kept some nodes waiting"
    assert any(s["nodes"]["waiting"] and s["nodes"]["passed"] for s in during), (
        "nodes tested while others wait"
    )
    for status in during:
        counts = status["nodes"]
        assert counts["notRun"] == 0 and status["notRunNodes"] == [], counts
        parts = ("pending", "waiting", "running", "passed", "failed", "notRun")
        assert sum(counts[k] for k in parts) == counts["total"] == 6, counts
        verdicts = counts["passed"] + counts["failed"] + counts["notRun"]
        message = conditions(status)["Succeeded"]["message"]
        assert message.startswith(f"{verdicts} of 6 nodes have a verdict"), (message, counts)
        if counts["waiting"]:
            assert f"{counts['waiting']} waiting" in message, (message, counts)
            refused = conditions(status)["AgentPodsRefused"]
            assert (refused["status"], refused["reason"]) == ("True", "QuotaExceeded"), refused
            assert f"{counts['waiting']} nodes wait" in refused["message"], (refused, counts)
    assert waiting_reports, "a waiting node's report seen"
    for report in waiting_reports:
        assert report["phase"] == "Waiting" and report.get("verdict") is None, report
        assert "exceeded quota" in report["message"]
    said = [e for e in events if e["reason"] == "AgentPodsRefused"]
    assert len(said) == 1, [e["message"] for e in said]
    text = said[0]["message"]
    assert f'ResourceQuota "{quota}" admits 2 agent pods of run' in text, text
    assert "no node is tested" not in text and "not NotRun" in text
    # Every node is tested in the end, in the same run, and the refusal is over.
    assert final["nodes"]["passed"] == 6 and final["nodes"]["waiting"] == 0, final["nodes"]
    assert {reports[n]["verdict"] for n in nodes} == {"Passed"}
    assert {reports[n]["phase"] for n in nodes} == {"Completed"}
    assert conditions(final)["AgentPodsRefused"]["status"] == "False"
    assert conditions(final)["Succeeded"]["reason"] == "AllNodesPassed"
