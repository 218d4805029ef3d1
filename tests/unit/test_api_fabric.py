"""The fabric's pure decisions: the pair schedule and who a slow group's pairs name."""

from __future__ import annotations

import itertools

import pytest

from gpuval_api.fabric import (
    FabricConfig,
    FabricPair,
    FabricThresholds,
    blame,
    confirmation_pairs,
    find_suspects,
    pair_rounds,
)
from gpuval_api.reasons import Reason


@pytest.mark.parametrize("world", range(3, 17))
def test_every_node_sits_in_two_pairs_with_different_partners_in_at_most_three_rounds(
    world: int,
) -> None:
    rounds = pair_rounds(world)
    assert len(rounds) == (2 if world % 2 == 0 else 3)
    for pairs in rounds:
        ranks = [r for pair in pairs for r in pair]
        assert len(ranks) == len(set(ranks)), "a node twice in one round"
    partners: dict[int, set[int]] = {r: set() for r in range(world)}
    for a, b in itertools.chain.from_iterable(rounds):
        partners[a].add(b)
        partners[b].add(a)
    assert all(len(p) == 2 for p in partners.values())


def test_two_nodes_make_one_pair() -> None:
    assert pair_rounds(2) == [[(0, 1)]]


def _pairs(figures: dict[tuple[str, str], float | None], round_of: int = 1) -> list[FabricPair]:
    return [
        FabricPair(round=round_of, a=a, b=b, bytes=1 << 30, busbw_gbps=busbw)
        for (a, b), busbw in figures.items()
    ]


def _ring(names: str, slow: dict[tuple[str, str], float]) -> list[FabricPair]:
    edges = [(names[i], names[(i + 1) % len(names)]) for i in range(len(names))]
    return _pairs({edge: slow.get(edge, 46.0) for edge in edges})


def test_a_node_slow_with_both_partners_is_named_and_its_partners_are_not() -> None:
    pairs = _ring("abcdefgh", {("c", "d"): 23.0, ("b", "c"): 22.0})
    suspects = find_suspects(pairs, floor=41.4)
    assert suspects.nodes == ("c",) and suspects.links == ()
    [(node, partner)] = confirmation_pairs(suspects)
    assert node == "c" and partner in suspects.good
    pairs.append(FabricPair(round=0, a="c", b=partner, bytes=1 << 30, busbw_gbps=23.5))
    [found] = blame(pairs, floor=41.4)
    assert found.node == "c" and found.reason is Reason.FABRIC_SLOW_NODE
    assert set(found.partners) == {"b", "d"}


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
    pairs = _ring("abcd", {("a", "b"): None, ("d", "a"): None})  # type: ignore[dict-item]
    [found] = blame(pairs, floor=41.4)
    assert found.node == "a" and "failed" in found.message


def test_the_floor_is_the_stricter_of_absolute_and_fraction_of_median() -> None:
    assert FabricThresholds().floor(46.0) == pytest.approx(41.4)
    assert FabricThresholds(absolute_busbw_gbps=44.0).floor(46.0) == 44.0
    assert FabricThresholds(absolute_busbw_gbps=30.0).floor(None) == 30.0


def test_pair_size_is_capped_at_the_largest_size() -> None:
    assert FabricConfig(max_bytes=1 << 28).pair_size == 1 << 28
    with pytest.raises(ValueError, match=r"fabric.minBytes \(64\) is larger than fabric.maxBytes"):
        FabricConfig(min_bytes=64, max_bytes=32)
