"""The fabric phase's pure decisions: which groups open, when rank 0's peers are made, what a
member that ended without a result gets, and how a restart rebuilds the groups from what the
reports and pods say (gpuval_operator.fabric: lifecycle, state, facts, rollup).
No cluster."""

from __future__ import annotations

from typing import Any

from gpuval_api import keys
from gpuval_api.fabric import (
    FabricConfig,
    FabricKey,
    build_fabric_termination_message,
    build_planned_fabric_status,
)
from gpuval_api.reasons import Reason
from gpuval_api.result import Verdict
from gpuval_operator import names
from gpuval_operator.fabric import lifecycle
from gpuval_operator.fabric.facts import FabricFacts
from gpuval_operator.fabric.plan import GroupPlan
from gpuval_operator.fabric.podfacts import FabricPodFacts
from gpuval_operator.fabric.rollup import build_fabric_run_status, group_waits, summary_line
from gpuval_operator.fabric.state import FabricState
from gpuval_operator.fabric.verdicts import Classification, Final, GroupOutcome
from gpuval_operator.run.state import Phase, RunState

RUN = "1-aaaa"
T0 = 1767225600.0
CONFIG = FabricConfig.model_validate(
    {"timeouts": {"gangSeconds": 60, "initSeconds": 40, "phaseSeconds": 20}}
)


def namer(group: str, rank: int) -> str:
    return names.fabric_pod_name("v", RUN, group, rank)


def fabric_run(*plans: GroupPlan) -> FabricState:
    run = FabricState(planned=True, cross_planned=True)
    run.add_groups(list(plans), namer, 0.0, T0)
    return run


def pod(
    group: str,
    rank: int,
    node: str,
    *,
    phase: str = "Running",
    started: bool = True,
    ip: str | None = "10.0.0.1",
    message: str | None = None,
    **extra: Any,
) -> FabricPodFacts:
    state: dict[str, Any] = {}
    if phase in ("Succeeded", "Failed"):
        state = {
            "terminated": {
                "exitCode": 0 if phase == "Succeeded" else 1,
                "startedAt": "2026-01-01T00:00:05Z",
                **({"message": message} if message else {}),
            }
        }
    elif started:
        state = {"running": {"startedAt": "2026-01-01T00:00:05Z"}}
    obj = {
        "metadata": {
            "name": namer(group, rank),
            "labels": {
                keys.LABEL_RUN: RUN,
                keys.LABEL_FABRIC_GROUP: group,
                keys.LABEL_FABRIC_RANK: str(rank),
            },
            "annotations": {keys.ANNOTATION_NODE: node, keys.ANNOTATION_FABRIC_PORT: "20006"},
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": {"nodeName": node},
        "status": {
            "phase": phase,
            "podIP": ip,
            "containerStatuses": [{"name": "agent", "state": state}] if state else [],
        },
    }
    obj["status"].update(extra)
    return FabricPodFacts.parse(obj)


def agent_status(
    group: GroupPlan, node: str, verdict: str = "Passed", **fields: Any
) -> FabricFacts:
    status: dict[str, Any] = {
        **build_planned_fabric_status(group.name, group.nodes, node),
        FabricKey.VERDICT: verdict,
        FabricKey.MESSAGE: "ok",
        FabricKey.BUSBW: 361.0,
        FabricKey.RESULT: {"verdict": verdict, "message": "ok", "pairs": []},
        **fields,
    }
    view = FabricFacts.parse(status)
    assert view is not None
    return view


G1 = GroupPlan("g1", ("a", "b", "c"))
G2 = GroupPlan("g2", ("d", "e"))
G3 = GroupPlan("g3", ("f", "g", "h", "i"))


def test_whole_groups_open_within_the_limit_and_a_larger_group_runs_alone() -> None:
    run = fabric_run(G1, G2, G3)
    assert [g.name for g in lifecycle.groups_to_open(run, 5)] == ["g1", "g2"]
    assert [g.name for g in lifecycle.groups_to_open(run, 2)] == ["g1"]
    run.groups["g1"].opened_at = T0
    assert lifecycle.groups_to_open(run, 2) == [], "3 nodes in fabric pods already"


def test_a_node_in_two_groups_waits_for_the_first() -> None:
    cross = GroupPlan("x1", ("a", "d"), cross=True)
    run = fabric_run(G1, G2, cross)
    run.groups["g1"].opened_at = T0
    assert [g.name for g in lifecycle.groups_to_open(run, 100)] == ["g2"]


def test_rank_0s_peers_left_out_are_made_without_waiting_for_its_pod_ip() -> None:
    run = fabric_run(G1)
    group = run.groups["g1"]
    group.opened_at, group.members[0].requested = T0, True
    run.apply_pod(pod("g1", 0, "a", ip=None), 1.0, T0)
    assert lifecycle.groups_to_launch(run) == [group], "its peers read rank 0's IP themselves"
    for rank, node in ((1, "b"), (2, "c")):
        run.apply_pod(pod("g1", rank, node), 2.0, T0)
    assert lifecycle.groups_to_launch(run) == []


def _launched(run: FabricState, group: str, started: set[int], now_seen: float = T0) -> None:
    found = run.groups[group]
    found.opened_at = T0
    for m in found.members:
        m.requested = True
        run.apply_pod(
            pod(
                group,
                m.rank,
                m.node,
                started=m.rank in started,
                phase="Running" if m.rank in started else "Pending",
            ),
            1.0,
            now_seen,
        )


def test_a_group_whose_pods_do_not_all_start_in_time_did_not_form_blaming_no_one() -> None:
    run = fabric_run(G1)
    _launched(run, "g1", started={0, 1})
    assert lifecycle.due_outcomes(run, CONFIG, now=T0 + 10, monotonic=10, grace=3) == []
    # Rank 0 started at 00:00:05 and waits 40 s: the group is given up 10 s before (T0 + 35).
    outcomes = lifecycle.due_outcomes(run, CONFIG, now=T0 + 36, monotonic=36, grace=3)
    assert [(o.rank, o.result.reason, o.never_started, o.delete_pod) for o in outcomes] == [
        (0, Reason.FABRIC_GANG_NOT_FORMED, False, True),
        (1, Reason.FABRIC_GANG_NOT_FORMED, False, True),
        (2, Reason.FABRIC_GANG_NOT_FORMED, True, True),
    ]
    assert {o.result.verdict for o in outcomes} == {Verdict.NOT_RUN}
    assert "the fabric pods of c did not start" in str(outcomes[0].status[FabricKey.MESSAGE])


def test_the_pods_of_a_given_up_group_are_let_end_before_the_groups_are_compared() -> None:
    """A rank that lost rank 0 may write its own result as its pod stops: the comparison waits
    for the pods the operator deleted to end (or for the limit), so that write lands first."""
    run = fabric_run(G1)
    _launched(run, "g1", started={0, 2})
    for outcome in lifecycle.due_outcomes(run, CONFIG, now=T0 + 36, monotonic=36, grace=3):
        member = run.groups["g1"].members[outcome.rank]
        member.recorded = outcome.result
        if outcome.delete_pod:
            member.deleted_at = 36.0
    assert run.all_done()
    names_ = [namer("g1", r) for r in range(3)]
    assert run.stopping(40.0, 30.0) == names_
    run.apply_pod(pod("g1", 0, "a", phase="Succeeded"), 41.0, T0 + 41)
    run.apply_pod_deleted(pod("g1", 1, "b", started=False, phase="Pending"), 41.5, T0 + 41)
    assert run.stopping(42.0, 30.0) == [names_[2]]
    assert run.stopping(66.0, 30.0) == [], "past the limit: compared without it"


def test_a_group_whose_rank_0_never_starts_is_given_up_at_the_gang_timeout() -> None:
    run = fabric_run(G1)
    group = run.groups["g1"]
    group.opened_at, group.members[0].requested = T0, True
    run.apply_pod(pod("g1", 0, "a", started=False, phase="Pending", ip=None), 1.0, T0)
    assert lifecycle.due_outcomes(run, CONFIG, now=T0 + 59, monotonic=59, grace=3) == []
    outcomes = lifecycle.due_outcomes(run, CONFIG, now=T0 + 60, monotonic=60, grace=3)
    # Only rank 0's pod was made: b and c were never asked to start, and are not blamed for it.
    assert [(o.rank, o.never_started) for o in outcomes] == [(0, True), (1, False), (2, False)]


def test_a_member_that_ended_without_a_report_gets_its_termination_message_after_the_grace() -> (
    None
):
    run = fabric_run(G2)
    _launched(run, "g2", started={0, 1})
    left = {
        **build_planned_fabric_status("g2", G2.nodes, "e"),
        FabricKey.VERDICT: "Failed",
        FabricKey.REASON: "FabricTransportFallback",
        FabricKey.MESSAGE: "sockets",
    }
    run.apply_report("d", agent_status(G2, "d"))
    run.apply_pod(
        pod("g2", 1, "e", phase="Failed", message=build_fabric_termination_message(left)), 5.0, T0
    )
    assert lifecycle.due_outcomes(run, CONFIG, now=T0 + 6, monotonic=6, grace=3) == []
    [outcome] = lifecycle.due_outcomes(run, CONFIG, now=T0 + 8, monotonic=8, grace=3)
    assert outcome.rank == 1 and outcome.result.reason is Reason.FABRIC_TRANSPORT_FALLBACK
    assert outcome.result.by_agent and outcome.status[FabricKey.NODES] == ["d", "e"]
    assert "termination message" in str(outcome.status[FabricKey.MESSAGE])


def test_a_member_without_a_message_failed_and_one_past_its_deadline_timed_out() -> None:
    run = fabric_run(G2)
    _launched(run, "g2", started={0, 1})
    run.apply_pod(pod("g2", 1, "e", phase="Failed"), 5.0, T0)
    [ended] = lifecycle.due_outcomes(run, CONFIG, now=T0 + 10, monotonic=9, grace=3)
    assert (ended.rank, ended.result.reason, ended.result.verdict) == (
        1,
        Reason.POD_FAILED,
        Verdict.FAILED,
    )
    run.groups["g2"].members[1].recorded = ended.result
    # The deadline: the gang timeout and every phase of a 2-node group, from the group's opening.
    late = lifecycle.due_outcomes(
        run, CONFIG, now=T0 + 60 + 40 * 4 + 20 * 3 + 60, monotonic=9, grace=3
    )
    assert [(o.rank, o.result.reason, o.delete_pod) for o in late] == [
        (0, Reason.NCCL_TIMEOUT, True)
    ]


def test_a_member_whose_pod_ended_then_was_deleted_is_judged_on_its_end() -> None:
    # kube-controller-manager deletes the oldest ended pods past its threshold: a member's pod
    # may go before its result is read. Its end decides, after the grace, as for a pod that
    # stayed: not "deleted before it finished".
    stayed, seen_ending, deleted_ended = fabric_run(G2), fabric_run(G2), fabric_run(G2)
    for run in (stayed, seen_ending, deleted_ended):
        _launched(run, "g2", started={0, 1})
    ended = pod("g2", 0, "d", phase="Failed")
    stayed.apply_pod(ended, 5.0, T0 + 5)
    seen_ending.apply_pod(ended, 5.0, T0 + 5)
    seen_ending.apply_pod_deleted(ended, 6.0, T0 + 6)
    deleted_ended.apply_pod_deleted(ended, 5.0, T0 + 5)  # its end seen only in its deletion
    for run in (seen_ending, deleted_ended):
        member = run.groups["g2"].members[0]
        assert not member.gone
        assert lifecycle.due_outcomes(run, CONFIG, now=T0 + 6, monotonic=6.0, grace=3) == []
    [expected] = lifecycle.due_outcomes(stayed, CONFIG, now=T0 + 9, monotonic=9.0, grace=3)
    assert expected.result.reason is not Reason.POD_DELETED
    for run in (seen_ending, deleted_ended):
        [found] = lifecycle.due_outcomes(run, CONFIG, now=T0 + 9, monotonic=9.0, grace=3)
        assert (found.rank, found.result.reason, found.result.verdict) == (
            expected.rank,
            expected.result.reason,
            expected.result.verdict,
        )
        assert found.result.message == expected.result.message


def test_a_member_whose_pod_someone_deleted_is_not_run_and_one_whose_node_went_is_failed() -> None:
    run = fabric_run(G3)
    _launched(run, "g3", started={0, 1, 2, 3})
    run.apply_pod_deleted(pod("g3", 2, "h"), 2.0, T0 + 2)
    outcomes = lifecycle.due_outcomes(
        run, CONFIG, now=T0 + 10, monotonic=9, grace=3, gone={"i": None}
    )
    assert [(o.rank, o.result.reason, o.result.verdict) for o in outcomes] == [
        (2, Reason.POD_DELETED, Verdict.NOT_RUN),
        (3, Reason.NODE_GONE, Verdict.FAILED),
    ]
    assert "node i was deleted while its fabric pod ran" in outcomes[1].result.message


def test_a_member_whose_node_stayed_not_ready_is_not_run_naming_how_long_and_why() -> None:
    run = fabric_run(G3)
    _launched(run, "g3", started={0, 1, 2, 3})
    gone = {"i": (T0 - 200, "NodeStatusUnknown: Kubelet stopped posting node status.")}
    outcomes = lifecycle.due_outcomes(run, CONFIG, now=T0 + 10, monotonic=9, grace=3, gone=gone)
    [(rank, result)] = [(o.rank, o.result) for o in outcomes]
    assert (rank, result.reason, result.verdict) == (3, Reason.NODE_NOT_READY, Verdict.NOT_RUN)
    assert "was NotReady for 210s (NodeStatusUnknown" in result.message


def test_a_member_killed_from_outside_without_a_verdict_is_not_run() -> None:
    run = fabric_run(G3)
    _launched(run, "g3", started={0, 1, 2, 3})
    killed = [{"name": "agent", "state": {"terminated": {"exitCode": 137, "reason": "Error"}}}]
    run.apply_pod(pod("g3", 1, "g", phase="Failed", containerStatuses=killed), 1.0, T0 + 5)
    [outcome] = lifecycle.due_outcomes(run, CONFIG, now=T0 + 10, monotonic=9, grace=3)
    assert (outcome.rank, outcome.result.reason) == (1, Reason.AGENT_KILLED)
    assert outcome.result.verdict is Verdict.NOT_RUN


def test_a_restarted_operator_rebuilds_the_groups_from_the_reports_and_the_pods() -> None:
    plan = GroupPlan("g1", ("a", "b", "c"))
    after = FabricState()
    for node in ("a", "b"):
        after.apply_report(node, agent_status(plan, node))
    after.apply_report("c", FabricFacts.parse(build_planned_fabric_status("g1", plan.nodes, "c")))
    after.apply_pod(pod("g1", 2, "c"), 1.0, T0)
    assert after.planned_groups() == {"g1": ("a", "b", "c")}
    after.add_groups([plan], namer, 2.0, T0)
    group = after.groups["g1"]
    assert group.port == 20006 and group.opened_at is not None
    assert [after.result(group, m) is not None for m in group.members] == [True, True, False]
    assert after.opened(group) and after.created(group.members[2]) and not after.done(group)
    assert after.busbw == {"g1": 361.0}


def test_a_representatives_domain_result_is_known_after_its_report_shows_the_cross_group() -> None:
    domain, cross = GroupPlan("g1", ("a", "b")), GroupPlan("x1", ("a", "z"), cross=True)
    run = fabric_run(domain, cross)
    run.apply_report("b", agent_status(domain, "b"))
    run.apply_report("a", FabricFacts.parse(build_planned_fabric_status("x1", cross.nodes, "a")))
    g1 = run.groups["g1"]
    assert run.done(g1) and run.result(g1, g1.members[0]).verdict is Verdict.PASSED  # type: ignore[union-attr]
    assert not run.done(run.groups["x1"])


def test_nodes_wait_for_the_fabric_until_planned_then_members_until_compared() -> None:
    run = FabricState()
    assert run.wants("a")
    run.planned = True
    run.add_groups([G2], namer, 0.0, T0)
    assert run.wants("d") and not run.wants("a")
    run.classified = True
    assert not run.wants("d")


def test_the_status_lists_counts_the_worst_groups_and_the_slow_ones() -> None:
    run = fabric_run(G1, G2)
    for node in G1.nodes:
        run.apply_report(node, agent_status(G1, node))
    assert summary_line(run) == "1/2 groups done; worst 361.0 GB/s"
    provisional = build_fabric_run_status(run)
    assert provisional["nodes"] == {"total": 5, "pending": 2, "passed": 3, "failed": 0, "notRun": 0}
    run.classification = Classification(
        median_pair=360.0,
        pair_floor=324.0,
        groups=(
            GroupOutcome(
                "g1",
                None,
                G1.nodes,
                361.0,
                320.0,
                False,
                (Final(Verdict.PASSED, None, ""),) * 2
                + (Final(Verdict.FAILED, Reason.FABRIC_SLOW_NODE, "slow"),),
            ),
            GroupOutcome(
                "g2", None, G2.nodes, 200.0, 300.0, True, (Final(Verdict.PASSED, None, ""),) * 2
            ),
        ),
        nodes={
            "a": Final(Verdict.PASSED, None, ""),
            "b": Final(Verdict.PASSED, None, ""),
            "c": Final(Verdict.FAILED, Reason.FABRIC_SLOW_NODE, "slow"),
            "d": Final(Verdict.PASSED, None, ""),
            "e": Final(Verdict.PASSED, None, ""),
        },
    )
    status = build_fabric_run_status(run)
    assert status["nodes"] == {"total": 5, "pending": 0, "passed": 4, "failed": 1, "notRun": 0}
    assert [g["group"] for g in status["worstGroups"]] == ["g1", "g2"]
    assert status["worstGroups"][0]["reason"] == "FabricSlowNode"
    assert "reason" not in status["worstGroups"][1], "no nulls inside a list"
    assert [(g["group"], g["floorGBps"]) for g in status["slowGroups"]] == [("g2", 300.0)]
    assert status["summary"] == "4/5 passed, 1 failed, 1 slow groups; worst 361.0 GB/s"


def test_a_node_that_passed_locally_waits_for_the_fabric_counted_running() -> None:
    run = RunState("v", RUN, 1, 1, "created", T0, fabric=FabricState())
    for node in ("a", "b", "c"):
        run.add(node, 8, f"r-{node}", f"p-{node}")
    run.finish_node("a", Verdict.PASSED, None, "ok")
    run.finish_node("b", Verdict.FAILED, Reason.BURN_MISMATCH, "gpu 3")
    assert run.finished == ["b"], "a failed node's actions need no fabric"
    assert run.nodes["a"].awaiting_fabric and run.counts()["running"] == 1
    assert not run.all_done()
    run.settle_fabric("a", Verdict.FAILED, Reason.FABRIC_SLOW_NODE, "slow in every pair")
    assert run.nodes["a"].phase is Phase.FAILED and run.nodes["a"].reason is Reason.FABRIC_SLOW_NODE
    assert run.finished == ["b", "a"]
    assert run.local_verdicts_in() is False, "c has no local verdict yet"


def test_a_reports_fabric_facts_keep_the_agents_verdict_beside_the_settled_one() -> None:
    status = {
        **build_planned_fabric_status("g1", ["a", "b"], "b"),
        FabricKey.VERDICT: "Passed",
        FabricKey.MESSAGE: "the run does not name it",
        FabricKey.CLASSIFIED: True,
        FabricKey.RESULT: {
            "verdict": "Failed",
            "reason": "FabricSlowNode",
            "message": "slow against its group",
            "pairs": [{"round": 1, "a": "a", "b": "b", "bytes": 1024, "busbwGBps": 12.5}],
        },
    }
    view = FabricFacts.parse(status)
    assert view is not None and view.classified and view.by_agent
    assert (view.verdict, view.raw_verdict) == (Verdict.PASSED, Verdict.FAILED)
    assert view.raw_reason is Reason.FABRIC_SLOW_NODE and view.nodes == ("a", "b")
    assert [p.busbw_gbps for p in view.pairs] == [12.5]
    planned = FabricFacts.parse(build_planned_fabric_status("g1", ["a", "b"], "a"))
    assert planned is not None and planned.planned and planned.rank == 0


def test_a_forming_group_says_who_joined_who_is_awaited_and_why_and_its_gang_deadline() -> None:
    run = fabric_run(G1, G3)
    _launched(run, "g1", started={0})
    unschedulable = [
        {
            "type": "PodScheduled",
            "status": "False",
            "message": "0/9 nodes are available: 1 Insufficient nvidia.com/gpu",
        }
    ]
    waiting = pod("g1", 1, "b", started=False, phase="Pending", conditions=unschedulable)
    waiting.pod.scheduled = False
    run.apply_pod(waiting, 1.0, T0)
    [wait] = group_waits(run, CONFIG)
    assert wait["group"] == "g1" and wait["nodes"] == 3
    assert wait["joined"] == [{"rank": 0, "node": "a", "state": "started"}]
    assert [(r["rank"], r["node"]) for r in wait["waitingFor"]] == [(1, "b"), (2, "c")]
    assert wait["waitingFor"][0]["state"] == (
        "pending: 0/9 nodes are available: 1 Insufficient nvidia.com/gpu"
    )
    assert wait["waitingFor"][1]["state"].startswith("scheduled, its container not started")
    # Rank 0 started at 00:00:05 and waits 40 s less a 10 s margin: given up at 00:00:35.
    assert wait["gangDeadline"] == "2026-01-01T00:00:35Z"
    _launched(run, "g1", started={0, 1, 2})
    assert group_waits(run, CONFIG) == [], "a formed group waits for no one"


def test_the_fabric_is_under_way_from_its_plan_until_its_groups_are_compared() -> None:
    # Its node actions run behind the run's ticks meanwhile (control.driver.RunDriver.act_behind).
    first = GroupPlan("rack-a-g0", ("a0", "a1", "a2"), "rack-a")
    second = GroupPlan("rack-b-g0", ("b0", "b1", "b2"), "rack-b")
    assert not FabricState().under_way()  # not planned: the local checks still run
    fabric = fabric_run(first, second)
    fabric.cross_planned = False
    assert fabric.under_way()
    for group in fabric.groups.values():
        group.opened_at = T0
    fabric.cross_planned = True
    assert fabric.under_way(), "every group opened: their results still to come"
    fabric.classified = True
    assert not fabric.under_way()
