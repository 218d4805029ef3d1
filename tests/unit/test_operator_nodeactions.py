"""Node actions touch only what gpuval set: its labels, its taint, its own cordon."""

from __future__ import annotations

from typing import Any

from gpuval_api import keys
from gpuval_api.crd import NodeActions
from gpuval_operator.nodeactions import plan_node_patch

ADMIN_TAINT = {"key": "maintenance", "value": "disk", "effect": "NoSchedule"}


def node(
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    taints: list[dict[str, Any]] | None = None,
    unschedulable: bool = False,
) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if taints is not None:
        spec["taints"] = taints
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "metadata": {
            "name": "n",
            "resourceVersion": "42",
            "labels": labels or {},
            "annotations": annotations or {},
        },
        "spec": spec,
    }


ALL = NodeActions.model_validate({"label": True, "taint": {"effect": "NoExecute"}, "cordon": True})


def test_a_failing_node_is_labelled_tainted_and_cordoned_next_to_the_admins_taint() -> None:
    patch = plan_node_patch(
        node(taints=[ADMIN_TAINT]),
        validation="v",
        passed=False,
        reason="XidError",
        actions=ALL,
        now=1700000000,
    )
    assert patch is not None
    assert patch["metadata"]["resourceVersion"] == "42"
    assert patch["metadata"]["labels"] == {
        keys.NODE_LABEL_VERDICT: "failed",
        keys.NODE_LABEL_VALIDATED_AT: "1700000000",
        keys.NODE_LABEL_REASON: "XidError",
    }
    assert patch["spec"]["taints"] == [
        ADMIN_TAINT,
        {"key": keys.TAINT_KEY, "value": "XidError", "effect": "NoExecute"},
    ]
    assert patch["spec"]["unschedulable"] is True
    assert patch["metadata"]["annotations"][keys.NODE_ANNOTATION_CORDONED_BY] == "v"


def test_a_passing_node_loses_our_taint_cordon_and_reason_but_keeps_the_admins() -> None:
    before = node(
        labels={
            keys.NODE_LABEL_VERDICT: "failed",
            keys.NODE_LABEL_REASON: "XidError",
            "team": "ml",
        },
        annotations={keys.NODE_ANNOTATION_CORDONED_BY: "v"},
        taints=[ADMIN_TAINT, {"key": keys.TAINT_KEY, "value": "XidError", "effect": "NoExecute"}],
        unschedulable=True,
    )
    patch = plan_node_patch(
        before, validation="v", passed=True, reason=None, actions=ALL, now=1700000100
    )
    assert patch is not None
    assert patch["spec"] == {"taints": [ADMIN_TAINT], "unschedulable": None}
    assert patch["metadata"]["annotations"][keys.NODE_ANNOTATION_CORDONED_BY] is None
    assert patch["metadata"]["labels"][keys.NODE_LABEL_VERDICT] == "passed"
    assert patch["metadata"]["labels"][keys.NODE_LABEL_REASON] is None
    assert "team" not in patch["metadata"]["labels"]


def test_an_admins_cordon_is_never_lifted() -> None:
    admin = node(unschedulable=True)
    patch = plan_node_patch(admin, validation="v", passed=True, reason=None, actions=ALL, now=1)
    assert patch is not None and "spec" not in patch
    failing = plan_node_patch(
        admin, validation="v", passed=False, reason="XidError", actions=ALL, now=1
    )
    assert failing is not None
    assert keys.NODE_ANNOTATION_CORDONED_BY not in failing["metadata"].get("annotations", {})


def test_nothing_to_do_gives_no_patch() -> None:
    quiet = NodeActions.model_validate({"label": False})
    assert (
        plan_node_patch(
            node(taints=[ADMIN_TAINT]),
            validation="v",
            passed=False,
            reason="X",
            actions=quiet,
            now=1,
        )
        is None
    )
