"""The training check's loss fingerprint compared across nodes (gpuval_api.training), on losses
recorded on an H200: the node whose losses differ from its stack's majority is named with the first
step that differs; across stacks the comparison falls back to a stated tolerance."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from gpuval_api.training import (
    LossBaseline,
    NodeLosses,
    TrainingDeterminants,
    TrainingRecord,
    against_baseline,
    compare_losses,
    decode_loss,
    encode_loss,
    intern_losses,
    learn_losses,
    loss_digest,
    loss_mismatches,
)

RECORDED: dict[str, Any] = json.loads(
    (Path(__file__).parents[2] / "fixtures" / "train" / "h200-losses.json").read_text()
)
H200 = TrainingDeterminants.model_validate(RECORDED["determinants"])
TOLERANCE = 0.02


def _node(losses: list[str], determinants: TrainingDeterminants = H200) -> NodeLosses:
    record = TrainingRecord(losses=losses, digest=loss_digest(losses), determinants=determinants)
    return NodeLosses.of(record)


def _probe_stack(attention: str) -> TrainingDeterminants:
    """The probe's runs: the same model, 6 steps, one attention backend each."""
    return H200.model_copy(update={"steps": 6, "attention": attention})


def test_the_recorded_runs_agree_and_the_perturbed_one_is_named_at_step_10() -> None:
    assert RECORDED["run1"] == RECORDED["run2"]  # two runs on the H200: bit-identical
    nodes = {f"gpu-{i}": _node(RECORDED["run1"]) for i in range(3)}
    nodes["nudged"] = _node(RECORDED["perturbedAtStep10"])
    [mismatch] = loss_mismatches(nodes, TOLERANCE)
    assert mismatch.node == "nudged"
    assert mismatch.step == 10 and mismatch.steps == 65
    assert mismatch.value == decode_loss(RECORDED["perturbedAtStep10"][9])
    assert mismatch.expected == decode_loss(RECORDED["run1"][9])
    assert mismatch.peers == 3 and mismatch.reference_stack is None
    message = mismatch.message()
    assert "differs from step 10 of 65 on: 10.9794197 where 3 nodes of the same stack" in message
    assert "NVIDIA H200, driver 580.159.04, CUDA 13.0, torch 2.11.0+cu130" in message
    assert "(a difference of -2.48e-05, 2.26e-06 relative)" in message


def test_a_difference_far_below_any_tolerance_is_still_caught_within_a_stack() -> None:
    # The nudge moved step 10's loss by 2e-6 relative: only bit-exactness sees that.
    nudged = [decode_loss(t) for t in RECORDED["perturbedAtStep10"]]
    healthy = [decode_loss(t) for t in RECORDED["run1"]]
    worst = max(abs(a - b) / b for a, b in zip(nudged, healthy, strict=True))
    assert worst < 1e-3
    nodes = {"a": _node(RECORDED["run1"]), "b": _node(RECORDED["run1"])}
    nodes["c"] = _node(RECORDED["perturbedAtStep10"])
    assert [m.node for m in loss_mismatches(nodes, TOLERANCE)] == ["c"]


def test_identical_losses_blame_nobody() -> None:
    nodes = {f"n{i}": _node(RECORDED["run1"]) for i in range(5)}
    assert loss_mismatches(nodes, TOLERANCE) == []


def test_without_a_clear_majority_of_one_stack_nobody_is_blamed() -> None:
    lone = {"a": _node(RECORDED["run1"])}
    pair = {"a": _node(RECORDED["run1"]), "b": _node(RECORDED["perturbedAtStep10"])}
    two_two = {
        name: _node(RECORDED["run1"] if name in "ab" else RECORDED["perturbedAtStep10"])
        for name in "abcd"
    }
    assert loss_mismatches(lone, TOLERANCE) == []
    assert loss_mismatches(pair, TOLERANCE) == []
    assert loss_mismatches(two_two, TOLERANCE) == []


def test_another_stack_is_compared_within_the_tolerance_and_passes_inside_it() -> None:
    # Recorded: flash and efficient attention compute the same function with other rounding,
    # so their losses differ in the last bits from the first step on.
    flash, efficient = RECORDED["probe"]["flash"], RECORDED["probe"]["efficient"]
    assert flash[0] != efficient[0]
    nodes = {f"flash-{i}": _node(flash, _probe_stack("flash")) for i in range(3)}
    nodes["efficient"] = _node(efficient, _probe_stack("efficient"))
    assert loss_mismatches(nodes, TOLERANCE) == []


def test_another_stack_beyond_the_tolerance_is_named_and_the_message_says_why() -> None:
    flash, math_losses = RECORDED["probe"]["flash"], RECORDED["probe"]["math"]
    nodes = {f"flash-{i}": _node(flash, _probe_stack("flash")) for i in range(3)}
    nodes["math"] = _node(math_losses, _probe_stack("math"))
    [mismatch] = loss_mismatches(nodes, 1e-7)
    assert mismatch.node == "math" and mismatch.step == 1
    assert mismatch.tolerance == 1e-7 and mismatch.peers == 3
    assert mismatch.reference_stack is not None and "flash attention" in mismatch.reference_stack
    message = mismatch.message()
    assert "bit-exactness cannot hold across stacks" in message
    assert "math attention" in message and "flash attention" in message
    assert "within a relative tolerance of 1e-05 % (train.lossTolerance)" in message


def test_a_whole_stack_beyond_the_tolerance_is_named_node_by_node() -> None:
    flash = RECORDED["probe"]["flash"]
    far = [encode_loss(decode_loss(t) * 1.05) for t in flash]  # 5 % off at every step
    nodes = {f"flash-{i}": _node(flash, _probe_stack("flash")) for i in range(3)}
    nodes |= {f"other-{i}": _node(far, _probe_stack("efficient")) for i in range(2)}
    found = loss_mismatches(nodes, TOLERANCE)
    assert [m.node for m in found] == ["other-0", "other-1"]
    assert all(m.step == 1 and m.worst == pytest.approx(0.05, rel=1e-3) for m in found)


def test_losses_of_different_experiments_are_never_compared() -> None:
    other_seed = H200.model_copy(update={"seed": 7})
    nodes = {"a": _node(RECORDED["run1"]), "b": _node(RECORDED["run1"])}
    nodes["c"] = _node(RECORDED["perturbedAtStep10"], other_seed)
    assert loss_mismatches(nodes, TOLERANCE) == []


def test_a_nan_loss_differs_bit_for_bit_and_leaves_any_tolerance() -> None:
    nan = [*RECORDED["run1"][:20], encode_loss(math.nan), *RECORDED["run1"][21:]]
    nodes = {"a": _node(RECORDED["run1"]), "b": _node(RECORDED["run1"]), "c": _node(nan)}
    [mismatch] = loss_mismatches(nodes, TOLERANCE)
    assert mismatch.step == 21 and math.isnan(mismatch.value)


def test_a_loss_is_recorded_exactly_as_its_float32_bits() -> None:
    for value in (10.812809, 1e-30, 3.4e38, -0.0, math.inf):
        text = encode_loss(value)
        assert len(text) == 8 and encode_loss(decode_loss(text)) == text
    assert decode_loss(RECORDED["run1"][0]) == pytest.approx(10.812809, abs=1e-6)


def test_nodes_with_the_same_losses_share_one_interned_sequence() -> None:
    first = _node(list(RECORDED["run1"]))
    second = _node(list(RECORDED["run1"]))
    assert first.sequence is second.sequence
    assert first.experiment is second.experiment and first.stack is second.stack
    assert intern_losses(RECORDED["perturbedAtStep10"]) is not first.sequence


def test_a_record_refuses_a_loss_that_is_not_8_hex_digits() -> None:
    with pytest.raises(ValidationError) as refused:
        TrainingRecord(losses=["10.8"], digest="x", determinants=H200)
    assert "losses.0" in str(refused.value) and "10.8" in str(refused.value)


# -- issue 42 part 6: how each node was compared, undecided pairs, the GpuBaseline's losses --


def _record(losses: list[str], determinants: TrainingDeterminants = H200) -> TrainingRecord:
    return TrainingRecord(losses=losses, digest=loss_digest(losses), determinants=determinants)


def _h200_baseline(nodes: int = 2) -> LossBaseline:
    return LossBaseline.of(_record(RECORDED["run1"]), nodes, "two H200 runs")


def test_two_nodes_of_one_stack_that_differ_are_undecided_and_both_are_named() -> None:
    pair = {"node-a": _node(RECORDED["run1"]), "node-b": _node(RECORDED["perturbedAtStep10"])}

    outcome = compare_losses(pair, TOLERANCE)

    assert outcome.mismatches == []
    [undecided] = outcome.undecided
    assert undecided.nodes == ("node-a", "node-b") and undecided.step == 10
    assert "undecided: node-a, node-b (2 nodes of one stack" in undecided.message()
    assert "from step 10 of 65 on" in undecided.message()
    [how] = outcome.compared
    assert "node-a, node-b): undecided, they differ and no majority" in how


def test_each_stack_says_how_it_was_compared_and_why() -> None:
    flash, efficient = RECORDED["probe"]["flash"], RECORDED["probe"]["efficient"]
    nodes = {n: _node(flash, _probe_stack("flash")) for n in "abc"}
    nodes["lone"] = _node(efficient, _probe_stack("efficient"))

    outcome = compare_losses(nodes, TOLERANCE)

    assert outcome.mismatches == [] and outcome.undecided == []
    exact, across = sorted(outcome.compared, key=lambda line: line.startswith("lone"))
    assert exact.startswith("3 nodes of NVIDIA H200") and "flash attention" in exact
    assert "bit for bit with the losses 3 of them computed (same stack" in exact
    assert across.startswith("lone (NVIDIA H200") and "efficient attention" in across
    assert "no peer of its stack, so compared within 2 % (train.lossTolerance)" in across
    assert "bit-exactness cannot hold across stacks" in across


def test_a_lone_node_with_nobody_to_compare_with_says_so() -> None:
    [how] = compare_losses({"solo": _node(RECORDED["run1"])}, TOLERANCE).compared
    assert how.startswith("solo (NVIDIA H200") and "not compared, no other node" in how


def test_a_node_of_the_baselines_stack_is_compared_bit_for_bit_and_a_nudge_fails_it() -> None:
    healthy = against_baseline(_record(RECORDED["run2"]), "h200", [_h200_baseline()], TOLERANCE)
    assert healthy.mismatch is None and healthy.exact
    assert "bit for bit with the loss digest" in healthy.how and healthy.how.endswith(": equal")

    nudged = against_baseline(
        _record(RECORDED["perturbedAtStep10"]), "h200", [_h200_baseline()], TOLERANCE
    )

    assert nudged.mismatch is not None and nudged.exact
    assert nudged.mismatch.step == 10 and nudged.how.endswith(": differs")
    message = nudged.mismatch.message()
    assert "which h200 learned from 2 nodes of the same stack (NVIDIA H200" in message
    assert "from step 10 of 65 on: 10.9794197 where" in message


def test_a_node_of_another_stack_is_compared_with_the_baseline_within_the_tolerance() -> None:
    flash, efficient, math_losses = (RECORDED["probe"][a] for a in ("flash", "efficient", "math"))
    entry = LossBaseline.of(_record(flash, _probe_stack("flash")), 3)

    inside = against_baseline(
        _record(efficient, _probe_stack("efficient")), "h200", [entry], TOLERANCE
    )
    beyond = against_baseline(_record(math_losses, _probe_stack("math")), "h200", [entry], 1e-9)

    assert inside.mismatch is None and not inside.exact
    assert "compared within 2 % (train.lossTolerance) with the losses h200 holds" in inside.how
    assert "bit-exactness cannot hold across stacks" in inside.how
    assert beyond.mismatch is not None and beyond.mismatch.reference_stack is not None
    assert "that h200 holds for another stack" in beyond.mismatch.message()


def test_a_baseline_without_the_experiment_compares_nothing_and_says_so() -> None:
    other = H200.model_copy(update={"seed": 7})
    found = against_baseline(_record(RECORDED["run1"], other), "h200", [_h200_baseline()], 0.02)
    assert found.mismatch is None and found.how.startswith("not compared: h200 holds no losses")


def test_learning_keeps_a_stacks_majority_and_nothing_where_its_nodes_disagree() -> None:
    agree = [_node(RECORDED["run1"]), _node(RECORDED["run2"]), _node(RECORDED["perturbedAtStep10"])]
    [learned] = learn_losses(agree, "run 1")
    assert learned.digest == loss_digest(RECORDED["run1"]) and learned.nodes == 2
    assert learned.losses == RECORDED["run1"] and learned.source == "run 1"
    assert learn_losses([_node(RECORDED["run1"]), _node(RECORDED["perturbedAtStep10"])]) == []
    assert learn_losses([None, _node(RECORDED["run1"])]) == []  # one node: no majority
