"""Fleet-wide fingerprints: which node computes a different burn reference, or other training
losses, than its peers."""

from __future__ import annotations

from gpuval_api.training import decode_loss, encode_loss, loss_digest
from gpuval_operator.run.facts import training_losses
from gpuval_operator.run.fingerprints import fingerprint_outliers, training_comparison

H200 = "NVIDIA H200|sm132|n16384|bf16|torch 2.11.0|cublas 13.1"
H100 = "NVIDIA H100|sm132|n16384|bf16|torch 2.11.0|cublas 13.1"


def test_the_node_that_differs_from_the_majority_is_named_with_both_values() -> None:
    nodes = {f"n{i}": [("bf16", H200, "aaaa")] for i in range(4)}
    nodes["n2"] = [("bf16", H200, "bbbb")]
    [outlier] = fingerprint_outliers(nodes)
    assert (outlier.node, outlier.value, outlier.majority, outlier.peers) == (
        "n2",
        "bbbb",
        "aaaa",
        3,
    )
    assert outlier.field == "burnFingerprint.bf16"
    assert "differs from aaaa, which 3 nodes" in outlier.message()


def test_only_nodes_with_the_same_determinants_are_compared() -> None:
    nodes = {
        "a": [("bf16", H200, "aaaa")],
        "b": [("bf16", H200, "aaaa")],
        "c": [("bf16", H100, "cccc")],  # another part: another reference, rightly
    }
    assert fingerprint_outliers(nodes) == []


def test_without_a_clear_majority_nobody_is_blamed() -> None:
    tie = {"a": [("bf16", H200, "aaaa")], "b": [("bf16", H200, "bbbb")]}
    assert fingerprint_outliers(tie) == []
    two_two = {n: [("bf16", H200, v)] for n, v in zip("abcd", ["x", "x", "y", "y"], strict=True)}
    assert fingerprint_outliers(two_two) == []


def test_each_precision_is_compared_on_its_own() -> None:
    fp64 = H200.replace("bf16", "fp64")
    nodes = {n: [("bf16", H200, "aaaa"), ("fp64", fp64, "dddd")] for n in "abc"}
    nodes["c"] = [("bf16", H200, "aaaa"), ("fp64", fp64, "eeee")]
    assert [(o.node, o.precision) for o in fingerprint_outliers(nodes)] == [("c", "fp64")]


def _result(losses: list[str], driver: str = "580.159.04") -> dict[str, object]:
    """A result document's train check, as an agent writes it."""
    determinants = {
        "gpuProduct": "NVIDIA H200",
        "gpuCount": 8,
        "driver": driver,
        "cuda": "13.0",
        "torch": "2.11.0+cu130",
        "nccl": "2.28.9",
        "model": "large d2048 L18 H16 V32768 S2048 B16",
        "seed": 1234,
        "steps": len(losses),
        "attention": "flash",
    }
    training = {"losses": losses, "digest": loss_digest(losses), "determinants": determinants}
    return {"checks": [{"name": "burn"}, {"name": "train", "training": training}]}


HEALTHY = [encode_loss(10.8 - step / 100) for step in range(65)]


def test_the_node_whose_training_losses_differ_is_named_with_its_first_step() -> None:
    wrong = [*HEALTHY[:11], *(encode_loss(decode_loss(t) * 1.001) for t in HEALTHY[11:])]
    facts = {f"n{i}": training_losses(_result(HEALTHY)) for i in range(4)}
    facts["bad"] = training_losses(_result(wrong))
    facts["untrained"] = training_losses({"checks": [{"name": "burn"}]})
    [mismatch] = training_comparison(facts, 0.02).mismatches
    assert (mismatch.node, mismatch.step, mismatch.peers) == ("bad", 12, 4)
    assert mismatch.field == "trainingLoss"
    assert facts["untrained"] is None


def test_a_node_of_another_driver_is_held_to_the_tolerance_not_to_its_bits() -> None:
    drifted = [encode_loss(decode_loss(t) * 1.0001) for t in HEALTHY]
    facts = {f"n{i}": training_losses(_result(HEALTHY)) for i in range(3)}
    facts["newer"] = training_losses(_result(drifted, driver="590.10"))
    assert training_comparison(facts, 0.02).mismatches == []
    [mismatch] = training_comparison(facts, 1e-5).mismatches
    assert mismatch.node == "newer" and "driver 590.10" in mismatch.message()


def test_a_training_record_this_version_cannot_read_compares_with_nothing() -> None:
    broken = _result(HEALTHY)
    broken["checks"][1]["training"]["losses"] = ["not-hex"]  # type: ignore[index]
    assert training_losses(broken) is None


def test_ten_thousand_nodes_of_one_stack_hold_one_loss_sequence() -> None:
    # The memory bound at 10,000 nodes: one interned sequence and two interned keys shared by
    # every node, a digest each; the comparison groups by digest, not by step.
    facts = [training_losses(_result(list(HEALTHY))) for _ in range(10_000)]
    assert len({id(f.sequence) for f in facts if f is not None}) == 1
    assert len({id(f.stack) for f in facts if f is not None}) == 1
    nodes = {f"n{i}": f for i, f in enumerate(facts)}
    assert training_comparison(nodes, 0.02).mismatches == []
