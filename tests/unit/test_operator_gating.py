"""Which nodes join the current run: new ones, rebooted ones, ones with another GPU stack."""

from __future__ import annotations

import asyncio
from typing import Any

from gpuval_api.crd import Gating, NodeTrigger
from gpuval_api.result import Verdict
from gpuval_operator.kube.client import ApiError
from gpuval_operator.nodes.entries import entry_key, next_entry
from gpuval_operator.nodes.facts import NodeFacts
from gpuval_operator.nodes.gating import gating_trigger
from gpuval_operator.nodes.watch import NodeWatch
from gpuval_operator.planning import Candidate
from gpuval_operator.run.state import NodeRecord, Phase

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
