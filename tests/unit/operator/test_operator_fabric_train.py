"""The run-wide comparison of the fabric's training phase (spec.fabric.train): a node slow in its
training pairs is named through the pair rounds, against the run's training floor; slow training
groups and groups whose losses differ are listed, no node blamed; nothing is settled early that the
training could still change (gpuval_operator.fabric.trainverdicts, verdicts, early, rollup).
Pure: no cluster."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from gpuval_api.fabric import FabricConfig, FabricThresholds, pair_rounds
from gpuval_api.fabric.summary import FabricRunStatus, FabricTrainRunStatus
from gpuval_api.fabric.train import FabricTrain, FabricTrainPair, FabricTrainResult
from gpuval_api.reasons import Reason
from gpuval_api.result import Verdict
from gpuval_api.training import TrainingDeterminants, TrainingRecord, encode_loss, loss_digest
from gpuval_operator.fabric.early import early_finals
from gpuval_operator.fabric.facts import FabricFacts, FabricTrainFacts
from gpuval_operator.fabric.plan import agent_seconds
from gpuval_operator.fabric.rollup import train_status
from gpuval_operator.fabric.verdicts import Final, GroupEvidence, MemberResult, classify
from tests.unit.operator.test_operator_fabric_verdicts import group, names, pairs_of

TRAIN = FabricTrain(enabled=True)
HEALTHY = 50_000.0  # tokens/s per GPU
GPUS = 8  # per node
PASS = MemberResult(Verdict.PASSED, None, "fine", by_agent=True)
MODEL = "tiny d256 L4 H2 V8192 S256 B4"


def losses(offset: float = 0.0, steps: int = 23) -> list[str]:
    return [encode_loss(9.0 - 0.1 * s + (offset if s >= 10 else 0.0)) for s in range(steps)]


def train_result(
    nodes: Sequence[str],
    speed: Mapping[str, float] | None = None,
    offset: float = 0.0,
    figure: float = HEALTHY,
) -> FabricTrainResult:
    """A group's training phase: its pair rounds at HEALTHY times the slower node's speed, the
    group at `figure` times its slowest node's, its losses `offset` from step 11 on."""
    speed = speed or {}
    pairs = [
        FabricTrainPair(
            round=number,
            a=nodes[a],
            b=nodes[b],
            gpus=2 * GPUS,
            tokens_per_second=HEALTHY
            * 2
            * GPUS
            * min(speed.get(nodes[a], 1.0), speed.get(nodes[b], 1.0)),
            step_seconds=0.1,
        )
        for number, rnd in enumerate(pair_rounds(len(nodes)), start=1)
        for a, b in rnd
    ]
    sequence = losses(offset)
    slowest = min((speed.get(n, 1.0) for n in nodes), default=1.0)
    return FabricTrainResult(
        model=MODEL,
        nodes=len(nodes),
        gpus=GPUS * len(nodes),
        tokens_per_second=figure * slowest * GPUS * len(nodes),
        step_median_seconds=0.1,
        record=TrainingRecord(
            losses=sequence,
            digest=loss_digest(sequence),
            determinants=TrainingDeterminants(
                gpu_product="NVIDIA H200",
                gpu_count=GPUS * len(nodes),
                driver="580.159.04",
                model=f"{MODEL} across {len(nodes)} nodes",
                seed=1234,
                steps=len(sequence),
                attention="flash",
            ),
        ),
        pairs=pairs,
    )


def trained(
    name: str,
    nodes: Sequence[str],
    results: Sequence[MemberResult] | None = None,
    *,
    speed: Mapping[str, float] | None = None,
    offset: float = 0.0,
    figure: float = HEALTHY,
) -> GroupEvidence:
    base = group(name, nodes, results=results)
    facts = FabricTrainFacts.of(train_result(nodes, speed, offset, figure))
    return GroupEvidence(base.name, base.nodes, base.results, base.busbw, base.pairs, train=facts)


def failed(found: Mapping[str, Final]) -> dict[str, Reason | None]:
    return {n: f.reason for n, f in found.items() if f.verdict is not Verdict.PASSED}


def test_a_node_slow_in_its_training_pairs_is_named_and_its_partners_pass() -> None:
    found = classify(
        [trained("g1", names("a"), speed={"a3": 0.7}), trained("g2", names("b"))],
        FabricThresholds(),
        TRAIN,
    )
    assert failed(found.nodes) == {"a3": Reason.FABRIC_TRAIN_SLOW_NODE}
    message = found.nodes["a3"].message
    assert (
        "slow in every training pair it was in (training 35,000, 35,000 tokens/s per GPU" in message
    )
    assert "floor 45,000" in message and "its partners a2, a4 were fine with other nodes" in message
    assert found.train is not None and found.train.median_pair == pytest.approx(HEALTHY)
    # Its group is slower than the other, and a node explains it: not a slow training group.
    assert found.train.slow == []


def test_without_the_training_phase_asked_for_its_figures_judge_no_one() -> None:
    groups = [trained("g1", names("a"), speed={"a3": 0.7}), trained("g2", names("b"))]
    for train in (None, FabricTrain(enabled=False)):
        found = classify(groups, FabricThresholds(), train)
        assert failed(found.nodes) == {} and found.train is None


def test_a_node_its_agent_named_for_training_passes_when_the_run_does_not_name_it() -> None:
    nodes = names("a")
    said = MemberResult(Verdict.FAILED, Reason.FABRIC_TRAIN_SLOW_NODE, "slow in its group", True)
    results = [said if n == "a3" else PASS for n in nodes]
    found = classify([trained("g1", nodes, results=results)], FabricThresholds(), TRAIN)
    assert failed(found.nodes) == {}
    assert "its agent said: FabricTrainSlowNode" in found.nodes["a3"].message


def test_what_the_all_reduce_named_against_a_node_comes_before_its_training() -> None:
    nodes = names("a")
    base = group("g1", nodes, pairs=pairs_of(nodes, {"a3": 0.7}))
    facts = FabricTrainFacts.of(train_result(nodes, speed={"a3": 0.7}))
    evidence = GroupEvidence("g1", base.nodes, base.results, base.busbw, base.pairs, train=facts)
    found = classify([evidence, trained("g2", names("b"))], FabricThresholds(), TRAIN)
    assert failed(found.nodes) == {"a3": Reason.FABRIC_SLOW_NODE}


def test_a_group_training_slowly_with_no_node_named_is_listed_and_blames_no_one() -> None:
    groups = [
        trained("g1", names("a"), figure=HEALTHY * 0.7),
        trained("g2", names("b")),
        trained("g3", names("c")),
    ]
    found = classify(groups, FabricThresholds(), TRAIN)
    assert failed(found.nodes) == {}
    assert found.train is not None
    [slow] = found.train.slow
    assert slow.name == "g1" and slow.floor == pytest.approx(HEALTHY * 0.9)


def test_a_group_whose_losses_differ_is_listed_with_the_step_and_blames_no_one() -> None:
    groups = [
        trained("g1", names("a"), offset=0.001),
        trained("g2", names("b")),
        trained("g3", names("c")),
    ]
    found = classify(groups, FabricThresholds(), TRAIN)
    assert failed(found.nodes) == {}
    assert found.train is not None
    [odd] = found.train.mismatched
    assert odd.name == "g1" and odd.mismatch is not None and odd.mismatch.step == 11
    status = FabricTrainRunStatus.model_validate(train_status(found.train))
    [entry] = status.mismatched_groups
    assert (entry.group, entry.step, entry.nodes) == ("g1", 11, names("a"))
    assert (
        "differ from step 11 of 23 on" in entry.message and "2 groups of the same" in entry.message
    )


def test_groups_of_another_size_are_not_compared_with_these() -> None:
    groups = [
        trained("g1", names("a", 4), offset=0.001, figure=HEALTHY * 0.7),
        trained("g2", names("b")),
        trained("g3", names("c")),
    ]
    found = classify(groups, FabricThresholds(), TRAIN)
    assert found.train is not None and found.train.slow == [] and found.train.mismatched == []


def test_a_group_with_a_training_pair_below_the_ceiling_is_not_settled_early() -> None:
    slow = trained("g1", names("a"), speed={"a3": 0.7})
    fine = trained("g2", names("b"))
    both = early_finals([slow, fine], 0, FabricThresholds(), train=TRAIN)
    assert set(both) == set(names("b"))
    # Without the training phase asked for, both groups' all-reduce says nothing against them.
    assert set(early_finals([slow, fine], 0, FabricThresholds())) == set(names("a") + names("b"))


def test_the_status_lists_the_training_phase_and_validates() -> None:
    found = classify(
        [
            trained("g1", names("a"), figure=HEALTHY * 0.7),
            trained("g2", names("b")),
            trained("g3", names("c")),
        ],
        FabricThresholds(),
        TRAIN,
    )
    assert found.train is not None
    body = train_status(found.train)
    status = FabricRunStatus.model_validate({"train": body})
    assert status.train is not None
    assert status.train.median_pair_tokens_per_second_per_gpu == pytest.approx(HEALTHY)
    [slow] = status.train.slow_groups
    assert slow.group == "g1" and slow.tokens_per_second_per_gpu == pytest.approx(HEALTHY * 0.7)


def test_a_reports_training_is_read_from_its_agents_result() -> None:
    result = train_result(names("a"))
    fabric = {
        "group": "g1",
        "rank": 0,
        "world": 8,
        "verdict": "Passed",
        "result": {"verdict": "Passed", "train": result.model_dump(mode="json", by_alias=True)},
    }
    facts = FabricFacts.parse(fabric)
    assert facts is not None and facts.train is not None
    assert facts.train.figure == pytest.approx(HEALTHY)
    assert len(facts.train.pairs) == 8 and facts.train.losses is not None


def test_the_training_phase_lengthens_the_fabric_pods_deadline() -> None:
    plain = FabricConfig()
    with_training = FabricConfig(train=FabricTrain(enabled=True, timeout_seconds=300))
    rounds = len(pair_rounds(8)) + 1
    extra = (plain.timeouts.init_seconds + 300) * (1 + rounds)
    assert agent_seconds(with_training, 8) == agent_seconds(plain, 8) + extra
