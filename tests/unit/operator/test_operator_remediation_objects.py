"""What the repair loop reads of the engines' objects and of a failing report, the object it makes
from a template, the checks of spec.remediation, and what a node in the loop carries (its
conditions, labels, and the breaker's count): pure, without a cluster."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from gpuval_api import keys
from gpuval_api.crd import GpuValidationSpec, RemediationTemplate
from gpuval_api.reasons import Reason, RepairAction, action_of, info
from gpuval_api.remediation import RepairEnd, RepairState
from gpuval_api.result import Verdict
from gpuval_operator.nodes.breaker.rules import OutOfServiceNode
from gpuval_operator.nodes.entries import NodeEntry, next_entry, plan_node
from gpuval_operator.remediation.objects import failing_gpus, object_end, pci_bus_id
from gpuval_operator.remediation.record import RepairRecord
from gpuval_operator.remediation.rollup import remediation_status
from gpuval_operator.remediation.template import Request, default_name, render
from gpuval_operator.spec import parse_spec

STAMP = "2026-01-01T00:00:00Z"


def cond(kind: str, status: str) -> dict[str, str]:
    return {"type": kind, "status": status, "reason": "X", "message": ""}


@pytest.mark.parametrize(
    ("status", "end"),
    [
        ({}, None),
        ({"conditions": [cond("Processing", "True")]}, None),
        # Medik8s: Succeeded True / False, or Processing False.
        ({"conditions": [cond("Processing", "False"), cond("Succeeded", "True")]}, RepairEnd.DONE),
        ({"conditions": [cond("Succeeded", "False")]}, RepairEnd.FAILED),
        ({"conditions": [cond("Processing", "False")]}, RepairEnd.DONE),
        # NVSentinel's janitor: a completion time either way, NodeReady False when it failed.
        ({"conditions": [cond("SignalSent", "True"), cond("NodeReady", "Unknown")]}, None),
        ({"completionTime": STAMP, "conditions": [cond("NodeReady", "True")]}, RepairEnd.DONE),
        ({"completionTime": STAMP, "conditions": [cond("NodeReady", "False")]}, RepairEnd.FAILED),
        ({"conditions": [cond("Completed", "True")]}, RepairEnd.DONE),
        ({"conditions": [cond("Failed", "True")]}, RepairEnd.FAILED),
        ({"phase": "Succeeded"}, RepairEnd.DONE),
        ({"phase": "Error"}, RepairEnd.FAILED),
    ],
)
def test_an_objects_end_is_read_from_its_status_as_each_engine_writes_it(
    status: dict[str, Any], end: RepairEnd | None
) -> None:
    assert object_end({"status": status}) == end


REPORT: dict[str, Any] = {
    "status": {
        "completedAt": "2026-01-01T00:00:10Z",
        "failures": [
            {"check": "state", "gpu": 2, "reason": "KernelXidReboot"},
            {"check": "agent", "reason": "PodFailed"},
        ],
        "result": {
            "environment": {
                "gpus": [
                    {"index": 1, "uuid": "GPU-1", "pciBusId": "00000000:13:00.0"},
                    {"index": 2, "uuid": "GPU-2", "pciBusId": "00000000:14:00.0"},
                ]
            }
        },
    }
}


def test_the_failing_gpus_and_checks_come_from_the_report() -> None:
    found = failing_gpus(REPORT)
    assert found.uuids == ("GPU-2",) and found.pci_bus_ids == ("0000:14:00.0",)
    assert found.checks == ("state",), "agent is not a check the agent can run again"
    assert found.failed_at == 1767225610.0
    assert pci_bus_id("00000000:14:00.0") == "0000:14:00.0"
    assert failing_gpus(None).uuids == ()


TEMPLATE = RemediationTemplate.model_validate(
    {
        "apiVersion": "janitor.dgxc.nvidia.com/v1alpha1",
        "kind": "GPUReset",
        "metadata": {"annotations": {"why": "$(REASON) on $(NODE_NAME)"}},
        "spec": {
            "nodeName": "$(NODE_NAME)",
            "selector": {"uuids": "$(GPU_UUIDS)", "pciBusIDs": "$(GPU_PCI_BUS_IDS)"},
            "note": "GPUs $(GPU_UUIDS)",
        },
    }
)
REQUEST = Request(
    validation="fleet",
    uid="uid-1",
    node="gpu-7",
    repair_id="3",
    reason="KernelXidResetGpu",
    action="ResetGpu",
    gpu_uuids=("GPU-2", "GPU-5"),
    gpu_pci_bus_ids=("0000:14:00.0", "0000:17:00.0"),
)


def test_a_template_becomes_one_labelled_owned_object_with_the_node_and_gpus_filled_in() -> None:
    body = render(TEMPLATE, REQUEST)
    assert body["apiVersion"] == "janitor.dgxc.nvidia.com/v1alpha1" and body["kind"] == "GPUReset"
    meta = body["metadata"]
    assert (
        meta["name"]
        == default_name("fleet", "gpu-7")
        == render(TEMPLATE, REQUEST)["metadata"]["name"]
    )
    assert meta["labels"][keys.LABEL_VALIDATION] == "fleet"
    assert meta["labels"][keys.LABEL_NODE] == "gpu-7"
    assert meta["labels"][keys.LABEL_REPAIR] == "3"
    assert meta["ownerReferences"][0]["kind"] == "GpuValidation"
    assert meta["ownerReferences"][0]["uid"] == "uid-1"
    assert meta["annotations"] == {"why": "KernelXidResetGpu on gpu-7"}
    assert body["spec"] == {
        "nodeName": "gpu-7",
        "selector": {"uuids": ["GPU-2", "GPU-5"], "pciBusIDs": ["0000:14:00.0", "0000:17:00.0"]},
        "note": "GPUs GPU-2,GPU-5",
    }
    assert "namespace" not in meta


def test_a_named_template_keeps_its_name_and_namespace() -> None:
    snr = RemediationTemplate.model_validate(
        {
            "apiVersion": "self-node-remediation.medik8s.io/v1alpha1",
            "kind": "SelfNodeRemediation",
            "metadata": {"name": "$(NODE_NAME)", "namespace": "medik8s"},
            "spec": {"remediationStrategy": "Automatic"},
        }
    )
    meta = render(snr, REQUEST)["metadata"]
    assert (meta["name"], meta["namespace"]) == ("gpu-7", "medik8s")


def _spec(**remediation: Any) -> dict[str, Any]:
    return {"nodeActions": {"taint": {"effect": "NoSchedule"}}, "remediation": remediation}


def test_remediation_without_a_taint_or_cordon_is_invalid_naming_the_field() -> None:
    _, errors = parse_spec({"remediation": {}})
    assert any(
        e.startswith("spec.remediation.mode=Condition: needs nodeActions.taint") for e in errors
    )
    spec, errors = parse_spec(_spec())
    assert errors == [] and spec is not None and spec.remediation is not None


def test_a_template_with_unknown_placeholders_or_a_bad_name_is_invalid() -> None:
    _, errors = parse_spec(
        _spec(
            mode="Template",
            template={
                "apiVersion": "x.io/v1",
                "kind": "Fix",
                "metadata": {"name": "Fix_$(NODE)", "labels": {"node": "$(NODE_NAME)"}},
                "spec": {"n": "$(NODE)"},
            },
        )
    )
    text = "\n".join(errors)
    assert "spec.remediation.template=$(NODE): unknown placeholders" in text
    assert "spec.remediation.template.metadata.name='Fix_$(NODE)': not a DNS subdomain" in text
    assert "spec.remediation.template.metadata.labels.node='$(NODE_NAME)'" in text
    _, errors = parse_spec(
        _spec(mode="Template", template={"apiVersion": "x", "kind": "fix", "spec": {}})
    )
    assert any(e.startswith("spec.remediation.template.apiVersion='x'") for e in errors), errors
    assert any(e.startswith("spec.remediation.template.kind='fix'") for e in errors), errors


def test_the_catalogue_gives_nvidias_action_for_each_reason() -> None:
    assert action_of(Reason.KERNEL_XID_REBOOT) is RepairAction.REBOOT
    assert action_of(Reason.KERNEL_XID_RESET_GPU) is RepairAction.RESET_GPU
    assert action_of(Reason.ROW_REMAP_PENDING) is RepairAction.RESET_GPU
    assert action_of(Reason.KERNEL_XID_RESTART_APP) is RepairAction.RESTART_APP
    assert action_of(Reason.ROW_REMAP_FAILED) is RepairAction.REPLACE
    assert action_of(Reason.LOW_THROUGHPUT) is RepairAction.NONE
    assert action_of("NotAReason") is RepairAction.NONE
    assert all(
        info(r).action is RepairAction.NONE for r in Reason if info(r).verdict is Verdict.NOT_RUN
    ), "a node gpuval could not test asks for no repair"


def _record(state: RepairState, **changes: Any) -> RepairRecord:
    base = RepairRecord(state, "Reboot", "KernelXidReboot", 100, 110, "boot-1", 1, (110,))
    return base.moved(state, **changes)


def _node(entries: dict[str, NodeEntry], labels: dict[str, str] | None = None) -> dict[str, Any]:
    annotations = {f"verdict.gpuval.dev/{v}": e.encode() for v, e in entries.items()}
    return {
        "metadata": {
            "name": "n1",
            "resourceVersion": "7",
            "labels": dict(labels or {}),
            "annotations": annotations,
        },
        "spec": {},
        "status": {"conditions": []},
    }


def _failed(repair: RepairRecord | None = None) -> NodeEntry:
    return next_entry(
        None,
        Verdict.FAILED,
        reason="KernelXidReboot",
        at=100,
        run="1-ab",
        taint="NoSchedule",
        since=100,
        repair=repair,
    )


def test_a_node_in_repair_says_so_in_a_condition_an_engine_matches_and_counts_as_out() -> None:
    entry = _failed(_record(RepairState.REQUESTED, obj="gpuval-n1"))
    plan = plan_node(_node({}), "fleet", entry, STAMP)
    conditions = {c["type"]: c for c in plan.conditions}
    requested = conditions[keys.NODE_CONDITION_REPAIR_REQUESTED]
    assert (requested["status"], requested["reason"]) == ("True", "Reboot")
    assert "KernelXidReboot asks for Reboot: repair 1" in requested["message"]
    assert keys.NODE_CONDITION_NEEDS_REPAIR not in conditions
    validated = conditions[keys.NODE_CONDITION]
    assert validated["message"] == "failed by fleet (KernelXidReboot; NVIDIA's action: Reboot)"
    assert plan.patch is not None
    assert plan.patch["metadata"]["labels"][keys.NODE_LABEL_OUT_OF_SERVICE] == "true"
    written = _node({"fleet": entry}, {keys.NODE_LABEL_OUT_OF_SERVICE: "true"})
    counted = OutOfServiceNode.parse(written)
    assert counted is not None and counted.by == {"fleet": 100}


def test_a_node_that_never_entered_service_counts_while_in_repair() -> None:
    startup = {"key": "gpuval.dev/unvalidated", "effect": "NoSchedule"}
    node = _node({})
    node["spec"]["taints"] = [startup]
    quiet = next_entry(
        None,
        Verdict.FAILED,
        reason="KernelXidReboot",
        at=100,
        run="1",
        taint="NoSchedule",
        startup_taint=startup["key"],
    )
    before = plan_node(node, "g", quiet, STAMP).patch
    assert before is not None
    assert keys.NODE_LABEL_OUT_OF_SERVICE not in before["metadata"].get("labels", {})
    asked = dataclasses.replace(quiet, repair=_record(RepairState.REQUESTED))
    patch = plan_node(node, "g", asked, STAMP).patch
    assert (
        patch is not None and patch["metadata"]["labels"][keys.NODE_LABEL_OUT_OF_SERVICE] == "true"
    )


def test_needs_repair_is_a_label_and_a_condition_and_the_request_condition_turns_false() -> None:
    entry = _failed(_record(RepairState.NEEDS_REPAIR, count=2, history=(110, 200)))
    plan = plan_node(_node({}), "fleet", entry, STAMP)
    conditions = {c["type"]: c for c in plan.conditions}
    assert plan.patch is not None
    assert plan.patch["metadata"]["labels"][keys.NODE_LABEL_NEEDS_REPAIR] == "true"
    needs = conditions[keys.NODE_CONDITION_NEEDS_REPAIR]
    assert (needs["status"], needs["reason"]) == ("True", "NeedsRepair")
    assert (
        "after 2 repairs" in needs["message"] and keys.NODE_LABEL_NEEDS_REPAIR in needs["message"]
    )
    requested = conditions[keys.NODE_CONDITION_REPAIR_REQUESTED]
    assert (requested["status"], requested["reason"]) == ("False", "NeedsRepair")


def test_back_in_service_lifts_the_label_and_sets_both_conditions_false() -> None:
    before = _failed(_record(RepairState.NEEDS_REPAIR))
    node = _node({"fleet": before}, {keys.NODE_LABEL_NEEDS_REPAIR: "true"})
    node["status"]["conditions"] = [
        {"type": keys.NODE_CONDITION_NEEDS_REPAIR, "status": "True", "reason": "NeedsRepair"},
        {"type": keys.NODE_CONDITION_REPAIR_REQUESTED, "status": "False", "reason": "NeedsRepair"},
    ]
    passed = next_entry(
        before,
        Verdict.PASSED,
        reason=None,
        at=300,
        run="1",
        repair=_record(RepairState.REPAIRED, back=300),
    )
    plan = plan_node(node, "fleet", passed, STAMP)
    conditions = {c["type"]: c for c in plan.conditions}
    assert plan.patch is not None
    assert plan.patch["metadata"]["labels"][keys.NODE_LABEL_NEEDS_REPAIR] is None
    assert conditions[keys.NODE_CONDITION_NEEDS_REPAIR]["status"] == "False"
    assert conditions[keys.NODE_CONDITION_REPAIR_REQUESTED]["reason"] == "Repaired"


def test_a_node_never_in_the_loop_gets_no_repair_condition() -> None:
    plan = plan_node(_node({}), "fleet", _failed(), STAMP)
    assert [c["type"] for c in plan.conditions] == [keys.NODE_CONDITION]


def test_an_entry_with_its_record_reads_back_the_same() -> None:
    entry = _failed(_record(RepairState.REVALIDATING, ended=150, ended_by="Rebooted"))
    assert NodeEntry.decode(entry.encode()) == entry
    assert NodeEntry.decode(_failed().encode()) == _failed()


def test_the_status_lists_who_needs_a_person_first_with_the_times() -> None:
    records = {
        "a": _record(RepairState.REPAIRED, back=400, revalidated=400, ended=300, ended_by="Done"),
        "b": _record(RepairState.NEEDS_REPAIR),
        "c": _record(RepairState.REQUESTED, obj="gpuval-c"),
        "old": _record(RepairState.REPAIRED, back=1),
    }
    status = remediation_status(records, now=1000, window=900)
    assert (status["inRepair"], status["needsRepair"]) == (1, 1)
    assert [n["node"] for n in status["nodes"]] == ["b", "c", "a"], "one back long ago: not shown"
    a = status["nodes"][2]
    assert a["endedBy"] == "Done" and a["backInServiceAt"] == "1970-01-01T00:06:40Z"
    assert status["nodes"][1]["object"] == "gpuval-c"
    spec = GpuValidationSpec.model_validate({"remediation": {}})
    assert spec.remediation is not None
