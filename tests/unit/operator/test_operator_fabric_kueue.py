"""Fabric groups and agent pods through Kueue, the operator's pure side: the pods a queued group
is made of (one pod group, rank 0 named instead of addressed), which members are still to make,
what a group Kueue never admitted gets, and a pod marked for deletion by someone else
(gpuval_operator.fabric.pods, .lifecycle, .state; planning; run.facts, run.state). No cluster.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpuval_api import keys
from gpuval_api.crd import GpuValidationSpec
from gpuval_api.env import AgentEnv
from gpuval_api.fabric import FabricConfig, FabricKey
from gpuval_api.kueue import (
    ADMISSION_GATE,
    POD_GROUP_NAME_LABEL,
    POD_GROUP_TOTAL_COUNT_ANNOTATION,
    QUEUE_NAME_LABEL,
    RETRIABLE_IN_GROUP_ANNOTATION,
)
from gpuval_api.reasons import Reason
from gpuval_api.result import Verdict
from gpuval_operator import names, planning
from gpuval_operator.config import OperatorConfig
from gpuval_operator.fabric import lifecycle
from gpuval_operator.fabric.plan import GroupPlan
from gpuval_operator.fabric.podfacts import FabricPodFacts
from gpuval_operator.fabric.pods import build_fabric_pod
from gpuval_operator.fabric.state import FabricState
from gpuval_operator.podfacts import PodFacts
from gpuval_operator.run.state import NodeRecord, Phase, RunState

RUN = "1-aaaa"
T0 = 1767225600.0
NODES = ("n0", "n1", "n2")
CONFIG = FabricConfig.model_validate(
    {"timeouts": {"gangSeconds": 60, "initSeconds": 40, "phaseSeconds": 20}}
)


def _spec(**fabric: Any) -> GpuValidationSpec:
    return GpuValidationSpec.model_validate({"fabric": {"groupSize": 3, **fabric}})


def _pod(spec: GpuValidationSpec, rank: int) -> dict[str, Any]:
    return build_fabric_pod(
        validation="v",
        uid="u",
        run=RUN,
        group="g1",
        nodes=NODES,
        rank=rank,
        gpus=8,
        port=20006,
        deadline=1234.5,
        spec=spec,
        config=OperatorConfig(),
    )


def _env(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}


def test_a_queued_groups_pods_are_one_kueue_pod_group_never_retried_member_by_member() -> None:
    spec = _spec(queue="gpus")
    pods = [_pod(spec, rank) for rank in range(3)]
    group = names.fabric_pod_group("v", RUN, "g1")
    for pod in pods:
        meta = pod["metadata"]
        assert meta["labels"][QUEUE_NAME_LABEL] == "gpus"
        assert meta["labels"][POD_GROUP_NAME_LABEL] == group
        assert meta["annotations"][POD_GROUP_TOTAL_COUNT_ANNOTATION] == "3"
        assert meta["annotations"][RETRIABLE_IN_GROUP_ANNOTATION] == "false"
        assert meta["annotations"][keys.ANNOTATION_FABRIC_PORT] == "20006"


@pytest.mark.parametrize("queue", ["gpus", None])
def test_rank_0_listens_and_the_others_are_told_its_pod_not_its_address(queue: str | None) -> None:
    pods = [_pod(_spec(queue=queue), rank) for rank in range(3)]
    rank0 = names.fabric_pod_name("v", RUN, "g1", 0)
    assert _env(pods[0])[AgentEnv.FABRIC_MASTER] == "127.0.0.1:20006"
    assert AgentEnv.FABRIC_MASTER_POD not in _env(pods[0])
    for pod in pods[1:]:
        env = _env(pod)
        assert env[AgentEnv.FABRIC_MASTER_POD] == f"{rank0}:20006"
        assert AgentEnv.FABRIC_MASTER not in env


def test_without_a_queue_a_fabric_pod_carries_nothing_of_kueues() -> None:
    pod = _pod(_spec(), 1)
    kueue = {QUEUE_NAME_LABEL, POD_GROUP_NAME_LABEL}
    assert kueue.isdisjoint(pod["metadata"]["labels"])
    assert POD_GROUP_TOTAL_COUNT_ANNOTATION not in pod["metadata"]["annotations"]


def test_a_long_validation_name_still_gives_a_pod_group_name_kueue_takes() -> None:
    group = names.fabric_pod_group("v" * 200, RUN, "x12")
    assert len(group) <= 63 and group != names.fabric_pod_group("v" * 199, RUN, "x12")


def test_an_agent_pod_with_an_agent_queue_is_queued_alone_and_fabric_pods_do_not_inherit_it() -> (
    None
):
    spec = GpuValidationSpec.model_validate({"agent": {"queue": "checks"}, "fabric": {}})
    pod = planning.build_pod(
        validation="v", uid="u", run=RUN, node="n0", gpus=8, spec=spec, config=OperatorConfig()
    )
    labels = pod["metadata"]["labels"]
    assert labels[QUEUE_NAME_LABEL] == "checks" and POD_GROUP_NAME_LABEL not in labels
    assert QUEUE_NAME_LABEL not in _pod(spec, 1)["metadata"]["labels"]


# -- the fabric phase's decisions --


def namer(group: str, rank: int) -> str:
    return names.fabric_pod_name("v", RUN, group, rank)


def fabric_run(plan: GroupPlan) -> FabricState:
    run = FabricState(planned=True, cross_planned=True)
    run.add_groups([plan], namer, 0.0, T0)
    return run


def pod_object(
    group: str, rank: int, node: str, *, gated: bool = False, deleting: bool = False
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": namer(group, rank),
        "labels": {
            keys.LABEL_RUN: RUN,
            keys.LABEL_FABRIC_GROUP: group,
            keys.LABEL_FABRIC_RANK: str(rank),
            QUEUE_NAME_LABEL: "gpus",
        },
        "annotations": {keys.ANNOTATION_NODE: node, keys.ANNOTATION_FABRIC_PORT: "20006"},
        "creationTimestamp": "2026-01-01T00:00:00Z",
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:09Z"
    if gated:
        spec: dict[str, Any] = {"schedulingGates": [{"name": ADMISSION_GATE}]}
        status: dict[str, Any] = {"phase": "Pending"}
    else:
        spec = {"nodeName": node}
        running = {"running": {"startedAt": "2026-01-01T00:00:05Z"}}
        status = {"phase": "Running", "containerStatuses": [{"name": "agent", "state": running}]}
    return {"metadata": meta, "spec": spec, "status": status}


def fabric_pod(group: str, rank: int, node: str, **kw: bool) -> FabricPodFacts:
    return FabricPodFacts.parse(pod_object(group, rank, node, **kw))


G1 = GroupPlan("g1", NODES)


def test_a_group_is_made_whole_even_before_rank_0_has_an_address() -> None:
    run = fabric_run(G1)
    group = run.groups["g1"]
    group.opened_at = T0
    group.members[1].requested = True  # a crash after one member of three was made
    assert lifecycle.groups_to_launch(run) == [group]
    for member in group.members:
        member.requested = True
    assert lifecycle.groups_to_launch(run) == []


def test_a_group_that_has_results_is_never_made_again() -> None:
    run = fabric_run(G1)
    group = run.groups["g1"]
    group.opened_at = T0
    group.members[0].recorded = lifecycle.gang_outcomes(run, group, CONFIG)[0].result
    assert lifecycle.groups_to_launch(run) == []


def test_a_group_kueue_did_not_admit_in_time_is_not_run_saying_no_member_held_a_gpu() -> None:
    run = fabric_run(G1)
    group = run.groups["g1"]
    group.opened_at = T0
    for member in group.members:
        member.requested = True
        run.apply_pod(fabric_pod("g1", member.rank, member.node, gated=True), 1.0, T0)
    assert lifecycle.due_outcomes(run, CONFIG, now=T0 + 59, monotonic=59, grace=3) == []
    outcomes = lifecycle.due_outcomes(run, CONFIG, now=T0 + 60, monotonic=60, grace=3)
    assert [(o.rank, o.result.reason, o.delete_pod) for o in outcomes] == [
        (0, Reason.FABRIC_GANG_NOT_FORMED, True),
        (1, Reason.FABRIC_GANG_NOT_FORMED, True),
        (2, Reason.FABRIC_GANG_NOT_FORMED, True),
    ]
    assert {o.result.verdict for o in outcomes} == {Verdict.NOT_RUN}
    message = str(outcomes[0].status[FabricKey.MESSAGE])
    assert "Kueue did not admit its pod group within 60s" in message
    assert "none of its pods held a GPU" in message


def test_a_gated_pod_says_it_waits_for_kueue() -> None:
    facts = PodFacts.parse(pod_object("g1", 0, "n0", gated=True))
    assert facts.gated and not facts.scheduled
    assert facts.unschedulable == "Kueue has not admitted it from LocalQueue gpus (quota)"
    assert not PodFacts.parse(pod_object("g1", 0, "n0")).gated


def test_a_member_someone_marked_for_deletion_is_gone_though_its_pod_is_still_there() -> None:
    run = fabric_run(G1)
    group = run.groups["g1"]
    group.opened_at = T0
    for member in group.members:
        member.requested = True
        run.apply_pod(fabric_pod("g1", member.rank, member.node), 1.0, T0)
    group.members[2].deleted_at = 0.0
    run.apply_pod(fabric_pod("g1", 1, "n1", deleting=True), 2.0, T0)
    run.apply_pod(fabric_pod("g1", 2, "n2", deleting=True), 2.0, T0)
    assert [m.gone for m in group.members] == [False, True, False]
    [outcome] = lifecycle.due_outcomes(run, CONFIG, now=T0 + 10, monotonic=9, grace=3)
    assert (outcome.rank, outcome.result.reason) == (1, Reason.POD_DELETED)


def test_an_agent_pod_someone_marked_for_deletion_is_gone_at_once() -> None:
    run = RunState("v", RUN, 1, 1, "Created", T0)
    run.nodes["n0"] = NodeRecord(node="n0", gpus=8, report="r", pod="p", phase=Phase.RUNNING)
    obj = pod_object("g1", 0, "n0", deleting=True)
    obj["metadata"]["name"] = "p"
    run.apply_pod(PodFacts.parse(obj), 1.0)
    assert run.nodes["n0"].pod_gone
