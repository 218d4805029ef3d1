"""Fabric groups, representatives, deadlines and the fabric pod: pure planning, no cluster
(gpuval_operator.fabric.plan, .pods)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpuval_api import keys
from gpuval_api.crd import GpuValidationSpec
from gpuval_api.env import AgentEnv
from gpuval_api.fabric import FABRIC_POD_COMMAND, MAX_GROUP, FabricConfig
from gpuval_operator import names
from gpuval_operator.config import OperatorConfig
from gpuval_operator.fabric import plan as fabricplan
from gpuval_operator.fabric.plan import GroupPlan, chunk, cross_groups, domain_groups
from gpuval_operator.fabric.pods import build_fabric_pod, fabric_config


def nodes(count: int, prefix: str = "n") -> list[str]:
    return [f"{prefix}{i:02d}" for i in range(count)]


@pytest.mark.parametrize(
    ("count", "size", "sizes"),
    [
        (16, 8, [8, 8]),
        (17, 8, [6, 6, 5]),
        (19, 8, [7, 6, 6]),
        (250, 8, [8] * 26 + [7] * 6),
        (3, 8, [3]),
        (1, 8, []),
        (2, 2, [2]),
        (3, 2, [3]),
        (5, 2, [2, 3]),
    ],
)
def test_groups_are_as_even_as_they_can_be_and_never_leave_a_pair_or_a_single_node_over(
    count: int, size: int, sizes: list[int]
) -> None:
    groups = chunk(nodes(count), size)
    assert [len(g) for g in groups] == sizes
    if count > 1:
        assert [n for g in groups for n in g] == nodes(count), "in name order, every node once"


def test_a_node_left_over_never_makes_a_group_larger_than_the_largest_allowed() -> None:
    groups = chunk(nodes(MAX_GROUP + 1), MAX_GROUP)
    assert [len(g) for g in groups] == [33, 32]


def test_groups_are_in_name_order_whatever_order_the_nodes_come_in() -> None:
    shuffled = ["c", "a", "e", "b", "d"]
    plans = domain_groups(shuffled, 2)
    assert [p.nodes for p in plans] == [("a", "b"), ("c", "d", "e")]
    assert [p.name for p in plans] == ["g1", "g2"]
    assert domain_groups(list(reversed(shuffled)), 2) == plans


def test_with_a_topology_key_groups_stay_inside_a_domain_and_a_lone_node_gets_a_group_of_one() -> (
    None
):
    domains = {
        "a1": "rack-a",
        "a2": "rack-a",
        "a3": "rack-a",
        "b1": "rack-b",
        "b2": "rack-b",
        "c1": "rack-c",
        "u1": "",
    }
    plans = domain_groups(sorted(domains), 8, domains)
    assert [(p.name, p.nodes, p.domain) for p in plans] == [
        ("g1", ("u1",), ""),
        ("g2", ("a1", "a2", "a3"), "rack-a"),
        ("g3", ("b1", "b2"), "rack-b"),
        ("g4", ("c1",), "rack-c"),
    ]


def test_representatives_passed_their_domain_group_and_cross_domains_in_groups() -> None:
    plans = [
        GroupPlan("g1", ("a1", "a2", "a3"), "rack-a"),
        GroupPlan("g2", ("b1", "b2"), "rack-b"),
        GroupPlan("g3", ("c1",), "rack-c"),
        GroupPlan("g4", ("d1", "d2"), "rack-d"),
    ]
    # a1 failed its domain group: a2 stands for rack-a; nobody of rack-d passed: no one for it.
    reps = fabricplan.representatives(plans, passed={"a2", "a3", "b1", "b2", "c1"})
    assert reps == ["a2", "b1", "c1"]
    assert cross_groups(reps, 8) == [GroupPlan("x1", ("a2", "b1", "c1"), None, cross=True)]
    assert cross_groups(["a2"], 8) == []


def test_a_group_gives_up_before_its_rank_0_stops_waiting_for_the_others() -> None:
    config = FabricConfig.model_validate(
        {"timeouts": {"gangSeconds": 600, "initSeconds": 180, "phaseSeconds": 120}}
    )
    assert fabricplan.gang_deadline(config, 1000.0, None) == 1600.0
    # Rank 0 started at 1100 and waits 180 s: the group is given up 10 s before that.
    assert fabricplan.gang_deadline(config, 1000.0, 1100.0) == 1270.0


def test_a_pod_deadline_covers_the_gang_and_every_phase_of_the_agents() -> None:
    config = FabricConfig.model_validate(
        {"timeouts": {"gangSeconds": 30, "initSeconds": 20, "phaseSeconds": 10}}
    )
    # 8 nodes: two pair rounds and a confirmation; meeting, group start-up and one per round.
    assert fabricplan.agent_seconds(config, 8) == 20 * 5 + 10 * 4 + fabricplan.SLACK_SECONDS
    assert fabricplan.pod_deadline(config, 1000.0, 8) == 1000.0 + 30 + 200


def _spec(**fabric: object) -> GpuValidationSpec:
    return GpuValidationSpec.model_validate(
        {
            "fabric": {"groupSize": 4, "maxBytes": 1 << 24, **fabric},
            "agent": {
                "env": [{"name": "NCCL_SOCKET_IFNAME", "value": "eth1"}],
                "metricsPort": 9400,
            },
        }
    )


def _pod(spec: GpuValidationSpec, rank: int) -> dict[str, Any]:
    return build_fabric_pod(
        validation="v",
        uid="u",
        run="1-aaaa",
        group="g1",
        nodes=("n0", "n1", "n2"),
        rank=rank,
        gpus=8,
        port=20006,
        deadline=1234.5,
        spec=spec,
        config=OperatorConfig(),
    )


def test_the_fabric_pod_is_the_agent_pod_running_the_fabric_with_its_groups_rendezvous() -> None:
    pod = _pod(_spec(), 1)
    meta, spec = pod["metadata"], pod["spec"]
    assert meta["name"] == names.fabric_pod_name("v", "1-aaaa", "g1", 1)
    assert meta["labels"][keys.LABEL_FABRIC_GROUP] == "g1"
    assert meta["labels"][keys.LABEL_FABRIC_RANK] == "1"
    assert meta["labels"][keys.LABEL_NODE] == "n1" and keys.LABEL_ATTEMPT not in meta["labels"]
    assert meta["annotations"] == {keys.ANNOTATION_FABRIC_PORT: "20006", keys.ANNOTATION_NODE: "n1"}
    container = spec["containers"][0]
    assert container["command"] == list(FABRIC_POD_COMMAND)
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert "ports" not in container, "a fabric agent serves no metrics"
    env = {e["name"]: e.get("value") for e in container["env"]}
    # Made before rank 0 has an address: it reads rank 0's pod for it.
    rank0 = names.fabric_pod_name("v", "1-aaaa", "g1", 0)
    assert env[AgentEnv.FABRIC_MASTER_POD] == f"{rank0}:20006"
    assert AgentEnv.FABRIC_MASTER not in env
    assert json.loads(env[AgentEnv.FABRIC_NODES]) == ["n0", "n1", "n2"]
    assert env[AgentEnv.FABRIC_RANK] == "1" and env[AgentEnv.FABRIC_GROUP] == "g1"
    assert env[AgentEnv.REPORT_NAME] == names.report_name("v", "1-aaaa", "n1")
    assert env[AgentEnv.DEADLINE] == "1234"
    assert env["NCCL_SOCKET_IFNAME"] == "eth1"
    # The agent's FabricConfig: the spec's without the operator's own fields.
    config = FabricConfig.model_validate_json(env[AgentEnv.FABRIC_CONFIG])
    assert config == fabric_config(_spec()) and config.max_bytes == 1 << 24
    assert spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ][0]["matchFields"][0]["values"] == ["n1"]
    assert "hostNetwork" not in spec


def test_rank_0_listens_on_its_own_loopback_and_host_network_is_asked_for() -> None:
    pod = _pod(_spec(hostNetwork=True), 0)
    spec = pod["spec"]
    env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
    assert env[AgentEnv.FABRIC_MASTER] == "127.0.0.1:20006"
    assert AgentEnv.FABRIC_MASTER_POD not in env
    assert spec["hostNetwork"] is True and spec["dnsPolicy"] == "ClusterFirstWithHostNet"


def test_a_restart_reads_the_plan_back_in_order_and_a_lone_representative_keeps_its_domain() -> (
    None
):
    domains = {"a1": "rack-a", "a2": "rack-a", "b1": "rack-b", "c1": "rack-c"}
    plan = domain_groups(sorted(domains), 8, domains)
    reps = fabricplan.representatives(plan, passed=set(domains))
    assert reps == ["a1", "b1", "c1"]
    # Reports name each node's latest group: the representatives show x1 by now.
    found = {"g1": ("a1", "a2"), "x1": ("a1", "b1", "c1")}
    rebuilt = fabricplan.rebuilt_groups(found, domains)
    assert [(p.name, p.nodes, p.domain, p.cross) for p in rebuilt] == [
        ("g0-b1", ("b1",), "rack-b", False),
        ("g0-c1", ("c1",), "rack-c", False),
        ("g1", ("a1", "a2"), "rack-a", False),
        ("x1", ("a1", "b1", "c1"), None, True),
    ]
    assert fabricplan.representatives(rebuilt, passed=set(domains)) == reps
    assert fabricplan.rebuilt_groups({"g2": ("c", "d"), "g1": ("a", "b")}, None) == [
        GroupPlan("g1", ("a", "b")),
        GroupPlan("g2", ("c", "d")),
    ]
