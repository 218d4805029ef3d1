"""Healthy capacity (docs/operator/capacity.md): each node in one state by the stated precedence,
a failed node's GPUs split into failed and withheld, the proof age, the metrics, the status body
and `kubectl gpuval status`'s opening line."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpuval_api.capacity import CapacityState
from gpuval_api.crd import CapacityStatus, GpuValidation
from gpuval_api.remediation import RepairState
from gpuval_api.result import Verdict
from gpuval_api.views import fleet_of_units
from gpuval_kubectl import render
from gpuval_operator.capacity import NodeCapacity, gpu_states, node_state, summarize
from gpuval_operator.nodes.entries import entry_key, next_entry
from gpuval_operator.nodes.facts import NodeFacts
from gpuval_operator.readmodel.metrics import make_registry
from gpuval_operator.readmodel.registry import Registry
from gpuval_operator.readmodel.validation import ValidationState
from gpuval_operator.remediation.record import RepairRecord
from gpuval_operator.run.facts import failed_gpus
from gpuval_operator.run.rollup import capacity_status

S = CapacityState
AGE, NOW = 3600.0, 10_000.0
PASSED, FAILED = str(Verdict.PASSED), str(Verdict.FAILED)


def node(tested: str | None = PASSED, **fields: object) -> NodeCapacity:
    return NodeCapacity(**({"name": "n", "gpus": 8, "tested": tested} | fields))  # type: ignore[arg-type]


def test_each_state_and_the_precedence_between_them() -> None:
    fresh = NOW - 60
    cases = [
        (node(proven_at=fresh), S.HEALTHY),
        (node(proven_at=NOW - 2 * AGE), S.STALE),
        (node(proven_at=None), S.STALE),  # void: another validation failed it
        (node(None), S.UNTESTED),
        (node(FAILED), S.FAILED),
        # A repair in force outranks the failed verdict, a person's turn outranks both.
        (node(FAILED, repair=str(RepairState.REQUESTED)), S.REPAIR),
        (node(FAILED, repair=str(RepairState.REVALIDATING)), S.REPAIR),
        (node(FAILED, repair=str(RepairState.NEEDS_REPAIR)), S.NEEDS_PERSON),
        (node(PASSED, proven_at=fresh, needs_repair_label=True), S.NEEDS_PERSON),
        # A repair that ended leaves the node to its verdict.
        (node(PASSED, proven_at=fresh, repair=str(RepairState.REPAIRED)), S.HEALTHY),
    ]
    for facts, expected in cases:
        assert node_state(facts, AGE, NOW) is expected, facts


def test_without_a_maximum_age_a_pass_is_healthy_whatever_its_proof() -> None:
    assert node_state(node(proven_at=None), None, NOW) is S.HEALTHY
    assert node_state(node(proven_at=0.0), None, NOW) is S.HEALTHY


def test_a_failed_nodes_named_gpus_fail_and_its_others_are_withheld_with_it() -> None:
    assert gpu_states(node(FAILED, failed_gpus=1), S.FAILED) == {S.FAILED: 1, S.WITHHELD: 7}
    # No GPU named, or every one: the whole node failed, none withheld.
    assert gpu_states(node(FAILED), S.FAILED) == {S.FAILED: 8}
    assert gpu_states(node(FAILED, failed_gpus=8), S.FAILED) == {S.FAILED: 8}
    # A node in repair counts every GPU there, whatever its report named.
    assert gpu_states(node(FAILED, failed_gpus=1), S.REPAIR) == {S.REPAIR: 8}


def test_the_summary_counts_gpus_and_nodes_each_in_one_state() -> None:
    fresh = NOW - 60
    nodes = [
        *(NodeCapacity(f"h{i}", 8, PASSED, proven_at=fresh) for i in range(6)),
        NodeCapacity("f", 8, FAILED, failed_gpus=1),
        NodeCapacity("u", 4, None),
    ]
    summary = summarize(nodes, AGE, NOW)
    assert summary.gpus == {
        S.HEALTHY: 48,
        S.STALE: 0,
        S.UNTESTED: 4,
        S.FAILED: 1,
        S.WITHHELD: 7,
        S.REPAIR: 0,
        S.NEEDS_PERSON: 0,
    }
    assert S.WITHHELD not in summary.nodes
    assert (summary.nodes[S.HEALTHY], summary.nodes[S.FAILED], summary.nodes[S.UNTESTED]) == (
        6,
        1,
        1,
    )
    assert (summary.total_gpus, summary.total_nodes) == (60, 8)
    assert summary.healthy_ratio == 48 / 60
    assert summarize([], AGE, NOW).healthy_ratio == 1.0


def test_a_nodes_facts_give_its_verdict_repair_label_and_proof() -> None:
    record = RepairRecord(str(RepairState.REQUESTED), "Reboot", "XidError", 900, 900, "b", 1)
    entry = next_entry(None, Verdict.FAILED, reason=None, at=900, run="1", repair=record)
    body = {
        "metadata": {
            "name": "n1",
            "annotations": {entry_key("fleet"): entry.encode()},
            "labels": {"gpuval.dev/needs-repair": "true"},
        }
    }
    facts = NodeFacts.parse(body, "fleet").capacity(8, failed_gpus=2)
    assert (facts.tested, facts.repair, facts.needs_repair_label) == (FAILED, "Requested", True)
    assert (facts.gpus, facts.failed_gpus) == (8, 2)


def test_a_report_names_its_failing_gpus_by_index() -> None:
    failures = [{"gpu": 3, "check": "burn"}, {"gpu": 3, "check": "health"}, {"gpu": 5}, {}]
    assert failed_gpus(failures) == 2
    assert failed_gpus([{"check": "state"}]) == 0
    assert failed_gpus(None) == 0


def sample() -> ValidationState:
    state = ValidationState("fleet")
    nodes = [
        *(NodeCapacity(f"h{i}", 8, PASSED) for i in range(7)),
        NodeCapacity("f", 8, FAILED, failed_gpus=1),
    ]
    state.capacity = summarize(nodes, None, NOW)
    return state


def test_the_metrics_count_gpus_and_nodes_by_state_and_the_healthy_ratio() -> None:
    registry = Registry()
    registry["fleet"] = sample()
    text = generate_latest(make_registry(registry, per_gpu=False)).decode()
    got = {
        (s.name, s.labels.get("state", "")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.labels.get("validation") == "fleet"
    }
    assert got[("gpuval_validation_gpus", "healthy")] == 56
    assert got[("gpuval_validation_gpus", "failed")] == 1
    assert got[("gpuval_validation_gpus", "withheld")] == 7
    assert got[("gpuval_validation_gpus", "needsPerson")] == 0  # present at 0
    assert got[("gpuval_validation_capacity_nodes", "failed")] == 1
    assert ("gpuval_validation_capacity_nodes", "withheld") not in got
    assert got[("gpuval_validation_healthy_capacity_ratio", "")] == 56 / 64


def test_kubectl_gpuval_status_opens_with_the_capacity_line_in_both_views() -> None:
    status = capacity_status(sample().capacity)  # type: ignore[arg-type]
    assert status["healthyRatio"] == "0.8750"
    assert status["gpus"]["withheld"] == 7 and status["nodes"]["withheld"] == 0
    validation = GpuValidation.model_validate(
        {"metadata": {"name": "fleet"}, "status": {"capacity": status}}
    )
    line = (
        "Healthy capacity: 56 of 64 GPUs (87.5 %) proven healthy; 1 failed, "
        "7 withheld with their node; nodes: 7 of 8 healthy"
    )
    assert render.capacity_line(CapacityStatus.model_validate(status)) == line
    detail = render.render_status(fleet_of_units(validation, ()), validation)
    assert detail.splitlines()[0] == line
    listing = render.render_list([validation])
    assert listing.splitlines()[0] == f"fleet: {line}"
    assert listing.splitlines()[1].split()[0] == "NAME"
