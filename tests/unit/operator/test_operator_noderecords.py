"""A node's state follows every validation covering it: its labels, taint, cordon and condition
never undo another validation's failure, and touch only what gpuval set."""

from __future__ import annotations

import json
from typing import Any

from gpuval_api import keys
from gpuval_api.conditions import ConditionReason
from gpuval_api.result import Verdict
from gpuval_operator.nodes.entries import (
    NodeEntry,
    aggregate,
    already_said,
    entry_key,
    next_entry,
    plan_node,
)

ADMIN_TAINT = {"key": "maintenance", "value": "disk", "effect": "NoSchedule"}
STAMP = "2026-11-30T12:00:00Z"


def entry(verdict: Verdict, reason: str | None = None, **kw: Any) -> NodeEntry:
    fields: dict[str, Any] = {"reason": reason, "at": 1700000000, "run": "1-a"} | kw
    return next_entry(None, verdict, **fields)


def node(entries: dict[str, NodeEntry] | None = None, **spec: Any) -> dict[str, Any]:
    annotations = {entry_key(v): e.encode() for v, e in (entries or {}).items()}
    return {
        "metadata": {
            "name": "n",
            "resourceVersion": "42",
            "labels": {},
            "annotations": annotations,
        },
        "spec": spec,
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def test_a_failing_node_is_labelled_tainted_cordoned_and_its_condition_false() -> None:
    failed = entry(Verdict.FAILED, "XidError", taint="NoExecute", cordon=True)
    plan = plan_node(node(taints=[ADMIN_TAINT]), "v1", failed, STAMP)
    assert plan.patch is not None
    meta = plan.patch["metadata"]
    assert meta["resourceVersion"] == "42"
    assert meta["labels"] == {
        keys.NODE_LABEL_VERDICT: "failed",
        keys.NODE_LABEL_VALIDATED_AT: "1700000000",
        keys.NODE_LABEL_REASON: "XidError",
        keys.NODE_LABEL_OUT_OF_SERVICE: "true",
    }
    assert plan.patch["spec"]["taints"] == [
        ADMIN_TAINT,
        {"key": keys.TAINT_KEY, "value": "XidError", "effect": "NoExecute"},
    ]
    assert plan.patch["spec"]["unschedulable"] is True
    assert meta["annotations"][keys.NODE_ANNOTATION_CORDONED_BY] == "v1"
    assert json.loads(meta["annotations"][entry_key("v1")])["verdict"] == "Failed"
    assert plan.condition is not None
    assert (plan.condition["type"], plan.condition["status"]) == (keys.NODE_CONDITION, "False")
    assert "failed by v1 (XidError; NVIDIA's action: Reboot)" in plan.condition["message"]


def test_one_validation_passing_does_not_undo_anothers_failure() -> None:
    failing = {"v1": entry(Verdict.FAILED, "BurnMismatch", taint="NoSchedule")}
    tainted = node(
        failing, taints=[{"key": keys.TAINT_KEY, "value": "BurnMismatch", "effect": "NoSchedule"}]
    )
    plan = plan_node(tainted, "v2", entry(Verdict.PASSED), STAMP)
    assert plan.patch is not None
    assert "spec" not in plan.patch  # the taint stays
    labels = plan.patch["metadata"]["labels"]
    assert labels[keys.NODE_LABEL_VERDICT] == "failed"
    assert labels[keys.NODE_LABEL_REASON] == "BurnMismatch"
    assert plan.patch["metadata"]["annotations"][keys.NODE_ANNOTATION_FAILED_BY] == "v1"


def test_the_failing_validation_passing_again_lifts_its_taint_and_cordon_only() -> None:
    failing = {"v1": entry(Verdict.FAILED, "BurnMismatch", taint="NoSchedule", cordon=True)}
    ours = {"key": keys.TAINT_KEY, "value": "BurnMismatch", "effect": "NoSchedule"}
    state = node(failing, unschedulable=True, taints=[ADMIN_TAINT, ours])
    state["metadata"]["annotations"][keys.NODE_ANNOTATION_CORDONED_BY] = "v1"
    plan = plan_node(state, "v1", entry(Verdict.PASSED), STAMP)
    assert plan.patch is not None
    assert plan.patch["spec"] == {"taints": [ADMIN_TAINT], "unschedulable": None}
    assert plan.patch["metadata"]["labels"][keys.NODE_LABEL_VERDICT] == "passed"
    assert plan.condition is not None and plan.condition["status"] == "True"


def test_an_admins_cordon_is_never_lifted() -> None:
    plan = plan_node(node(unschedulable=True), "v1", entry(Verdict.PASSED), STAMP)
    assert plan.patch is not None and "spec" not in plan.patch


def test_not_run_keeps_the_last_tested_verdict_and_takes_no_action() -> None:
    failed = entry(Verdict.FAILED, "EccUncorrectable", taint="NoSchedule")
    untested = next_entry(failed, Verdict.NOT_RUN, reason="PodUnschedulable", at=2, run="2-b")
    assert (untested.verdict, untested.tested) == ("NotRun", "Failed")
    assert aggregate({"v1": untested}).state == keys.NODE_VERDICT_FAILED
    fresh = entry(Verdict.NOT_RUN, "PodUnschedulable", taint="NoSchedule", cordon=True)
    plan = plan_node(node(), "v1", fresh, STAMP)
    assert plan.patch is not None and "spec" not in plan.patch  # no taint, no cordon
    assert plan.patch["metadata"]["labels"][keys.NODE_LABEL_VERDICT] == keys.NODE_VERDICT_NOT_RUN
    assert plan.condition is not None and plan.condition["status"] == "Unknown"


def test_a_pass_removes_the_startup_taint_a_failure_keeps_it() -> None:
    startup = {"key": "gpuval.dev/unvalidated", "effect": "NoSchedule"}
    gated = node(taints=[startup, ADMIN_TAINT])
    passed = plan_node(gated, "v1", entry(Verdict.PASSED, startup_taint=startup["key"]), STAMP)
    assert passed.patch is not None and passed.patch["spec"]["taints"] == [ADMIN_TAINT]
    assert "remove startup taint gpuval.dev/unvalidated" in passed.changes
    failed = plan_node(
        gated, "v1", entry(Verdict.FAILED, "BurnNaN", startup_taint=startup["key"]), STAMP
    )
    assert failed.patch is not None and "spec" not in failed.patch


def test_forgetting_a_deleted_validation_lifts_what_it_alone_asked_for() -> None:
    failing = {"gone": entry(Verdict.FAILED, "XidError", taint="NoSchedule")}
    taint = {"key": keys.TAINT_KEY, "value": "XidError", "effect": "NoSchedule"}
    state = node(failing, taints=[taint])
    state["metadata"]["labels"] = {keys.NODE_LABEL_VERDICT: "failed", keys.NODE_LABEL_REASON: "x"}
    plan = plan_node(state, "gone", None, STAMP)
    assert plan.patch is not None
    assert plan.patch["spec"] == {"taints": []}
    assert plan.patch["metadata"]["annotations"][entry_key("gone")] is None
    assert plan.patch["metadata"]["labels"][keys.NODE_LABEL_VERDICT] is None


def test_nothing_changes_when_the_node_is_already_as_wanted() -> None:
    state = node({"v1": entry(Verdict.PASSED)})
    state["metadata"]["labels"] = {
        keys.NODE_LABEL_VERDICT: "passed",
        keys.NODE_LABEL_VALIDATED_AT: "1700000000",
    }
    condition = plan_node(node(), "v1", entry(Verdict.PASSED), STAMP).condition
    state["status"]["conditions"].append(condition)
    plan = plan_node(state, "v1", entry(Verdict.PASSED), STAMP)
    assert plan.patch is None and plan.condition is None and plan.changes == []


def test_an_entry_already_holding_this_runs_verdict_on_this_boot_posts_no_events_again() -> None:
    def said(run: str = "1-a", boot: str = "b1", reason: str = "BurnNaN") -> NodeEntry:
        return entry(Verdict.FAILED, reason, run=run, boot=boot, stack="s")

    assert already_said(said(), said())
    assert not already_said(None, said())
    assert not already_said(said(run="0-z"), said()), "another run's verdict"
    assert not already_said(said(boot="b0"), said()), "tested again after a reboot"
    assert not already_said(said(reason="BurnMismatch"), said()), "another reason"


def test_a_held_failure_keeps_its_label_and_condition_but_asks_no_taint_or_cordon() -> None:
    held = entry(
        Verdict.FAILED,
        "LowThroughput",
        taint="NoSchedule",
        cordon=True,
        hold=ConditionReason.MAX_NODES_REACHED,
    )
    plan = plan_node(node(), "v1", held, STAMP)
    assert plan.patch is not None and "spec" not in plan.patch
    labels = plan.patch["metadata"]["labels"]
    assert labels[keys.NODE_LABEL_VERDICT] == "failed"
    assert keys.NODE_LABEL_OUT_OF_SERVICE not in labels
    assert plan.condition is not None and plan.condition["status"] == "False"
    assert "taint and cordon held (v1: MaxNodesReached)" in plan.condition["message"]
    assert not held.in_force


def test_a_held_failure_does_not_undo_another_validations_taint() -> None:
    failing = {"v2": entry(Verdict.FAILED, "XidError", taint="NoSchedule")}
    ours = {"key": keys.TAINT_KEY, "value": "XidError", "effect": "NoSchedule"}
    state = node(failing, taints=[ours])
    state["metadata"]["labels"] = {keys.NODE_LABEL_OUT_OF_SERVICE: "true"}
    held = entry(Verdict.FAILED, "LowThroughput", cordon=True, hold=ConditionReason.SYSTEMIC)
    plan = plan_node(state, "v1", held, STAMP)
    assert plan.patch is not None and "spec" not in plan.patch, "v2's taint stays, no cordon"
    assert keys.NODE_LABEL_OUT_OF_SERVICE not in plan.patch["metadata"]["labels"]


def test_the_out_of_service_label_follows_gpuvals_taint_or_cordon() -> None:
    cordoned = plan_node(node(), "v1", entry(Verdict.FAILED, "XidError", cordon=True), STAMP)
    assert cordoned.patch is not None
    assert cordoned.patch["metadata"]["labels"][keys.NODE_LABEL_OUT_OF_SERVICE] == "true"
    # An admin's cordon is not gpuval's: a label-only failure takes nothing out of service.
    admins = plan_node(
        node(unschedulable=True), "v1", entry(Verdict.FAILED, "XidError", cordon=True), STAMP
    )
    assert admins.patch is not None
    assert keys.NODE_LABEL_OUT_OF_SERVICE not in admins.patch["metadata"]["labels"]
    taint = {"key": keys.TAINT_KEY, "value": "XidError", "effect": "NoSchedule"}
    state = node({"v1": entry(Verdict.FAILED, "XidError", taint="NoSchedule")}, taints=[taint])
    state["metadata"]["labels"] = {keys.NODE_LABEL_OUT_OF_SERVICE: "true"}
    passed = plan_node(state, "v1", entry(Verdict.PASSED), STAMP)
    assert passed.patch is not None
    assert passed.patch["metadata"]["labels"][keys.NODE_LABEL_OUT_OF_SERVICE] is None


def test_a_node_that_never_entered_service_is_not_counted_out_of_it() -> None:
    startup = {"key": "gpuval.dev/unvalidated", "effect": "NoSchedule"}
    failed = entry(
        Verdict.FAILED, "BurnNaN", taint="NoSchedule", cordon=True, startup_taint=startup["key"]
    )
    plan = plan_node(node(taints=[startup]), "v1", failed, STAMP)
    assert plan.patch is not None and plan.patch["spec"]["unschedulable"] is True
    assert keys.NODE_LABEL_OUT_OF_SERVICE not in plan.patch["metadata"]["labels"]


def test_an_entry_without_a_hold_is_as_short_as_before() -> None:
    plain = entry(Verdict.FAILED, "XidError", taint="NoSchedule")
    assert "hold" not in plain.encode() and "since" not in plain.encode()
    held = entry(Verdict.FAILED, "XidError", hold=ConditionReason.SYSTEMIC, since=5)
    assert NodeEntry.decode(held.encode()) == held
    assert NodeEntry.decode(plain.encode()) == plain
