"""The fabric phase on the real control plane: the operator groups the nodes that passed their
local checks, makes each group's fabric pods at once, and the real agents (simulated backend,
run by the pod runner; the others read rank 0's pod for its loopback IP) meet, all-reduce,
narrow a slow group down in pairs and write each node's status.fabric; the operator compares the
run's groups and settles every node's verdict.

Every wait is bounded and nothing asserts a duration.
"""

from __future__ import annotations

import contextlib
import re
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuval_api.evidence import decode_evidence
from gpuval_devtools.controlplane import Cluster, free_port
from gpuval_devtools.launch import operator_process
from gpuval_kubectl.cli import build_parser, show
from gpuval_kubectl.cluster import Cluster as Objects
from gpuval_kubectl.cluster import connect
from gpuval_operator.control import driver
from gpuval_operator.fabric.rollup import NOT_SCHEDULED_YET
from tests.support.fleet import (
    Fleet,
    Operator,
    apply,
    by_node,
    completed_run,
    delete_validation,
    pods_of,
    reports_of,
    scrape,
    status_of,
)
from tests.support.kube import get_json, wait_for
from tests.support.outofservice import watch

pytestmark = pytest.mark.usefixtures("install_crds")

# The simulated backend computes its figures: sizes cost nothing, and at 1 GiB the latency it
# models does not blur a slow node's figures.
FABRIC = {
    "groupSize": 8,
    "minBytes": 1 << 28,
    "maxBytes": 1 << 30,
    "pairBytes": 1 << 30,
    "iterations": 2,
    "timeouts": {"gangSeconds": 30, "initSeconds": 20, "phaseSeconds": 20},
}
LOCAL = {"burn": {"durationSeconds": 1}}
GROUP_LABEL = "gpuval.dev/fabric-group"


def fabric(**overrides: Any) -> dict[str, Any]:
    return {**FABRIC, **overrides}


def fabric_pods(cluster: Cluster, name: str) -> list[dict[str, Any]]:
    return [p for p in pods_of(cluster, name) if GROUP_LABEL in p["metadata"]["labels"]]


def fabric_of(reports: dict[str, dict[str, Any]]) -> dict[str, tuple[str, str | None]]:
    return {n: (s["fabric"]["verdict"], s["fabric"].get("reason")) for n, s in reports.items()}


def test_one_slow_node_of_eight_is_named_and_its_partners_pass(
    cluster: Cluster, fleet: Fleet, operator: Operator, unique_name: Callable[[str], str]
) -> None:
    nodes = [fleet.add(unique_name("f")) for _ in range(7)]
    slow = fleet.add(unique_name("f"), faults=[{"kind": "fabric-slow-node", "factor": 0.5}])
    name = unique_name("fabric")
    with operator() as port:
        actions = {"taint": {"effect": "NoSchedule"}}
        spec = {"maxConcurrent": "100%", "checks": LOCAL, "nodeActions": actions}
        apply(cluster, fleet.validation(name, fabric=fabric(), **spec))
        status = completed_run(cluster, name, timeout=180)
        reports = by_node(reports_of(cluster, name, status["run"]["id"]))
        pods = fabric_pods(cluster, name)
        metrics = scrape(port)
        labels = {n: get_json(cluster, "node", n)["metadata"]["labels"] for n in fleet.nodes}
        delete_validation(cluster, name)

    assert fabric_of(reports) == {
        **{n: ("Passed", None) for n in nodes},
        slow: ("Failed", "FabricSlowNode"),
    }
    # The comparison rewrote what it changed (the slow node's); the passes stand as their agents
    # wrote them.
    assert {n for n, r in reports.items() if r["fabric"].get("classified")} == {slow}
    assert reports[slow]["verdict"] == "Failed" and reports[slow]["reason"] == "FabricSlowNode"
    assert reports[slow]["failures"][0]["check"] == "fabric"
    assert all(reports[n]["verdict"] == "Passed" for n in nodes)
    assert status["nodes"]["failed"] == 1 and status["nodes"]["passed"] == 7
    assert status["failingNodes"][0]["node"] == slow
    summary = status["fabric"]
    assert summary["groups"] == 1 and summary["groupsDone"] == 1
    assert summary["nodes"] == {"total": 8, "pending": 0, "passed": 7, "failed": 1, "notRun": 0}
    assert summary["worstGroups"][0]["reason"] == "FabricSlowNode"
    assert summary["summary"].startswith("7/8 passed, 1 failed")
    assert len(pods) == 8 and {p["metadata"]["labels"][GROUP_LABEL] for p in pods} == {"g1"}
    assert labels[slow]["gpuval.dev/verdict"] == "failed"
    assert {labels[n]["gpuval.dev/verdict"] for n in nodes} == {"passed"}
    assert (
        f'gpuval_node_fabric_failure_info{{node="{slow}",reason="FabricSlowNode",'
        f'validation="{name}"}} 1.0' in metrics
    )
    busbw = f'gpuval_fabric_group_busbw_bytes_per_second{{group="g1",validation="{name}"}}'
    assert busbw in metrics
    # The slow node's evidence: the bundle the operator wrote with its verdict, from what the
    # node's agent (which passed it) kept and what only the run showed; the partners have none.
    assert all("evidence" not in reports[n] for n in nodes)
    evidence = decode_evidence(reports[slow]["evidence"])
    assert (evidence["node"], evidence["reason"], evidence["check"]) == (
        slow,
        "FabricSlowNode",
        "fabric",
    )
    sections = evidence["sections"]
    floor = sections["fabric"]["run"]["pairFloorGBps"]
    assert sections["fabric"]["agent"]["transport"] == "IB/GDRDMA"
    own = [p for p in sections["pairs"] if p["withThisNode"]]
    assert own and all(p["busbwGBps"] < floor for p in own if p["round"] >= 1)
    assert len(sections["pairs"]) > len(own)
    assert "NCCL INFO Using network IB" in sections["ncclLog"]


class SucceededSeen:
    """Every (reason, message) of a validation's Succeeded condition its watch saw."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def apply(self, kind: str, obj: dict[str, Any]) -> None:
        for cond in (obj.get("status") or {}).get("conditions") or []:
            if cond.get("type") == "Succeeded":
                self.seen.append((cond.get("reason", ""), cond.get("message", "")))


def test_the_status_has_every_verdict_while_the_fabrics_node_actions_are_applied(
    cluster: Cluster,
    fleet: Fleet,
    operator: Operator,
    unique_name: Callable[[str], str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The fabric settles its 6 nodes at once; slices of 2 stand in for 10,000 nodes in 500s.
    monkeypatch.setattr(driver, "ACT_SLICE", 2)
    for _ in range(6):
        fleet.add(unique_name("a"))
    name = unique_name("acting")
    seen = SucceededSeen()
    by_name = ["gpuvalidations", "--field-selector", f"metadata.name={name}"]
    with watch(cluster, by_name, seen), operator():
        spec = {"maxConcurrent": "100%", "checks": LOCAL, "fabric": fabric()}
        apply(cluster, fleet.validation(name, **spec))
        status = completed_run(cluster, name, timeout=180)
        done = "the watch to see the run's final condition"
        wait_for(done, lambda: seen.seen and seen.seen[-1][0] == "AllNodesPassed", timeout=30)
        labels = [get_json(cluster, "node", n)["metadata"]["labels"] for n in fleet.nodes]
        delete_validation(cluster, name)
    assert status["nodes"]["passed"] == 6
    acting = [message for reason, message in seen.seen if reason == "ApplyingNodeActions"]
    # Written before the first slice, whatever the status interval: every verdict, none applied.
    assert acting[0] == "6 of 6 nodes have a verdict; node actions applied on 0 of 6"
    prefix = "6 of 6 nodes have a verdict; node actions applied on "
    assert all(m.startswith(prefix) for m in acting)
    reasons = [reason for reason, _ in seen.seen]
    assert reasons.index("ApplyingNodeActions") < reasons.index("AllNodesPassed")
    assert {lab.get("gpuval.dev/verdict") for lab in labels} == {"passed"}


def test_a_slow_link_names_its_two_nodes(
    cluster: Cluster, fleet: Fleet, operator: Operator, unique_name: Callable[[str], str]
) -> None:
    ranks = sorted(unique_name("l") for _ in range(8))
    a, b = ranks[2], ranks[3]  # a pair of the first round
    for node in ranks:
        faults = [{"kind": "fabric-slow-link", "peer": b}] if node == a else []
        fleet.add(node, faults=faults)
    name = unique_name("link")
    with operator():
        apply(cluster, fleet.validation(name, maxConcurrent="100%", checks=LOCAL, fabric=fabric()))
        status = completed_run(cluster, name, timeout=180)
        reports = by_node(reports_of(cluster, name, status["run"]["id"]))
        delete_validation(cluster, name)
    verdicts = fabric_of(reports)
    assert {n: v for n, v in verdicts.items() if v[0] != "Passed"} == {
        a: ("Failed", "FabricSlowLink"),
        b: ("Failed", "FabricSlowLink"),
    }
    assert b in reports[a]["fabric"]["message"] and a in reports[b]["fabric"]["message"]


def test_an_unreachable_rank_0_a_hang_and_a_transport_fallback_each_give_their_reason(
    cluster: Cluster, fleet: Fleet, operator: Operator, unique_name: Callable[[str], str]
) -> None:
    # Three groups of three (name order): g1 whose rank 0 nobody reaches, g2 whose middle node
    # hangs in every collective, g3 whose last node's NCCL falls back to sockets.
    ranks = sorted(unique_name("t") for _ in range(9))
    unreachable, hung, sockets = ranks[0], ranks[4], ranks[8]
    faults = {
        unreachable: [{"kind": "fabric-unreachable"}],
        hung: [{"kind": "fabric-hang"}],
        sockets: [{"kind": "fabric-socket-fallback"}],
    }
    for node in ranks:
        fleet.add(node, faults=faults.get(node, []))
    name = unique_name("faults")
    short = {"gangSeconds": 30, "initSeconds": 8, "phaseSeconds": 5}
    spec = fabric(groupSize=3, expectedTransport="IB", timeouts=short)
    with operator():
        apply(cluster, fleet.validation(name, maxConcurrent="100%", checks=LOCAL, fabric=spec))
        status = completed_run(cluster, name, timeout=240)
        reports = by_node(reports_of(cluster, name, status["run"]["id"]))
        delete_validation(cluster, name)
    verdicts = fabric_of(reports)
    assert {n: v for n, v in verdicts.items() if v[0] == "Failed"} == {
        unreachable: ("Failed", "FabricUnreachable"),
        hung: ("Failed", "NcclTimeout"),
        sockets: ("Failed", "FabricTransportFallback"),
    }
    # g1's other ranks could not reach rank 0: it is named, they are not (their local checks
    # passed, so they pass).
    for node in ranks[1:3]:
        assert verdicts[node] == ("NotRun", "FabricUnreachable")
        assert reports[node]["verdict"] == "Passed"
    assert "could not reach this node's rendezvous" in reports[unreachable]["fabric"]["message"]
    assert "NCCL INFO" in (reports[hung]["fabric"]["result"].get("logTail") or "")
    hung_log = decode_evidence(reports[hung]["evidence"])["sections"]["ncclLog"]
    assert "simulated fabric-hang: the collective never ends" in hung_log
    fallback = decode_evidence(reports[sockets]["evidence"])["sections"]["fabric"]["agent"]
    assert any("via NET/Socket" in line for line in fallback["transportLines"])
    assert reports[sockets]["fabric"]["transport"] == "Socket"
    assert status["nodes"]["failed"] == 3 and status["nodes"]["passed"] == 6


def test_with_a_topology_key_groups_stay_in_their_domain_and_representatives_cross_them(
    cluster: Cluster, fleet: Fleet, operator: Operator, unique_name: Callable[[str], str]
) -> None:
    zone = "topology.gpuval.dev/rack"
    racks = {"rack-a": 6, "rack-b": 6, "rack-c": 4}
    domain = {}
    for rack, count in racks.items():
        for _ in range(count):
            domain[fleet.add(unique_name("z"), labels={zone: rack})] = rack
    name = unique_name("topo")
    with operator():
        spec = fabric(groupSize=4, topologyKey=zone)
        apply(cluster, fleet.validation(name, maxConcurrent="100%", checks=LOCAL, fabric=spec))
        status = completed_run(cluster, name, timeout=240)
        reports = by_node(reports_of(cluster, name, status["run"]["id"]))
        pods = fabric_pods(cluster, name)
        delete_validation(cluster, name)
    members: dict[str, set[str]] = {}
    for p in pods:
        group = p["metadata"]["labels"][GROUP_LABEL]
        members.setdefault(group, set()).add(p["metadata"]["annotations"]["gpuval.dev/node"])
    inside = {g: ns for g, ns in members.items() if g.startswith("g")}
    # Six nodes in groups of at most four: 3 + 3, as even as they can be (never 4 and a pair,
    # which cannot tell a slow node from a slow link); four: one group.
    assert sorted(len(ns) for ns in inside.values()) == [3, 3, 3, 3, 4]
    assert all(len({domain[n] for n in ns}) == 1 for ns in inside.values())
    assert set().union(*inside.values()) == set(fleet.nodes)
    [cross] = [ns for g, ns in members.items() if g.startswith("x")]
    assert sorted(domain[n] for n in cross) == sorted(racks), "one representative per rack"
    # Every representative is in two groups, every other node in one; every node passed.
    assert len(pods) == len(fleet.nodes) + len(racks)
    assert {v for v in fabric_of(reports).values()} == {("Passed", None)}
    assert {reports[n]["fabric"]["group"] for n in cross} == {"x1"}
    assert status["fabric"]["groups"] == 6 and status["fabric"]["nodes"]["passed"] == 16


def test_an_operator_killed_mid_fabric_finishes_it_without_a_second_pod_per_node_and_group(
    cluster: Cluster,
    fleet: Fleet,
    podrunner: Path,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    ranks = sorted(unique_name("k") for _ in range(8))
    slow = ranks[6]  # in the second group of four, which starts after the first
    for node in ranks:
        fleet.add(node, faults=[{"kind": "fabric-slow-node"}] if node == slow else [])
    name = unique_name("killed")
    seen: dict[tuple[str, str], set[str]] = {}
    ports: dict[str, set[str]] = {}

    def record_pods() -> list[dict[str, Any]]:
        pods = fabric_pods(cluster, name)
        for pod in pods:
            meta = meta_of(pod)
            key = (meta["annotations"]["gpuval.dev/node"], meta["labels"][GROUP_LABEL])
            seen.setdefault(key, set()).add(meta["uid"])
            ports.setdefault(key[1], set()).add(meta["annotations"]["gpuval.dev/fabric-port"])
        return pods

    env = {"GPUVAL_POD_GRACE_SECONDS": "3"}
    spec = {"maxConcurrent": 4, "checks": LOCAL, "fabric": fabric(groupSize=4)}
    with operator_process(
        cluster.kubeconfig, metrics_port=free_port(), log_file=tmp_path / "op1.log", extra_env=env
    ) as first:
        apply(cluster, fleet.validation(name, **spec))
        wait_for("the first fabric group's pods", record_pods, timeout=120, interval=0.2)
        first.send_signal(signal.SIGKILL)
        first.wait()
    before = status_of(cluster, name)
    assert before["fabric"]["groupsDone"] < 2, "killed before the fabric phase ended"
    with operator_process(
        cluster.kubeconfig, metrics_port=free_port(), log_file=tmp_path / "op2.log", extra_env=env
    ):

        def finished() -> dict[str, Any] | None:
            record_pods()
            status = status_of(cluster, name)
            return status if (status.get("run") or {}).get("completedAt") else None

        status = wait_for("the resumed run to complete", finished, timeout=240, interval=0.3)
        reports = by_node(reports_of(cluster, name, status["run"]["id"]))
        delete_validation(cluster, name)
        wait_for("the validation to go", lambda: get_json(cluster, "gpuvalidation", name) is None)

    assert status["run"]["id"] == before["run"]["id"]
    # The second operator read the groups back; it planned nothing anew.
    log = (tmp_path / "op2.log").read_text()
    assert f"fabric of run {status['run']['id']} resumed: 2 groups" in log
    assert "groups of up to" not in log
    assert {v for n, v in fabric_of(reports).items() if n != slow} == {("Passed", None)}
    assert fabric_of(reports)[slow] == ("Failed", "FabricSlowNode")
    assert status["nodes"]["failed"] == 1 and status["nodes"]["passed"] == 7
    assert len(seen) == 8, seen
    assert {k: len(v) for k, v in seen.items() if len(v) != 1} == {}, "one pod per node and group"
    assert all(len(p) == 1 for p in ports.values()), f"one rendezvous port per group: {ports}"


def meta_of(pod: dict[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = pod["metadata"]
    return meta


@contextlib.contextmanager
def holding_gpus(cluster: Cluster, node: str, name: str) -> Iterator[None]:
    """A workload bound to `node` holding its 8 GPUs (the scheduler counts it; kwok runs it)."""
    limits = {"nvidia.com/gpu": "8"}
    container = {"name": "train", "image": "example.com/train:1", "resources": {"limits": limits}}
    cluster.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"nodeName": node, "containers": [container]},
            }
        ]
    )
    try:
        yield
    finally:
        cluster.kubectl("delete", "pod", name, "-n", "default", "--wait=false", check=False)


def _waiting_for(cluster: Cluster, name: str, node: str) -> dict[str, Any] | None:
    """The forming group of status.fabric.waiting that waits for `node`'s pod, once it shows
    the scheduler's words about it."""
    for wait in (status_of(cluster, name).get("fabric") or {}).get("waiting") or []:
        for rank in wait.get("waitingFor") or []:
            state = rank["state"]
            # "pending: not scheduled yet" is before the scheduler has said why: not yet.
            if (
                rank["node"] == node
                and state.startswith("pending: ")
                and NOT_SCHEDULED_YET not in state
            ):
                found: dict[str, Any] = wait
                return found
    return None


def test_a_group_that_cannot_form_is_not_run_and_no_node_is_acted_on(
    cluster: Cluster, fleet: Fleet, operator: Operator, unique_name: Callable[[str], str]
) -> None:
    ranks = sorted(unique_name("b") for _ in range(3))
    busy, slow_local = ranks[1], ranks[2]
    for node in ranks:
        # The last node's local checks take a while: the workload takes the busy node's GPUs
        # after its own local checks and before the fabric phase.
        fleet.add(node, **({"timeScale": 1.0} if node == slow_local else {}))
    name = unique_name("gang")
    actions = {"taint": {"effect": "NoSchedule"}, "cordon": True}
    short = {"gangSeconds": 30, "initSeconds": 40, "phaseSeconds": 20}
    spec = {
        "maxConcurrent": "100%",
        "checks": LOCAL,
        "nodeActions": actions,
        "fabric": fabric(groupSize=3, timeouts=short),
    }
    with operator():
        apply(cluster, fleet.validation(name, **spec))

        def busy_done() -> bool:
            report = by_node(reports_of(cluster, name)).get(busy) or {}
            return report.get("phase") == "Completed"

        wait_for("the busy node's local checks", busy_done, timeout=120)
        assert not fabric_pods(cluster, name), "the fabric began before the workload came"
        with holding_gpus(cluster, busy, unique_name("training")):
            # The gang wait shows in the status and in kubectl gpuval status while it lasts.
            waiting = wait_for(
                "the status to show the group waiting for the busy node",
                lambda: _waiting_for(cluster, name, busy),
                timeout=90,
            )
            with connect(str(cluster.kubeconfig)) as api:
                said = show(Objects(api), build_parser().parse_args(["status", name]))
            status = completed_run(cluster, name, timeout=180)
        reports = by_node(reports_of(cluster, name, status["run"]["id"]))
        nodes = {n: get_json(cluster, "node", n) for n in ranks}
        left = [p for p in fabric_pods(cluster, name) if p["status"].get("phase") == "Pending"]
        delete_validation(cluster, name)
    assert left == [], "the group's pods were deleted at the gang timeout"
    assert waiting["nodes"] == 3 and waiting["gangDeadline"]
    [awaited] = [r for r in waiting["waitingFor"] if r["node"] == busy]
    assert awaited["rank"] == 1 and "Insufficient nvidia.com/gpu" in awaited["state"]
    assert {r["node"] for r in waiting["joined"]} <= {ranks[0], ranks[2]}
    assert "Fabric groups forming: 1" in said
    # Rank 1 among the ranks waited for; under load rank 0's pod may not have started either,
    # and is listed first ("waits for rank 0 (...), rank 1 (...)").
    assert re.search(rf"waits for (rank \d \([^)]*\), )*rank 1 \({busy}: pending: ", said), said
    assert "s left of fabric.timeouts.gangSeconds" in said
    assert status["fabric"]["waiting"] == [], "nothing forms any more once the run is done"
    assert {n: v for n, v in fabric_of(reports).items()} == {
        n: ("NotRun", "FabricGangNotFormed") for n in ranks
    }
    assert (reports[busy]["verdict"], reports[busy]["reason"]) == ("NotRun", "FabricGangNotFormed")
    assert "its own pod never started" in reports[busy]["fabric"]["message"]
    assert {reports[n]["verdict"] for n in ranks if n != busy} == {"Passed"}
    assert status["nodes"]["notRun"] == 1 and status["nodes"]["failed"] == 0
    assert status["fabric"]["nodes"]["notRun"] == 3
    for node in nodes.values():
        assert not node["spec"].get("unschedulable")
        assert not any(t["key"] == "gpuval.dev/unhealthy" for t in node["spec"].get("taints") or [])
    assert nodes[busy]["metadata"]["labels"]["gpuval.dev/verdict"] == "not-run"
