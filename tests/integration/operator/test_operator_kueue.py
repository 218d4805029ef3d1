"""The operator's fabric groups (and agent pods) through Kueue on the real control plane: with
spec.fabric.queue a group's pods are one Kueue pod group, admitted whole under the queue's GPU
quota or not at all. A group the quota cannot hold holds no GPU (every member gated, none on a
node) until the quota frees, then is admitted, meets (the ranks read rank 0's IP from its pod:
the test nodes' pod IPs are loopback addresses, so the address a rank reads is one it can dial)
and is tested. A group never admitted is NotRun at the gang timeout, its pods deleted and its
quota released, no node acted on. Without Kueue, the operator's own gang keeps started members'
GPUs idle while one waits for its GPUs: the figure is measured and printed.

Every wait is bounded and nothing asserts a duration.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from gpuval_api.env import AgentEnv
from gpuval_api.kueue import MANAGED, PodGroup
from gpuval_devtools.controlplane import GPU_RESOURCE, Cluster
from gpuval_devtools.gangidle import gang_idle
from gpuval_devtools.kueue import MANAGED_NAMESPACE_LABEL, Kueue, KueueQueue
from gpuval_devtools.kwoknodes import GpuNode
from gpuval_devtools.launch import AGENT_NAMESPACE, agent_rbac
from gpuval_devtools.simulation import HEALTHY
from gpuval_operator import names
from tests.integration.operator.test_operator_fabric import (
    LOCAL,
    fabric,
    fabric_of,
    fabric_pods,
    holding_gpus,
)
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
from tests.support.kueue import condition, gpu_pod, pods, wait_held_back, wait_placed

pytestmark = pytest.mark.usefixtures("install_crds")

# How long the work keeps one member's GPUs once the group's other members run (no Kueue).
HELD_SECONDS = 15


@pytest.fixture(scope="module")
def kueue_agents(cluster: Cluster, kueue: Kueue, podrunner: Any) -> Iterator[Kueue]:
    """The agents' namespace managed by Kueue, with the agents' rights (their read of its pods
    included, as the chart renders them); afterwards its pods and queues are deleted while Kueue
    still runs, and the namespace is no longer Kueue's."""
    cluster.apply(agent_rbac())
    kueue.opt_in(AGENT_NAMESPACE, timeout=180)
    try:
        yield kueue
    finally:
        kueue.release(AGENT_NAMESPACE)
        cluster.kubectl("label", "namespace", AGENT_NAMESPACE, f"{MANAGED_NAMESPACE_LABEL}-")


def run_id(cluster: Cluster, name: str) -> str:
    found: str = wait_for(
        f"{name}'s run id", lambda: (status_of(cluster, name).get("run") or {}).get("id")
    )
    return found


def group_pods(validation: str, run: str, size: int) -> list[str]:
    return [names.fabric_pod_name(validation, run, "g1", rank) for rank in range(size)]


def local_done(cluster: Cluster, name: str, node: str) -> bool:
    report = by_node(reports_of(cluster, name)).get(node) or {}
    return report.get("phase") == "Completed"


def wait_released(cluster: Cluster, kueue: Kueue, group: str, members: list[str]) -> None:
    """Until the group's pods are gone and with them its Workload: its quota is free."""

    def released() -> bool:
        left = [w for w in kueue.workloads(AGENT_NAMESPACE) if w["metadata"]["name"] == group]
        return not left and not pods(cluster, AGENT_NAMESPACE, members)

    wait_for(f"pod group {group}'s pods and Workload to go", released, timeout=90)


def env_of(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}


def end_as_kubelet(cluster: Cluster, namespace: str, names_: list[str]) -> None:
    """What a kubelet reports when the pods' containers exit 0 (kwok runs nothing)."""
    for name in names_:
        cluster.kubectl(
            "patch",
            "pod",
            name,
            "-n",
            namespace,
            "--subresource=status",
            "--type=merge",
            "-p",
            json.dumps({"status": {"phase": "Succeeded"}}),
        )


@dataclass(frozen=True)
class BusyQueue:
    """A LocalQueue of 24 GPUs, 16 of them taken by other work (a pod group of two) on two
    nodes outside any test's fleet, until `end_work`."""

    kueue: Kueue
    queue: KueueQueue
    work: list[str]


@pytest.fixture
def busy_queue(
    cluster: Cluster, kueue_agents: Kueue, unique_name: Callable[[str], str]
) -> Iterator[BusyQueue]:
    spare = [GpuNode(name=unique_name("spare")) for _ in range(2)]
    cluster.add_nodes(spare)
    queue = kueue_agents.queue(unique_name("fab"), AGENT_NAMESPACE, gpus=24)
    other = PodGroup(queue.name, unique_name("training"), 2)
    work = [f"{other.name}-{i}" for i in range(2)]
    pods_ = [gpu_pod(n, AGENT_NAMESPACE, 8, other) for n in work]
    for pod, node in zip(pods_, spare, strict=True):
        pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node.name}
    cluster.apply(pods_)
    wait_placed(cluster, AGENT_NAMESPACE, work)
    yield BusyQueue(kueue_agents, queue, work)
    for node in spare:
        cluster.kubectl("delete", "node", node.name, "--wait=false", check=False)


def test_a_group_the_quota_cannot_hold_holds_no_gpu_then_is_admitted_and_tested_when_it_frees(
    cluster: Cluster,
    busy_queue: BusyQueue,
    fleet: Fleet,
    operator: Operator,
    unique_name: Callable[[str], str],
) -> None:
    kueue, queue, training = busy_queue.kueue, busy_queue.queue, busy_queue.work
    nodes = [fleet.add(unique_name("k")) for _ in range(3)]
    name = unique_name("kq")
    spec = {
        "maxConcurrent": "100%",
        "checks": LOCAL,
        "fabric": fabric(
            groupSize=3,
            queue=queue.name,
            timeouts={"gangSeconds": 300, "initSeconds": 30, "phaseSeconds": 20},
        ),
    }
    with operator():
        apply(cluster, fleet.validation(name, **spec))
        run = run_id(cluster, name)
        members = group_pods(name, run, 3)
        group = names.fabric_pod_group(name, run, "g1")
        # 24 GPUs asked for, 8 left in the quota: Kueue leaves the whole group waiting.
        pending = wait_held_back(cluster, kueue, AGENT_NAMESPACE, group, members, timeout=180)
        reserved = condition(pending, "QuotaReserved")
        assert reserved is not None and GPU_RESOURCE in reserved["message"]
        held = pods(cluster, AGENT_NAMESPACE, members)
        end_as_kubelet(cluster, AGENT_NAMESPACE, training)  # the other work ends
        admitted = wait_placed(cluster, AGENT_NAMESPACE, members, timeout=120)
        status = completed_run(cluster, name, timeout=240)
        reports = by_node(reports_of(cluster, name, status["run"]["id"]))
        ended = fabric_pods(cluster, name)
        delete_validation(cluster, name)

    assert fabric_of(reports) == {n: ("Passed", None) for n in nodes}
    assert {reports[n]["verdict"] for n in nodes} == {"Passed"}
    assert status["fabric"]["groups"] == 1 and status["fabric"]["groupsDone"] == 1
    # Rank 0 listens; the others were made before it had an address and read it from its pod.
    assert env_of(held[0])[AgentEnv.FABRIC_MASTER].startswith("127.0.0.1:")
    for pod in held[1:]:
        assert env_of(pod)[AgentEnv.FABRIC_MASTER_POD].startswith(f"{members[0]}:")
        assert AgentEnv.FABRIC_MASTER not in env_of(pod)
    assert {p["spec"]["nodeName"] for p in admitted} == set(nodes)
    idle = gang_idle(ended, now=0.0)
    print(f"\nKueue pod group of 3 x 8 GPUs: {idle.gpu_seconds:.0f} GPU-seconds held idle")
    assert idle.formed == 1


def test_a_group_kueue_never_admits_is_not_run_at_the_gang_timeout_and_frees_its_quota(
    cluster: Cluster,
    kueue_agents: Kueue,
    fleet: Fleet,
    operator: Operator,
    unique_name: Callable[[str], str],
) -> None:
    queue = kueue_agents.queue(unique_name("small"), AGENT_NAMESPACE, gpus=16)
    nodes = [fleet.add(unique_name("n")) for _ in range(3)]
    name = unique_name("never")
    spec = {
        "maxConcurrent": "100%",
        "checks": LOCAL,
        # The agent pods go through the same queue, each alone: two at a time fit.
        "agent": {"queue": queue.name},
        "nodeActions": {"taint": {"effect": "NoSchedule"}, "cordon": True},
        "fabric": fabric(
            groupSize=3,
            queue=queue.name,
            timeouts={"gangSeconds": 20, "initSeconds": 20, "phaseSeconds": 20},
        ),
    }
    with operator():
        apply(cluster, fleet.validation(name, **spec))
        run = run_id(cluster, name)
        group = names.fabric_pod_group(name, run, "g1")
        members = group_pods(name, run, 3)
        wait_held_back(cluster, kueue_agents, AGENT_NAMESPACE, group, members, timeout=180)
        status = completed_run(cluster, name, timeout=180)
        reports = by_node(reports_of(cluster, name, status["run"]["id"]))
        node_objs = {n: get_json(cluster, "node", n) for n in nodes}
        local = [p for p in pods_of(cluster, name) if p not in fabric_pods(cluster, name)]
        wait_released(cluster, kueue_agents, group, members)
        delete_validation(cluster, name)

    # The agent pods went through the queue too, each its own Workload.
    assert len(local) == 3
    assert {p["metadata"]["labels"].get(MANAGED) for p in local} == {"true"}

    assert fabric_of(reports) == {n: ("NotRun", "FabricGangNotFormed") for n in nodes}
    message = reports[nodes[0]]["fabric"]["message"]
    assert "Kueue did not admit its pod group" in message and "held a GPU" in message
    assert {(reports[n]["verdict"], reports[n]["reason"]) for n in nodes} == {
        ("NotRun", "FabricGangNotFormed")
    }
    assert status["nodes"]["failed"] == 0
    for node in node_objs.values():
        assert not node["spec"].get("unschedulable")
        assert not any(t["key"] == "gpuval.dev/unhealthy" for t in node["spec"].get("taints") or [])
        assert node["metadata"]["labels"]["gpuval.dev/verdict"] == "not-run"


def test_an_admitted_group_whose_member_cannot_start_is_given_up_and_ends_whole(
    cluster: Cluster,
    kueue_agents: Kueue,
    fleet: Fleet,
    operator: Operator,
    unique_name: Callable[[str], str],
) -> None:
    """Kueue counts quota, not a node's free GPUs: work that bypasses Kueue can still keep one
    admitted member from starting. The gang timeout gives the group up as without Kueue; the
    members that ran are deleted while their agents run, end (the pod runner reports it, as a
    kubelet does), and Kueue then lets the group's pods and its quota go."""
    queue = kueue_agents.queue(unique_name("fits"), AGENT_NAMESPACE, gpus=24)
    ranks = sorted(unique_name("b") for _ in range(3))
    busy, slow_local = ranks[1], ranks[2]
    for node in ranks:
        scale = 1.0 if node == slow_local else HEALTHY["timeScale"]
        fleet.add(node, timeScale=scale)
    name = unique_name("blocked")
    timeouts = {"gangSeconds": 25, "initSeconds": 60, "phaseSeconds": 20}
    spec = {
        "maxConcurrent": "100%",
        "checks": LOCAL,
        "nodeActions": {"taint": {"effect": "NoSchedule"}},
        "fabric": fabric(groupSize=3, queue=queue.name, timeouts=timeouts),
    }
    with operator():
        apply(cluster, fleet.validation(name, **spec))
        run = run_id(cluster, name)
        group, members = names.fabric_pod_group(name, run, "g1"), group_pods(name, run, 3)
        wait_for("the busy node's local checks", lambda: local_done(cluster, name, busy), 120)
        with holding_gpus(cluster, busy, unique_name("training")):
            status = completed_run(cluster, name, timeout=180)
            reports = by_node(reports_of(cluster, name, status["run"]["id"]))
            wait_released(cluster, kueue_agents, group, members)
        delete_validation(cluster, name)

    assert fabric_of(reports) == {n: ("NotRun", "FabricGangNotFormed") for n in ranks}
    assert "the fabric pods of " + busy in reports[busy]["fabric"]["message"]
    assert (reports[busy]["verdict"], reports[busy]["reason"]) == ("NotRun", "FabricGangNotFormed")
    assert {reports[n]["verdict"] for n in ranks if n != busy} == {"Passed"}


def test_without_kueue_started_members_hold_their_gpus_idle_while_one_waits_for_its_gpus(
    cluster: Cluster, fleet: Fleet, operator: Operator, unique_name: Callable[[str], str]
) -> None:
    ranks = sorted(unique_name("w") for _ in range(3))
    busy, slow_local = ranks[1], ranks[2]
    for node in ranks:
        # The last node's local checks take a while: the work takes the busy node's GPUs after
        # its own local checks and before the fabric phase.
        fleet.add(node, timeScale=1.0 if node == slow_local else HEALTHY["timeScale"])
    name = unique_name("idle")
    timeouts = {"gangSeconds": 90, "initSeconds": 80, "phaseSeconds": 20}
    spec = {
        "maxConcurrent": "100%",
        "checks": LOCAL,
        "fabric": fabric(groupSize=3, timeouts=timeouts),
    }
    with operator():
        apply(cluster, fleet.validation(name, **spec))

        wait_for("the busy node's local checks", lambda: local_done(cluster, name, busy), 120)
        with holding_gpus(cluster, busy, unique_name("training")):

            def waiting() -> bool:
                # Rank 0 and rank 2 run, rank 1 (the busy node's) cannot start.
                found = {
                    p["metadata"]["labels"]["gpuval.dev/fabric-rank"]: p
                    for p in fabric_pods(cluster, name)
                }
                return len(found) == 3 and found["1"]["status"].get("phase") == "Pending"

            wait_for("the group's other members to run while one waits", waiting, timeout=120)
            time.sleep(HELD_SECONDS)
        status = completed_run(cluster, name, timeout=180)
        reports = by_node(reports_of(cluster, name, status["run"]["id"]))
        ended = fabric_pods(cluster, name)
        delete_validation(cluster, name)

    assert fabric_of(reports) == {n: ("Passed", None) for n in ranks}
    idle = gang_idle(ended, now=0.0)
    print(
        f"\nwithout Kueue, a group of 3 x 8 GPUs whose rank 1 waited for its GPUs: "
        f"{idle.gpu_seconds:.0f} GPU-seconds held idle by the others"
    )
    assert idle.formed == 1 and idle.gpu_seconds > 0
