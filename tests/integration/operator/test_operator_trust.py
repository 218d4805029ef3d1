"""Safe to leave on (issue 17): a verdict against a node needs evidence against the node. On the
real control plane with simulated nodes: shared GPUs (time-slicing, MPS) as GPU feature discovery
labels them, a node NotReady for a moment or for long, an agent killed from outside with and
without findings; and what a new user saw: a gating validation with no node yet, NodeQueued
Events for many joining nodes, RunCompleted posted twice for one end of a run (and then, issue 34
part 5, never for the end of a run that nodes had reopened).

Every wait is bounded and nothing asserts a duration.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from gpuval_api.env import OperatorEnv
from gpuval_api.gfd import SharingStrategy
from gpuval_devtools.controlplane import KWOK_NODE_ANNOTATION, Cluster
from gpuval_devtools.simulation import HEALTHY, SIMULATE_ANNOTATION
from tests.support.fleet import (
    Fleet,
    Operator,
    apply,
    by_node,
    completed_run,
    delete_validation,
    pods_of,
    reports_of,
    status_of,
)
from tests.support.kube import get_json, wait_for
from tests.support.nodes import QUICK_CHECKS, TAINT_AND_CORDON, node_of, training_job, untouched

pytestmark = pytest.mark.usefixtures("install_crds")


def _events(cluster: Cluster, involved: str) -> list[dict[str, Any]]:
    listed = get_json(
        cluster, "events", "-n", "default", "--field-selector", f"involvedObject.name={involved}"
    )
    return list((listed or {}).get("items", []))


def _report_of(cluster: Cluster, name: str, node: str) -> dict[str, Any]:
    return by_node(reports_of(cluster, name)).get(node) or {}


def _agent_started(cluster: Cluster, name: str, node: str) -> bool:
    return _report_of(cluster, name, node).get("phase") == "Running"


def _set_ready(cluster: Cluster, node: str, ready: bool) -> None:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    condition = {
        "type": "Ready",
        "status": "True" if ready else "False",
        "reason": "KubeletReady" if ready else "KubeletNotReady",
        "message": "kubelet is posting ready status"
        if ready
        else "container runtime network not ready",
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }
    cluster.kubectl(
        "patch",
        "node",
        node,
        "--subresource=status",
        "--type=strategic",
        "-p",
        json.dumps({"status": {"conditions": [condition]}}),
    )


@contextlib.contextmanager
def not_ready(cluster: Cluster, node: str) -> Iterator[None]:
    """The node NotReady as a kubelet reports it, until the block ends. kwok would make it Ready
    again at once (its node-initialize stage), so it leaves the node alone meanwhile; the pod
    runner keeps running the node's agent, as a container outlives its kubelet's silence."""
    cluster.kubectl("annotate", "node", node, f"{KWOK_NODE_ANNOTATION}=off", "--overwrite")
    _set_ready(cluster, node, False)
    try:
        yield
    finally:
        _set_ready(cluster, node, True)
        cluster.kubectl("annotate", "node", node, f"{KWOK_NODE_ANNOTATION}=fake", "--overwrite")


def _heal(cluster: Cluster, node: str) -> None:
    """The node's simulated GPUs healthy from its next agent on (the pod runner reads them)."""
    healthy = json.dumps({**HEALTHY, "faults": []}, separators=(",", ":"))
    cluster.kubectl("annotate", "node", node, f"{SIMULATE_ANNOTATION}={healthy}", "--overwrite")


# -- shared GPUs (part 4) --


def test_a_time_sliced_node_is_validated_by_an_agent_holding_every_replica_of_every_gpu(
    cluster: Cluster, fleet: Fleet, operator: Operator, unique_name: Callable[[str], str]
) -> None:
    node = fleet.add(unique_name("sliced"), sharing=(SharingStrategy.TIME_SLICING, 4))
    name = unique_name("sliced")
    with operator():
        apply(cluster, fleet.validation(name, checks=QUICK_CHECKS, nodeActions=TAINT_AND_CORDON))
        status = completed_run(cluster, name)
        report = by_node(reports_of(cluster, name, status["run"]["id"]))[node]
        [pod] = pods_of(cluster, name)
        state = node_of(cluster, node)
        delete_validation(cluster, name)
    assert state["status"]["capacity"]["nvidia.com/gpu"] == "32"
    container = pod["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "32", "every replica: no tenant"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert (env["GPUVAL_EXPECTED_GPUS"], env["GPUVAL_GPU_REPLICAS"]) == ("8", "4")
    assert pod["metadata"]["annotations"]["gpuval.dev/gpu-sharing"] == "time-slicing/4"
    assert report["verdict"] == "Passed", report.get("message")
    assert report["summary"]["gpuCount"] == 8 and untouched(state)


def test_a_time_sliced_node_whose_replica_a_workload_holds_waits_then_is_not_run_untouched(
    cluster: Cluster, fleet: Fleet, operator: Operator, unique_name: Callable[[str], str]
) -> None:
    node = fleet.add(unique_name("tenant"), sharing=(SharingStrategy.TIME_SLICING, 4))
    name = unique_name("tenant")
    spec = {"nodeTimeoutSeconds": 12, "checks": QUICK_CHECKS, "retry": {"attempts": 1}}
    with training_job(cluster, node, unique_name("inference"), gpus=1), operator():
        apply(cluster, fleet.validation(name, nodeActions=TAINT_AND_CORDON, **spec))
        pending = wait_for(
            "the agent pod to wait for the replicas",
            lambda: [p for p in pods_of(cluster, name) if p["status"].get("phase") == "Pending"],
            timeout=30,
        )
        status = completed_run(cluster, name, timeout=90)
        report = by_node(reports_of(cluster, name, status["run"]["id"]))[node]
        state = node_of(cluster, node)
        delete_validation(cluster, name)
    assert pending, "the node waited, as busy GPUs do"
    assert (report["verdict"], report["reason"]) == ("NotRun", "GpuReplicasHeld")
    assert "time-slicing/4" in report["message"] and "every replica" in report["message"]
    assert status["nodes"]["notRun"] == 1 and status["nodes"]["failed"] == 0
    assert untouched(state)


def test_an_mps_node_is_not_run_at_once_with_its_own_reason_and_no_agent_pod(
    cluster: Cluster, fleet: Fleet, operator: Operator, unique_name: Callable[[str], str]
) -> None:
    node = fleet.add(unique_name("mps"), sharing=(SharingStrategy.MPS, 2))
    name = unique_name("mps")
    with operator():
        apply(cluster, fleet.validation(name, checks=QUICK_CHECKS, nodeActions=TAINT_AND_CORDON))
        status = completed_run(cluster, name)
        report = by_node(reports_of(cluster, name, status["run"]["id"]))[node]
        pods = pods_of(cluster, name)
        state = node_of(cluster, node)
        delete_validation(cluster, name)
    assert (report["verdict"], report["reason"]) == ("NotRun", "GpuSharingUnsupported")
    assert "8 GPUs as 16 mps replicas" in report["message"]
    assert pods == [], "no agent pod for a node no pod can hold a GPU of"
    assert status["notRunNodes"][0]["reason"] == "GpuSharingUnsupported" and untouched(state)
    assert state["metadata"]["labels"]["gpuval.dev/verdict"] == "not-run"


# -- a node NotReady mid-run (part 7) --


def test_a_node_not_ready_for_a_moment_mid_run_is_validated_as_if_nothing_happened(
    cluster: Cluster,
    fleet: Fleet,
    operator: Operator,
    unique_name: Callable[[str], str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(OperatorEnv.NODE_NOT_READY_SECONDS, "60")
    node = fleet.add(unique_name("blip"), timeScale=1.0)
    name = unique_name("blip")
    spec = {"checks": {"burn": {"durationSeconds": 20}}, "nodeActions": TAINT_AND_CORDON}
    with operator():
        apply(cluster, fleet.validation(name, **spec))
        wait_for("the agent to start", lambda: _agent_started(cluster, name, node), timeout=60)
        with not_ready(cluster, node):
            wait_for(
                "the node NotReady",
                lambda: (
                    not any(
                        c["type"] == "Ready" and c["status"] == "True"
                        for c in node_of(cluster, node)["status"]["conditions"]
                    )
                ),
            )
            time.sleep(6)  # several of the operator's ticks and status writes
        status = completed_run(cluster, name, timeout=120)
        report = by_node(reports_of(cluster, name, status["run"]["id"]))[node]
        state = node_of(cluster, node)
        delete_validation(cluster, name)
    assert report["verdict"] == "Passed", report.get("message")
    assert status["nodes"]["passed"] == 1 and status["nodes"]["failed"] == 0
    assert untouched(state)


def test_a_node_not_ready_past_the_grace_is_not_run_untouched_and_tested_again_once_ready(
    cluster: Cluster,
    fleet: Fleet,
    operator: Operator,
    unique_name: Callable[[str], str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(OperatorEnv.NODE_NOT_READY_SECONDS, "5")
    node = fleet.add(unique_name("down"), [{"kind": "hang"}])
    name = unique_name("down")
    spec = {
        "checks": QUICK_CHECKS,
        "nodeActions": TAINT_AND_CORDON,
        "retry": {"attempts": 2, "backoffSeconds": 1},
    }
    with operator():
        apply(cluster, fleet.validation(name, **spec))
        wait_for("the agent to start", lambda: _agent_started(cluster, name, node), timeout=60)
        with not_ready(cluster, node):
            first = wait_for(
                "the node's first attempt to end",
                lambda: (r := _report_of(cluster, name, node)).get("verdict") and r,
                timeout=60,
            )
            during = node_of(cluster, node)
            _heal(cluster, node)
        status = completed_run(cluster, name, timeout=180)
        report = by_node(reports_of(cluster, name, status["run"]["id"]))[node]
        pods = sorted(p["metadata"]["name"] for p in pods_of(cluster, name))
        state = node_of(cluster, node)
        delete_validation(cluster, name)
    assert (first["verdict"], first["reason"]) == ("NotRun", "NodeNotReady")
    assert f"node {node} was NotReady for " in first["message"]
    assert "(KubeletNotReady: container runtime network not ready)" in first["message"]
    assert "deleted" not in first["message"] and "unreachable" not in first["message"]
    assert untouched(during)
    assert report["verdict"] == "Passed" and pods[-1].endswith("-a2"), pods
    assert untouched(state) and state["metadata"]["labels"]["gpuval.dev/verdict"] == "passed"


# -- an agent killed from outside (part 7) --


def _agent_pid(report: str) -> int | None:
    """The pod runner's agent process writing `report` (found by its environment)."""
    wanted = f"GPUVAL_REPORT_NAME={report}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if wanted in (entry / "environ").read_bytes().split(b"\0"):
                return int(entry.name)
    return None


def _report_name(cluster: Cluster, name: str, node: str) -> str:
    for item in reports_of(cluster, name):
        if item["spec"]["node"] == node:
            return str(item["metadata"]["name"])
    return ""


def _kill_agent(cluster: Cluster, name: str, node: str) -> None:
    """SIGKILL the node's agent process, as an outside killer would."""
    report = _report_name(cluster, name, node)
    pid = wait_for(f"{node}'s agent process", partial(_agent_pid, report), timeout=30)
    os.kill(pid, signal.SIGKILL)


def test_an_agent_killed_from_outside_without_findings_is_not_run_untouched_and_retried(
    cluster: Cluster, fleet: Fleet, operator: Operator, unique_name: Callable[[str], str]
) -> None:
    node = fleet.add(unique_name("killed"), [{"kind": "hang"}])  # hangs in the burn
    name = unique_name("killed")
    spec = {
        "checks": QUICK_CHECKS,
        "nodeActions": TAINT_AND_CORDON,
        "retry": {"attempts": 2, "backoffSeconds": 15},
    }
    with operator():
        apply(cluster, fleet.validation(name, **spec))
        wait_for("the agent to start", partial(_agent_started, cluster, name, node), timeout=60)
        _heal(cluster, node)  # its next agent does not hang
        _kill_agent(cluster, name, node)
        first = wait_for(
            "the first attempt to end",
            lambda: (r := _report_of(cluster, name, node)).get("verdict") and r,
            timeout=60,
        )
        [pod] = pods_of(cluster, name)
        during = node_of(cluster, node)
        status = completed_run(cluster, name, timeout=120)
        report = by_node(reports_of(cluster, name, status["run"]["id"]))[node]
        pods = sorted(p["metadata"]["name"] for p in pods_of(cluster, name))
        state = node_of(cluster, node)
        delete_validation(cluster, name)
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 137, "as a kubelet reports a SIGKILL"
    assert (first["verdict"], first["reason"]) == ("NotRun", "AgentKilled"), first
    assert "killed from outside with exit code 137" in first["message"]
    assert first["failures"] == [] and untouched(during)
    # Tried again: the second attempt passes, and nothing was ever done to the node.
    assert report["verdict"] == "Passed" and pods[-1].endswith("-a2"), pods
    assert untouched(state) and state["metadata"]["labels"]["gpuval.dev/verdict"] == "passed"


def test_an_agent_killed_after_its_checks_found_an_xid_fails_its_node_on_the_xid(
    cluster: Cluster, fleet: Fleet, operator: Operator, unique_name: Callable[[str], str]
) -> None:
    # The state check reads XID 79 in the kernel log, then the agent hangs in the burn.
    node = fleet.add(unique_name("xid"), [{"kind": "kernel-xid", "gpu": 2}, {"kind": "hang"}])
    name = unique_name("xid")
    with operator():
        apply(cluster, fleet.validation(name, checks=QUICK_CHECKS, nodeActions=TAINT_AND_CORDON))
        found = wait_for(
            "the XID in the running report",
            lambda: (r := _report_of(cluster, name, node)).get("failures") and r,
            timeout=60,
        )
        _kill_agent(cluster, name, node)
        status = completed_run(cluster, name, timeout=120)
        report = by_node(reports_of(cluster, name, status["run"]["id"]))[node]
        state = node_of(cluster, node)
        delete_validation(cluster, name)
    assert (found["phase"], found["reason"]) == ("Running", "KernelXidReboot")
    assert "still running" in found["message"]
    # What the agent had found before it was killed is evidence: Failed on it, not on the death.
    assert (report["verdict"], report["reason"]) == ("Failed", "KernelXidReboot")
    said = report["message"]
    assert "was killed with exit code 137 after its checks found KernelXidReboot" in said
    assert [f["reason"] for f in report["failures"]] == ["KernelXidReboot"]
    assert not untouched(state), "a failure with evidence takes the actions asked for"


# -- what a new user saw (part 7) --


def test_a_gating_validation_with_no_node_yet_is_pending_waiting_for_nodes(
    cluster: Cluster, fleet: Fleet, operator: Operator, unique_name: Callable[[str], str]
) -> None:
    name = unique_name("empty")
    with operator():
        apply(cluster, fleet.validation(name, gating={"batchSeconds": 1}, checks=QUICK_CHECKS))
        status = completed_run(cluster, name, timeout=60)  # its run over no node is closed
        events = _events(cluster, name)
        delete_validation(cluster, name)
    assert status["phase"] == "Pending"
    succeeded = next(c for c in status["conditions"] if c["type"] == "Succeeded")
    assert (succeeded["status"], succeeded["reason"]) == ("Unknown", "WaitingForNodes")
    assert not any(e["reason"] == "RunCompleted" for e in events), "nothing ran, nothing completed"


def test_joining_nodes_post_bounded_node_queued_events_and_each_end_of_the_run_is_announced_once(
    cluster: Cluster,
    fleet: Fleet,
    operator: Operator,
    unique_name: Callable[[str], str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(OperatorEnv.EVENTS_PER_RUN, "2")
    fleet.add(unique_name("first"))
    name = unique_name("joins")
    with operator():
        apply(cluster, fleet.validation(name, gating={"batchSeconds": 3}, checks=QUICK_CHECKS))
        first = completed_run(cluster, name)
        # In one apply: one batch, so the run reopens once and ends twice.
        fleet.add_many({unique_name("joins"): [] for _ in range(5)})

        def all_joined_and_done() -> dict[str, Any] | None:
            found = status_of(cluster, name)
            done = (found.get("nodes") or {}).get("passed") == 6
            return found if done and (found.get("run") or {}).get("completedAt") else None

        status = wait_for("the joined nodes' verdicts", all_joined_and_done, timeout=150)
        time.sleep(3)  # an extra RunCompleted would be posted by now
        events = _events(cluster, name)
        delete_validation(cluster, name)
    assert status["run"]["id"] == first["run"]["id"], "the nodes joined the same run"
    queued = [e for e in events if e["reason"] == "NodeQueued"]
    summaries = [e["message"] for e in events if e["reason"] == "NodesQueued"]
    assert len(queued) == 2, [e["message"] for e in queued]
    counted = sum(int(m.split(" ", 1)[0]) for m in summaries)
    assert len(queued) + counted == 5, summaries
    assert all("capped at 2 per run (GPUVAL_EVENTS_PER_RUN)" in m for m in summaries)
    completed = [e["message"] for e in events if e["reason"] == "RunCompleted"]
    completed.sort(key=lambda m: " again " in m)  # the first end, then the reopened run's
    run = status["run"]["id"]
    assert len(completed) == 2, completed
    # Each end said once, with its own figures and its time; the second is the budget's last.
    assert re.fullmatch(
        rf"run {run} completed at \S+Z: 1 passed, 0 failed, 0 not tested of 1", completed[0]
    ), completed
    assert re.fullmatch(
        rf"run {run} completed again at \S+Z: 6 passed, 0 failed, 0 not tested of 6; later "
        r"ends of this run are not announced \(GPUVAL_EVENTS_PER_RUN\)",
        completed[1],
    ), completed
