"""Who a fabric group's pair rounds name (gpuval_api.fabric.isolation): the reference, the suspects,
the confirmation round, the blame and its words. Pure: no cluster."""

from __future__ import annotations

import pytest

from gpuval_api.fabric import FabricPair, FabricThresholds, pair_rounds
from gpuval_api.fabric.isolation import (
    TRAINING,
    blame,
    confirmation_pairs,
    find_suspects,
    reference,
    reference_busbw,
    round_pairs,
)
from gpuval_api.fabric.train import FabricTrain, FabricTrainPair
from gpuval_api.reasons import Reason
from tests.support.fabricmodel import BASE, Fabric


def _pairs(figures: dict[tuple[str, str], float | None], round_of: int = 1) -> list[FabricPair]:
    return [
        FabricPair(round=round_of, a=a, b=b, bytes=1 << 30, busbw_gbps=busbw)
        for (a, b), busbw in figures.items()
    ]


def _ring(names: str, slow: dict[tuple[str, str], float | None]) -> list[FabricPair]:
    edges = [(names[i], names[(i + 1) % len(names)]) for i in range(len(names))]
    return _pairs({edge: slow.get(edge, 46.0) for edge in edges})


def _named(pairs: tuple[FabricPair, ...] | list[FabricPair]) -> dict[str, Reason]:
    floor = FabricThresholds().floor(reference_busbw(pairs))
    return {b.node: b.reason for b in blame(pairs, floor)}


def test_a_node_slow_with_both_partners_is_named_and_its_partners_are_not() -> None:
    pairs = _ring("abcdefgh", {("c", "d"): 23.0, ("b", "c"): 22.0})
    suspects = find_suspects(pairs, floor=41.4)
    assert suspects.nodes == ("c",) and suspects.links == ()
    [(node, partner)] = confirmation_pairs(suspects, pairs)
    assert node == "c" and partner in suspects.good and partner not in ("b", "d")
    pairs.append(FabricPair(round=0, a="c", b=partner, bytes=1 << 30, busbw_gbps=23.5))
    [found] = blame(pairs, floor=41.4)
    assert found.node == "c" and found.reason is Reason.FABRIC_SLOW_NODE
    assert set(found.partners) == {"b", "d"}
    assert "its partners b, d were fine with other nodes" in found.message
    assert f"again with a good node: {partner} (23.5 GB/s)" in found.message


def test_a_slow_pair_whose_nodes_are_fine_elsewhere_is_a_link_naming_both() -> None:
    pairs = _ring("abcdefgh", {("e", "f"): 30.0})
    assert find_suspects(pairs, floor=41.4).links == (("e", "f"),)
    found = blame(pairs, floor=41.4)
    assert [(b.node, b.reason, b.partners) for b in found] == [
        ("e", Reason.FABRIC_SLOW_LINK, ("f",)),
        ("f", Reason.FABRIC_SLOW_LINK, ("e",)),
    ]


def test_a_suspect_that_is_fast_again_with_a_good_partner_is_not_blamed() -> None:
    pairs = _ring("abcdef", {("c", "d"): 23.0, ("b", "c"): 22.0})
    pairs.append(FabricPair(round=0, a="c", b="a", bytes=1 << 30, busbw_gbps=45.8))
    assert blame(pairs, floor=41.4) == []


def test_a_link_that_is_fast_when_tested_again_is_not_blamed() -> None:
    pairs = _ring("abcdef", {("e", "f"): 30.0})
    pairs.append(FabricPair(round=0, a="e", b="f", bytes=1 << 30, busbw_gbps=46.1))
    assert blame(pairs, floor=41.4) == []


def test_a_failed_pair_counts_as_slow() -> None:
    pairs = _ring("abcd", {("a", "b"): None, ("d", "a"): None})
    [found] = blame(pairs, floor=41.4)
    assert found.node == "a" and "failed" in found.message


def test_the_reference_is_what_each_nodes_best_pair_reaches_so_a_slow_node_cannot_lower_it() -> (
    None
):
    # Three nodes, one at 0.7: it sits in two of the three pairs, so the median pair is its slow
    # figure; the median of each node's best pair is the healthy one.
    pairs = Fabric(speed={"n0": 0.7}).rounds(["n0", "n1", "n2"])
    figures = [p.busbw_gbps for p in round_pairs(pairs)]
    assert sorted(figures) == pytest.approx([0.7 * BASE, 0.7 * BASE, BASE])
    assert reference_busbw(pairs) == pytest.approx(BASE)
    assert _named(pairs) == {"n0": Reason.FABRIC_SLOW_NODE}


def test_in_a_group_of_three_the_slow_node_is_confirmed_with_a_node_its_pairs_cleared() -> None:
    rounds = [p for p in Fabric(speed={"n1": 0.7}).rounds(["n0", "n1", "n2"]) if p.round >= 1]
    floor = FabricThresholds().floor(reference_busbw(rounds))
    suspects = find_suspects(rounds, floor)
    assert suspects.nodes == ("n1",) and set(suspects.good) == {"n0", "n2"}
    assert len(confirmation_pairs(suspects, rounds)) == 1
    assert len(pair_rounds(3)) + 1 == 4, "three pair rounds and the confirmation"


def test_two_slow_nodes_side_by_side_are_both_named_and_neither_is_called_fine() -> None:
    nodes = [f"n{i}" for i in range(8)]
    pairs = Fabric(speed={"n3": 0.8, "n4": 0.8}).rounds(nodes)
    floor = FabricThresholds().floor(reference_busbw(pairs))
    found = {b.node: b for b in blame(pairs, floor)}
    assert {n: b.reason for n, b in found.items()} == {
        "n3": Reason.FABRIC_SLOW_NODE,
        "n4": Reason.FABRIC_SLOW_NODE,
    }
    assert "its partner n2 was fine with other nodes" in found["n3"].message
    assert "n4 is slow in every pair too, named on its own" in found["n3"].message
    assert "its partner n5 was fine with other nodes" in found["n4"].message
    assert "n3 is slow in every pair too" in found["n4"].message
    assert "n4 was fine" not in found["n3"].message and "n3 was fine" not in found["n4"].message
    # Each was confirmed with a good node it had not been paired with.
    confirmations = {frozenset((p.a, p.b)) for p in pairs if p.round == 0}
    assert all(len(c & {"n2", "n3", "n4", "n5"}) == 1 for c in confirmations)


def test_a_slow_node_beside_a_slow_link_names_the_node_and_the_link() -> None:
    # n4's two pairs are slow (one with the slow n3, one over the bad cable to n5): it is a
    # suspect until the confirmation finds it fast with a good node; then its one slow pair that
    # no slow node explains is the link.
    nodes = [f"n{i}" for i in range(8)]
    fabric = Fabric(speed={"n3": 0.8}, links={frozenset(("n4", "n5")): 0.6})
    assert _named(fabric.rounds(nodes)) == {
        "n3": Reason.FABRIC_SLOW_NODE,
        "n4": Reason.FABRIC_SLOW_LINK,
        "n5": Reason.FABRIC_SLOW_LINK,
    }


def test_the_one_pair_of_a_group_of_two_names_the_link_or_either_node_and_says_so() -> None:
    pairs = _pairs({("a", "b"): 30.0})
    found = blame(pairs, floor=41.4)
    assert [(b.node, b.reason) for b in found] == [
        ("a", Reason.FABRIC_SLOW_PAIR),
        ("b", Reason.FABRIC_SLOW_PAIR),
    ]
    assert "the link between them or either node" in found[0].message
    assert "cannot tell which" in found[0].message


@pytest.mark.parametrize("size", [3, 4, 5, 7, 8, 9, 16, 17, 32, 64])
def test_any_group_from_three_up_names_a_slow_node_or_link_anywhere_in_at_most_four_rounds(
    size: int,
) -> None:
    nodes = [f"n{i:02d}" for i in range(size)]
    for index in range(size):
        slow = nodes[index]
        pairs = Fabric(speed={slow: 0.85}).rounds(nodes)
        assert _named(pairs) == {slow: Reason.FABRIC_SLOW_NODE}, slow
        assert len({p.round for p in pairs}) <= 4
        a, b = nodes[index], nodes[(index + 1) % size]
        pairs = Fabric(links={frozenset((a, b)): 0.6}).rounds(nodes)
        assert _named(pairs) == {a: Reason.FABRIC_SLOW_LINK, b: Reason.FABRIC_SLOW_LINK}
        assert len({p.round for p in pairs}) <= 4


def test_training_pairs_are_judged_alike_in_tokens_per_gpu_under_their_own_node_reason() -> None:
    def trained(a: str, b: str, per_gpu: float | None, round_of: int = 1) -> FabricTrainPair:
        rate = None if per_gpu is None else per_gpu * 16
        return FabricTrainPair(round=round_of, a=a, b=b, gpus=16, tokens_per_second=rate)

    edges = [("abcdefgh"[i], "abcdefgh"[(i + 1) % 8]) for i in range(8)]
    slow = {("b", "c"): 35_000.0, ("c", "d"): 34_000.0, ("f", "g"): None}
    pairs = [trained(a, b, slow.get((a, b), 50_000.0)) for a, b in edges]
    assert reference(pairs) == 50_000.0
    floor = FabricTrain(enabled=True).floor(reference(pairs))
    pairs.append(trained("c", "a", 35_500.0, round_of=0))
    found = {b.node: b for b in blame(pairs, floor, TRAINING)}
    assert {n: b.reason for n, b in found.items()} == {
        "c": Reason.FABRIC_TRAIN_SLOW_NODE,
        "f": Reason.FABRIC_SLOW_LINK,
        "g": Reason.FABRIC_SLOW_LINK,
    }
    assert found["c"].message.startswith(
        "slow in every training pair it was in (training 35,000, 34,000 tokens/s per GPU, floor "
        "45,000) and again with a good node: a (training 35,500 tokens/s per GPU)"
    )
    assert found["f"].message.startswith("the link to g is slow (failed, floor 45,000)")
