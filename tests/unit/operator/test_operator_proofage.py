"""spec.maxProofAgeSeconds: which nodes are due, in which order, when the next one is, and how
many are proven within the age (gpuval_operator.proofage)."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpuval_api import keys
from gpuval_api.crd import ProofStatus, RunTrigger
from gpuval_api.result import Verdict
from gpuval_kubectl.render import proof_lines
from gpuval_operator.nodes.entries import NodeEntry, entry_key, next_entry, plan_node
from gpuval_operator.nodes.facts import NodeFacts
from gpuval_operator.proofage import NodeProof, due, due_at, next_due, summarize
from gpuval_operator.readmodel.metrics import make_registry
from gpuval_operator.readmodel.registry import Registry
from gpuval_operator.readmodel.validation import ValidationState
from gpuval_operator.run.lifecycle import Decision, RunFacts, Step, decide

AGE = 100.0


def test_the_stale_nodes_are_due_stalest_first_and_the_fresh_one_is_not() -> None:
    nodes = [
        NodeProof("a", 8, proven_at=950.0),  # fresh
        NodeProof("b", 8, proven_at=700.0),
        NodeProof("c", 8, proven_at=800.0),
        NodeProof("d", 8, proven_at=None),  # never proven, never tested
    ]
    assert [n.name for n in due(nodes, AGE, now=1000.0)] == ["d", "b", "c"]


def test_a_run_also_takes_the_nodes_due_within_a_tenth_of_the_age() -> None:
    nodes = [
        NodeProof("a", 8, proven_at=900.0),  # due at 1000
        NodeProof("b", 8, proven_at=909.0),  # due at 1009: within 10 s (a tenth of 100)
        NodeProof("c", 8, proven_at=911.0),  # due at 1011: the next run's
    ]
    assert [n.name for n in due(nodes, AGE, now=1000.0)] == ["a", "b"]


def test_a_node_without_proof_is_tried_again_once_per_age_after_its_last_test() -> None:
    failed = NodeProof("f", 8, proven_at=None, tested_at=950.0)
    busy = NodeProof("n", 8, proven_at=500.0, tested_at=960.0)  # NotRun since its proof
    assert due_at(failed, AGE) == 1050.0
    assert due_at(busy, AGE) == 1060.0
    assert due([failed, busy], AGE, now=1000.0) == []
    assert [n.name for n in due([failed, busy], AGE, now=1045.0)] == ["f"]


def test_the_next_wake_is_the_first_expiry() -> None:
    nodes = [NodeProof("a", 8, proven_at=950.0), NodeProof("b", 8, proven_at=920.0)]
    assert next_due(nodes, AGE) == 1020.0
    assert next_due([], AGE) is None


def test_the_summary_counts_nodes_and_gpus_within_the_age_and_the_oldest_proof() -> None:
    nodes = [
        NodeProof("a", 8, proven_at=950.0),
        NodeProof("b", 4, proven_at=700.0),
        NodeProof("c", 2, proven_at=None, tested_at=990.0),
    ]
    summary = summarize(nodes, AGE, now=1000.0)
    assert (summary.nodes, summary.within_nodes, summary.stale) == (3, 1, 2)
    assert (summary.gpus, summary.within_gpus) == (14, 8)
    assert summary.oldest == 700.0
    assert summary.next_due == 800.0


# The proof on the node: written with the verdict's own patch (gpuval_operator.nodes.entries).

STAMP = "2026-12-07T12:00:00Z"


def _node(annotations: dict[str, str]) -> dict[str, object]:
    return {"metadata": {"name": "n1", "resourceVersion": "7", "annotations": annotations}}


def _entry(verdict: Verdict, run: str = "2-ab") -> NodeEntry:
    return next_entry(None, verdict, reason=None, at=100, run=run)


def test_a_pass_writes_the_proof_in_the_verdicts_patch() -> None:
    plan = plan_node(_node({}), "fleet", _entry(Verdict.PASSED), STAMP, proof="fleet/2-ab created")
    assert plan.patch is not None
    annotations = plan.patch["metadata"]["annotations"]
    assert annotations[keys.NODE_ANNOTATION_PROVEN_AT] == STAMP
    assert annotations[keys.NODE_ANNOTATION_PROVEN_BY] == "fleet/2-ab created"
    assert entry_key("fleet") in annotations  # one patch: the entry and the proof together


def test_a_failure_voids_the_proof_and_a_not_run_keeps_it() -> None:
    proven = {
        keys.NODE_ANNOTATION_PROVEN_AT: "2026-12-01T00:00:00Z",
        keys.NODE_ANNOTATION_PROVEN_BY: "fleet/1-aa schedule",
    }
    failed = plan_node(_node(proven), "fleet", _entry(Verdict.FAILED), STAMP, proof="x")
    assert failed.patch is not None
    annotations = failed.patch["metadata"]["annotations"]
    assert annotations[keys.NODE_ANNOTATION_PROVEN_AT] is None
    assert annotations[keys.NODE_ANNOTATION_PROVEN_BY] is None
    not_run = plan_node(_node(proven), "fleet", _entry(Verdict.NOT_RUN), STAMP, proof="x")
    assert not_run.patch is not None
    assert keys.NODE_ANNOTATION_PROVEN_AT not in not_run.patch["metadata"]["annotations"]


def test_another_validations_failure_leaves_no_proof_to_a_pass() -> None:
    other = {entry_key("other"): _entry(Verdict.FAILED, "1-cc").encode()}
    plan = plan_node(_node(other), "fleet", _entry(Verdict.PASSED), STAMP, proof="fleet/2-ab x")
    assert plan.patch is not None
    assert keys.NODE_ANNOTATION_PROVEN_AT not in plan.patch["metadata"]["annotations"]


# The controller's step (gpuval_operator.run.lifecycle.decide) with proofs.

DONE = RunFacts(generation=2, completed=True)


def _decide(now: float, proof_due_at: float | None, next_run_at: float | None = None) -> Decision:
    return decide(
        valid=True,
        generation=2,
        run=DONE,
        scheduled=next_run_at is not None,
        next_run_at=next_run_at,
        now=now,
        proof_due_at=proof_due_at,
    )


def test_a_completed_validation_sleeps_until_the_first_proof_expires_then_starts_a_run() -> None:
    assert _decide(1000.0, 1500.0) == Decision(Step.WAIT, until=1500.0)
    assert _decide(1500.0, 1500.0) == Decision(Step.START, RunTrigger.PROOF_EXPIRED)


def test_the_schedules_tick_and_the_first_expiry_wake_whichever_comes_first() -> None:
    assert _decide(1000.0, 1500.0, next_run_at=1200.0) == Decision(Step.WAIT, until=1200.0)
    assert _decide(1000.0, 1100.0, next_run_at=1200.0) == Decision(Step.WAIT, until=1100.0)
    # Both due: the tick takes every node.
    assert _decide(1300.0, 1100.0, next_run_at=1200.0) == Decision(Step.START, RunTrigger.SCHEDULE)


def test_an_active_run_goes_on_whatever_proof_expires() -> None:
    decision = decide(
        valid=True,
        generation=2,
        run=RunFacts(generation=2, completed=False),
        scheduled=False,
        next_run_at=None,
        now=2000.0,
        proof_due_at=1000.0,
    )
    assert decision == Decision(Step.EXECUTE)


def test_the_metrics_show_the_fraction_proven_within_the_age_and_the_oldest_proofs_age() -> None:
    registry = Registry()
    state = ValidationState("fleet")
    nodes = [NodeProof("a", 8, proven_at=950.0), NodeProof("b", 24, proven_at=700.0)]
    state.proof = summarize(nodes, AGE, now=1000.0)
    registry["fleet"] = state
    text = generate_latest(make_registry(registry, per_gpu=False)).decode()
    got = {
        s.name: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.labels.get("validation") == "fleet"
    }
    assert got["gpuval_validation_gpus_proven_within_age_ratio"] == 0.25
    assert got["gpuval_validation_nodes_proven_within_age_ratio"] == 0.5
    assert got["gpuval_validation_proof_stale_nodes"] == 1
    assert got["gpuval_validation_proof_max_age_seconds"] == AGE
    assert got["gpuval_validation_proof_oldest_age_seconds"] > 300.0  # now - 700


def test_kubectl_gpuval_status_shows_the_proof_line() -> None:
    status = ProofStatus(
        max_age_seconds=604800,
        within_age=7,
        stale=1,
        oldest="2026-11-30T00:00:00Z",
        next_expiry_at="2026-12-08T00:00:00Z",
    )
    assert proof_lines(status) == [
        "Proof age: 7 of 8 nodes proven within 604800s, 1 stale; oldest proof "
        "2026-11-30T00:00:00Z; next proof-expired run 2026-12-08T00:00:00Z"
    ]
    assert proof_lines(None) == []


def test_a_node_counts_from_its_proof_after_a_pass_and_from_its_test_after_a_failure() -> None:
    def facts(verdict: Verdict, proven: str | None) -> NodeFacts:
        annotations = {entry_key("fleet"): next_entry(None, verdict, reason=None, at=900, run="1")}
        node = {
            "metadata": {
                "name": "n1",
                "annotations": {k: v.encode() for k, v in annotations.items()}
                | ({keys.NODE_ANNOTATION_PROVEN_AT: proven} if proven else {}),
            }
        }
        return NodeFacts.parse(node, "fleet")

    passed = facts(Verdict.PASSED, "1970-01-01T00:05:00Z").proof()
    assert (passed.proven_at, passed.tested_at) == (300.0, None)
    failed = facts(Verdict.FAILED, None).proof()
    assert (failed.proven_at, failed.tested_at) == (None, 900)
    assert facts(Verdict.PASSED, None).proof(tested_at=950.0).tested_at == 950.0
