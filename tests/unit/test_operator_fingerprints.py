"""Fleet-wide burn fingerprints: which node computes a different reference than its peers."""

from __future__ import annotations

from gpuval_operator.run.fingerprints import fingerprint_outliers

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
