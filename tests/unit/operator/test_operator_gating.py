"""Which nodes join the current run: new ones, rebooted ones, ones with another GPU stack."""

from __future__ import annotations

import asyncio
from typing import Any

from gpuval_api.crd import Gating, NodeTrigger
from gpuval_api.result import Verdict
from gpuval_operator.kube.client import ApiError
from gpuval_operator.nodes.entries import entry_key, next_entry
from gpuval_operator.nodes.facts import NodeFacts
from gpuval_operator.nodes.gating import gating_trigger, queued_events
from gpuval_operator.nodes.watch import NodeWatch
from gpuval_operator.planning import Candidate
from gpuval_operator.run.state import NodeRecord, Phase, RunState

GATING = Gating()


def node_facts(boot: str = "boot-1", driver: str = "580.159.04", **kw: Any) -> NodeFacts:
    tested = kw.pop("tested", None)
    annotations = {}
    if tested is not None:
        annotations[entry_key("v")] = next_entry(
            None, Verdict.PASSED, reason=None, at=1, run="1-a", boot=tested[0], stack=tested[1]
        ).encode()
    node = {
        "metadata": {
            "name": "n1",
            "labels": {"nvidia.com/cuda.driver-version.full": driver},
            "annotations": annotations,
        },
        "spec": {"unschedulable": kw.pop("cordoned", False)},
        "status": {
            "capacity": {"nvidia.com/gpu": "8"},
            "conditions": [
                {"type": "Ready", "status": "True" if kw.pop("ready", True) else "False"}
            ],
            "nodeInfo": {"bootID": boot},
        },
    }
    return NodeFacts.parse(node, "v")


STACK = "cuda.driver-version.full=580.159.04,gpus=8"


def test_a_node_never_validated_joins() -> None:
    assert gating_trigger(node_facts(), GATING, None) is NodeTrigger.JOINED
    assert gating_trigger(node_facts(), Gating(join=False), None) is None


def test_a_new_boot_id_is_a_reboot_and_another_driver_a_stack_change() -> None:
    assert gating_trigger(node_facts(tested=("boot-1", STACK)), GATING, None) is None
    assert gating_trigger(node_facts(boot="boot-2", tested=("boot-1", STACK)), GATING, None) is (
        NodeTrigger.REBOOTED
    )
    upgraded = node_facts(driver="590.10.01", tested=("boot-1", STACK))
    assert gating_trigger(upgraded, GATING, None) is NodeTrigger.STACK_CHANGED
    assert gating_trigger(upgraded, Gating(stack_change=False), None) is None


def test_a_node_that_cannot_take_the_agent_now_or_is_being_validated_waits() -> None:
    assert gating_trigger(node_facts(ready=False), GATING, None) is None
    assert gating_trigger(node_facts(cordoned=True), GATING, None) is None
    running = NodeRecord("n1", 8, "r", "p", phase=Phase.RUNNING)
    assert gating_trigger(node_facts(), GATING, running) is None


def test_the_runs_own_record_counts_before_the_annotation() -> None:
    done = NodeRecord(
        "n1", 8, "r", "p", phase=Phase.PASSED, tested_boot="boot-1", tested_stack=STACK
    )
    assert gating_trigger(node_facts(), GATING, done) is None
    assert gating_trigger(node_facts(boot="boot-9"), GATING, done) is NodeTrigger.REBOOTED


def _watch_with(*nodes: NodeFacts) -> NodeWatch:
    watch = NodeWatch(client=None, validation="v", wake=lambda: None)  # type: ignore[arg-type]
    watch.nodes = {n.name: n for n in nodes}
    return watch


def test_a_run_starts_from_the_node_watchs_facts_once_they_are_listed() -> None:
    ready, held = node_facts(), node_facts(ready=False)
    held.name = "n0"
    watch = _watch_with(ready, held)
    watch.synced.set()
    found = asyncio.run(watch.candidates(wait=0))
    assert found == [Candidate("n1", 8)], "only selectable nodes, in name order"


def test_a_run_lists_the_nodes_itself_when_the_watch_has_not_listed_them_or_was_refused() -> None:
    watch = _watch_with(node_facts())
    assert asyncio.run(watch.candidates(wait=0.3)) is None

    class Refused:
        refused = ApiError(400, "GET", "/api/v1/nodes", {"message": "unable to parse"})

    watch._follower = Refused()  # type: ignore[assignment]
    # Refused: no waiting out the whole limit, the caller's own list says why.
    assert asyncio.run(asyncio.wait_for(watch.candidates(wait=60), 5)) is None


def _node(name: str, ready: bool, since: str = "2026-01-01T00:00:00Z") -> dict[str, Any]:
    condition = {"type": "Ready", "status": "True" if ready else "False"}
    if not ready:
        condition |= {
            "reason": "KubeletNotReady",
            "message": "container runtime is down",
            "lastTransitionTime": since,
        }
    return {
        "metadata": {"name": name},
        "status": {"capacity": {"nvidia.com/gpu": "8"}, "conditions": [condition]},
    }


def _running_run(*nodes: str) -> RunState:
    run = RunState(
        validation="v", run_id="1-a", number=1, generation=1, trigger="created", started_at=0
    )
    for n in nodes:
        run.add(n, 8, f"r-{n}", f"p-{n}").phase = Phase.RUNNING
    return run


def test_a_node_not_ready_tells_the_run_since_when_and_why_and_ready_again_clears_it() -> None:
    watch = NodeWatch(client=None, validation="v", wake=lambda: None)  # type: ignore[arg-type]
    run = _running_run("n1", "n2")
    watch._on_event("MODIFIED", _node("n1", ready=False))
    watch._on_event("DELETED", _node("n2", ready=True))
    watch.mark_gone(run)
    assert run.nodes["n1"].not_ready == (1767225600.0, "KubeletNotReady: container runtime is down")
    assert not run.nodes["n1"].node_gone, "NotReady is not deleted"
    assert run.nodes["n2"].node_gone
    watch._on_event("MODIFIED", _node("n1", ready=True))
    watch.mark_gone(run)
    assert run.nodes["n1"].not_ready is None
    assert "n1" not in watch.gone


def test_a_heartbeat_does_not_wake_the_run_and_a_change_in_what_is_kept_does() -> None:
    woken: list[int] = []
    watch = NodeWatch(client=None, validation="v", wake=lambda: woken.append(1))  # type: ignore[arg-type]
    node = _node("n1", ready=True)
    watch._on_event("ADDED", node)
    assert len(woken) == 1, "a node seen for the first time wakes the run"
    heartbeat = _node("n1", ready=True)
    heartbeat["status"]["conditions"][0]["lastHeartbeatTime"] = "2026-01-01T00:05:00Z"
    heartbeat["metadata"]["resourceVersion"] = "42"
    watch._on_event("MODIFIED", heartbeat)
    assert len(woken) == 1, "a heartbeat changes nothing the run reads"
    watch._on_event("MODIFIED", _node("n1", ready=False))
    assert len(woken) == 2, "NotReady does"
    rebooted = _node("n1", ready=True)
    rebooted["status"]["nodeInfo"] = {"bootID": "boot-2"}
    watch._on_event("MODIFIED", rebooted)
    assert len(woken) == 3, "so does a new boot"
    assert "n1" in watch.changed
    watch._on_event("DELETED", rebooted)
    assert len(woken) == 4, "and a deletion"


def test_unavailable_nodes_are_the_deleted_and_those_not_ready_past_the_grace_only() -> None:
    watch = NodeWatch(client=None, validation="v", wake=lambda: None)  # type: ignore[arg-type]
    for name, ready in (("a", True), ("b", False)):
        watch._on_event("ADDED", _node(name, ready))
    assert watch.unavailable({"a", "b", "c"}, 1767225600.0 + 60, 120) == {}, "not listed yet"
    watch.synced.set()
    assert watch.unavailable({"a", "b", "c"}, 1767225600.0 + 60, 120) == {"c": None}
    late = watch.unavailable({"a", "b", "c"}, 1767225600.0 + 120, 120)
    assert set(late) == {"b", "c"} and late["b"] is not None


def test_nodes_that_join_post_one_event_each_up_to_the_cap_then_one_summary_per_batch() -> None:
    joined = [(f"gpu-{i:03d}", NodeTrigger.JOINED) for i in range(200)]
    joined[150] = ("gpu-150", NodeTrigger.REBOOTED)
    each, summary = queued_events(joined, posted=0, cap=50)
    assert len(each) == 50 and each[0] == "gpu-000 (joined) joins the run"
    assert summary is not None
    assert summary.startswith("150 more nodes join the run (149 joined, 1 rebooted): gpu-050,")
    assert "capped at 50 per run (GPUVAL_EVENTS_PER_RUN)" in summary
    later, rest = queued_events(joined[:3], posted=50, cap=50)
    assert later == [] and rest is not None and rest.startswith("3 more nodes")
    few, none = queued_events(joined[:3], posted=0, cap=50)
    assert len(few) == 3 and none is None
