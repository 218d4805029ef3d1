"""The circuit breaker on node actions and the systemic hold (gpuval_operator.nodes.breaker.rules,
run.breakerstate, gpuval_api.release): which failing node may be taken out of service, counted
from the nodes, and what the validation's conditions say about the rest."""

from __future__ import annotations

from typing import Any

import pytest

from gpuval_api import keys
from gpuval_api.conditions import ConditionReason as R
from gpuval_api.conditions import ConditionType
from gpuval_api.release import Release
from gpuval_api.result import Verdict
from gpuval_operator.nodes.breaker.rules import (
    Limits,
    OutOfServiceNode,
    Tally,
    admit,
    never_in_service,
    systemic,
    to_retry,
    undecided,
)
from gpuval_operator.nodes.entries import NodeEntry, entry_key, next_entry
from gpuval_operator.run.breakerstate import (
    BreakerState,
    SystemicFailure,
    as_of,
    held_condition,
    systemic_condition,
    systemic_event,
)

LIMITS = Limits(validation=2, operator=3)


def out(name: str, **by: int) -> OutOfServiceNode:
    return OutOfServiceNode(name, by)


def tally(*nodes: OutOfServiceNode, reserved: dict[str, set[str]] | None = None) -> Tally:
    return Tally({n.name: n for n in nodes}, reserved or {})


def failed(**kw: Any) -> NodeEntry:
    fields: dict[str, Any] = {"reason": "LowThroughput", "at": 100, "run": "1-a"} | kw
    return next_entry(None, Verdict.FAILED, **fields)


def listed(name: str, entries: dict[str, NodeEntry], label: bool = True) -> dict[str, Any]:
    labels = {keys.NODE_LABEL_OUT_OF_SERVICE: "true"} if label else {}
    annotations = {entry_key(v): e.encode() for v, e in entries.items()}
    return {"metadata": {"name": name, "labels": labels, "annotations": annotations}}


def test_a_node_may_go_out_of_service_while_both_limits_have_room() -> None:
    assert admit(tally(out("a", v=10)), "b", "v", 0.0, LIMITS) is None


def test_the_validations_own_limit_holds_its_next_node() -> None:
    full = tally(out("a", v=10), out("b", v=11))
    assert admit(full, "c", "v", 0.0, LIMITS) == R.MAX_NODES_REACHED


def test_other_validations_nodes_do_not_count_against_its_own_limit() -> None:
    others = tally(out("a", w=10), out("b", w=11))
    assert admit(others, "c", "v", 0.0, LIMITS) is None


def test_the_operator_wide_limit_counts_every_validations_nodes() -> None:
    full = tally(out("a", w=10), out("b", x=11), out("c", v=12))
    assert admit(full, "d", "v", 0.0, LIMITS) == R.OPERATOR_MAX_NODES_REACHED


def test_a_node_already_out_of_service_costs_no_operator_slot() -> None:
    full = tally(out("a", w=10), out("b", x=11), out("c", x=12))
    assert admit(full, "a", "v", 0.0, LIMITS) is None


def test_reservations_of_patches_in_flight_count_like_nodes() -> None:
    # Two patches in flight for v fill its limit before either shows on a node.
    reserved = tally(reserved={"a": {"v"}, "b": {"v"}})
    assert admit(reserved, "c", "v", 0.0, LIMITS) == R.MAX_NODES_REACHED
    assert admit(reserved, "a", "v", 0.0, LIMITS) is None, "its own reservation is no new slot"
    assert reserved.operator_count() == 2


def test_a_release_approves_what_was_out_of_service_before_it() -> None:
    before = tally(out("a", v=10), out("b", v=11))
    assert admit(before, "c", "v", 12.0, LIMITS) is None
    assert before.validation_count("v", 12.0) == 0
    assert before.validation_count("v", 11.0) == 1


def test_a_node_taken_out_in_the_releases_own_second_counts_against_the_limit() -> None:
    # A release is stamped to the second: the passes right after it cordoned nodes in that same
    # second, and approving those let each pass take the limit again, up to the operator's.
    after = tally(out("a", v=20), out("b", v=20))
    assert after.validation_count("v", 20.0) == 2
    assert admit(after, "c", "v", 20.0, LIMITS) == R.MAX_NODES_REACHED


def test_the_operator_wide_limit_is_not_lifted_by_a_release() -> None:
    full = tally(out("a", v=10), out("b", v=11), out("c", v=12))
    assert admit(full, "d", "v", 99.0, LIMITS) == R.OPERATOR_MAX_NODES_REACHED


def test_nodes_out_of_service_are_read_from_their_label_and_each_validations_entry() -> None:
    node = listed(
        "n",
        {
            "v": failed(taint="NoSchedule", since=50),
            "w": failed(cordon=True),
            "held": failed(taint="NoSchedule", hold=R.MAX_NODES_REACHED),
            "label-only": failed(),
            "passed": next_entry(None, Verdict.PASSED, reason=None, at=100, run="1-a"),
        },
    )
    parsed = OutOfServiceNode.parse(node)
    assert parsed is not None
    assert dict(parsed.by) == {"v": 50, "w": 100}  # since, else the entry's time
    assert OutOfServiceNode.parse(listed("m", {"v": failed(taint="NoSchedule")}, False)) is None


def test_counts_by_validation_include_approved_nodes_and_reservations() -> None:
    counts = tally(out("a", v=1, w=2), out("b", v=3), reserved={"c": {"w"}}).by_validation()
    assert counts == {"v": 2, "w": 2}


def test_a_node_with_a_startup_taint_never_entered_service() -> None:
    node = {"spec": {"taints": [{"key": "gpuval.dev/unvalidated", "effect": "NoSchedule"}]}}
    assert never_in_service(node, {"gpuval.dev/unvalidated"})
    assert not never_in_service(node, set())
    assert not never_in_service({"spec": {}}, {"gpuval.dev/unvalidated"})


def test_a_reason_shared_by_most_tested_nodes_is_systemic() -> None:
    found = systemic(["LowThroughput"] * 6 + ["BurnMismatch"], 10, 0.5, 3)
    assert found == [SystemicFailure("LowThroughput", 6, 10)]
    assert found[0].message() == "6 of 10 tested nodes (60%) failed with LowThroughput"


@pytest.mark.parametrize(
    ("reasons", "tested", "why"),
    [
        (["LowThroughput"], 2, "1 of 2 is below the minimum count"),
        (["LowThroughput"] * 2, 2, "2 of 2 is below the minimum count of 3"),
        (["LowThroughput"] * 5, 10, "exactly half is not more than half"),
        (["LowThroughput"] * 3 + ["BurnMismatch"] * 3, 10, "no single reason has the share"),
    ],
)
def test_not_systemic(reasons: list[str], tested: int, why: str) -> None:
    assert systemic(reasons, tested, 0.5, 3) == [], why


def test_a_fleet_wide_below_baseline_is_systemic_like_any_reason() -> None:
    found = systemic(["BelowBaseline"] * 40, 40, 0.5, 3)
    assert [(s.reason, s.failed) for s in found] == [("BelowBaseline", 40)]


def test_a_fraction_of_one_turns_the_systemic_hold_off() -> None:
    assert systemic(["LowThroughput"] * 40, 40, 1.0, 3) == []


def test_a_failure_waits_while_the_nodes_left_could_make_its_reason_systemic() -> None:
    # 1 failed and 1 passed of 6: were the 4 left to fail alike, 5 of 6 would be systemic.
    assert undecided(["BurnMismatch"], tested=2, untested=4, fraction=0.5, min_nodes=3) == {
        "BurnMismatch"
    }
    # 1 failed, 4 passed of 6: even the last one failing alike makes 2 of 6.
    assert undecided(["BurnMismatch"], tested=5, untested=1, fraction=0.5, min_nodes=3) == set()
    # Systemic already: decided, not waiting.
    assert undecided(["X"] * 4, tested=5, untested=1, fraction=0.5, min_nodes=3) == set()
    # A run of two can never reach three.
    assert undecided(["X"], tested=1, untested=1, fraction=0.5, min_nodes=3) == set()
    # The systemic hold off: nothing ever waits.
    assert undecided(["X"], tested=1, untested=39, fraction=1.0, min_nodes=3) == set()


def test_held_nodes_are_tried_again_while_slots_are_free_in_name_order() -> None:
    held = {"c": R.MAX_NODES_REACHED, "a": R.MAX_NODES_REACHED, "b": R.OPERATOR_MAX_NODES_REACHED}
    retry, causes = to_retry(held, {}, set(), Limits(2, 5))
    assert retry == ["a", "b"]
    assert causes == {"c": R.MAX_NODES_REACHED}
    retry, causes = to_retry(held, {}, set(), Limits(5, 1))
    assert retry == ["a"]
    assert causes == {"b": R.OPERATOR_MAX_NODES_REACHED, "c": R.OPERATOR_MAX_NODES_REACHED}


def test_a_held_node_out_through_another_validation_takes_no_operator_slot() -> None:
    """Issue 34 part 4: the retry was budgeted min(free slots of the validation, of the
    operator) and spent it on a node another validation holds out of service (no operator-wide
    slot), so the operator's last slot went unused."""
    held = dict.fromkeys(["n3", "n4", "n5"], R.MAX_NODES_REACHED)
    retry, causes = to_retry(held, {}, set(), Limits(2, 1), out={"n3"})
    assert retry == ["n3", "n4"], "n3 costs the validation's slot only; n4 takes the operator's"
    assert causes == {"n5": R.MAX_NODES_REACHED}
    retry, causes = to_retry(held, {}, set(), Limits(3, 1), out={"n3"})
    assert retry == ["n3", "n4"]
    assert causes == {"n5": R.OPERATOR_MAX_NODES_REACHED}, "held by the limit that is full"


def test_a_systemic_hold_stays_while_its_reason_is_systemic_and_moves_to_the_full_limit() -> None:
    held = {"a": R.SYSTEMIC, "b": R.SYSTEMIC}
    reasons = {"a": "LowThroughput", "b": "XidError"}
    retry, causes = to_retry(held, reasons, {"LowThroughput"}, Limits(3, 0))
    assert retry == []
    assert causes == {"a": R.SYSTEMIC, "b": R.OPERATOR_MAX_NODES_REACHED}
    retry, _ = to_retry(held, reasons, set(), Limits(5, 5))
    assert retry == ["a", "b"], "released, or no longer systemic: tried again"


def test_a_release_is_json_naming_the_run_and_the_time() -> None:
    release = Release("3-abcd", 1700000000.0)
    assert Release.parse(release.encode()) == release
    assert release.covers("3-abcd", 1800000000.0)
    assert not release.covers("4-beef", 1600000000.0)
    assert Release("", 1700000000.0).covers("4-beef", 1600000000.0)
    assert not Release("", 1700000000.0).covers("4-beef", 1800000000.0)
    # Repairs of a systemic failure only when a person says so (`release --repair`).
    assert not release.repair and "repair" not in release.encode()
    asking = Release("3-abcd", 1700000000.0, repair=True)
    assert Release.parse(asking.encode()) == asking and asking.repair


def test_a_release_lets_a_systemic_failures_taints_through_but_asks_no_repair_of_it() -> None:
    """Issue 43 part 3: a release of a systemic hold handed most of the run to the repair engine
    while SystemicFailure stayed True."""
    state = BreakerState(
        systemic=[SystemicFailure("KernelXidReboot", 4, 6)],
        undecided={"LowThroughput"},
        repairs=True,
    )
    assert state.no_repair_reasons() == {"KernelXidReboot", "LowThroughput"}
    state.released = True
    assert state.systemic_reasons() == set(), "released: the taints and cordons go through"
    assert state.no_repair_reasons() == {"KernelXidReboot", "LowThroughput"}
    assert systemic_condition(state)[3].endswith("no repair is asked for them")
    state.release_repairs = True
    assert state.no_repair_reasons() == set(), "a person asked for the repairs too"
    assert systemic_condition(state)[3].endswith("repairs asked too")


def test_the_out_of_service_count_says_which_were_released_and_which_need_a_person() -> None:
    """Issue 43 part 5: after a release the condition read "2 of at most 1 nodes out of service",
    which looked like a breach of maxNodes."""
    state = BreakerState(limit=1, out_of_service=2, counted=0, needs_repair=1)
    _, status, _, message = held_condition(state, {}, "fleet")
    assert status == "False"
    assert message == (
        "no node action held (out of service through this validation 0 (nodeActions.maxNodes 1), "
        "2 more released by a person (not counted); 1 of them needs repair by a person "
        "(NeedsRepair))"
    )


@pytest.mark.parametrize("text", [None, "", "yes", "{}", '{"at": "soon"}', "[1]"])
def test_an_unreadable_release_is_no_release(text: str | None) -> None:
    assert Release.parse(text) is None


def test_the_held_condition_names_how_many_failed_why_and_how_to_release() -> None:
    state = BreakerState(
        held=dict.fromkeys(("c", "d", "e"), R.MAX_NODES_REACHED) | {"f": R.SYSTEMIC},
        limit=2,
        out_of_service=2,
        counted=2,
        operator_limit=10,
        operator_out_of_service=4,
    )
    kind, status, reason, message = held_condition(
        state, {"LowThroughput": 5, "XidError": 1}, "fleet"
    )
    assert (kind, status, reason) == (ConditionType.NODE_ACTIONS_HELD, "True", R.SYSTEMIC)
    assert message.startswith("4 of 6 failed nodes keep their label but not their taint")
    assert "1 for Systemic; 3 for MaxNodesReached" in message
    assert "failures: LowThroughput 5, XidError 1" in message
    assert "out of service through this validation 2 (nodeActions.maxNodes 2)" in message
    assert "released by a person" not in message and "(operator limit 10)" in message
    assert "kubectl gpuval release fleet" in message


def test_nothing_held_is_a_false_condition() -> None:
    _, status, reason, _ = held_condition(BreakerState(limit=4), {}, "fleet")
    assert (status, reason) == ("False", R.NOT_HELD)


def test_the_systemic_condition_names_the_reason_and_the_likely_cause() -> None:
    state = BreakerState(systemic=[SystemicFailure("BelowBaseline", 38, 40)])
    kind, status, reason, message = systemic_condition(state)
    assert (kind, status, reason) == (
        ConditionType.SYSTEMIC_FAILURE,
        "True",
        R.SAME_REASON_ON_MANY_NODES,
    )
    assert "38 of 40 tested nodes (95%) failed with BelowBaseline" in message
    assert "spec (a threshold) or the fleet's stack" in message
    assert message.endswith("their taint and cordon are held")
    state.released = True
    assert systemic_condition(state)[3].endswith("released by a person")
    assert state.systemic_reasons() == set()
    assert systemic_condition(BreakerState())[1:3] == ("False", R.NOT_SYSTEMIC)


def test_the_systemic_event_says_its_time_and_that_its_figures_are_so_far() -> None:
    """Issue 34 part 5: the once-per-run SystemicFailure Event said "3 of 5 tested nodes" where
    the final condition said 6 of 10, without saying that it spoke of the run so far."""
    found = SystemicFailure("LowThroughput", 3, 5)
    early = systemic_event(found, "1-abcd", 1_800_000_000.0, untested=5, total=10)
    assert early == (
        "3 of 5 nodes tested so far (60%) failed with LowThroughput in run 1-abcd: the spec or "
        "the fleet's stack is the likely cause, not the nodes (at 2027-01-15T08:00:00Z, 5 of 10 "
        "nodes still to test: figures so far; the SystemicFailure condition keeps them current)"
    )
    final = systemic_event(
        SystemicFailure("LowThroughput", 6, 10), "1-abcd", 1_800_000_000.0, 0, 10
    )
    assert final.startswith("6 of 10 tested nodes (60%) failed with LowThroughput in run 1-abcd")
    assert final.endswith("not the nodes (at 2027-01-15T08:00:00Z)")
    assert as_of(1_800_000_000.0, 2, 40, "NodeActionsHeld") == (
        " (at 2027-01-15T08:00:00Z, 2 of 40 nodes still to test: figures so far; the "
        "NodeActionsHeld condition keeps them current)"
    )
