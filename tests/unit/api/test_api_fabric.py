"""The fabric's pure decisions: the pair schedule, the floor, the pair size (who the pairs name:
test_api_isolation.py)."""

from __future__ import annotations

import itertools

import pytest

from gpuval_api.fabric import FabricConfig, FabricThresholds, pair_rounds


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


def test_the_floor_is_the_stricter_of_absolute_and_fraction_of_median() -> None:
    assert FabricThresholds().floor(46.0) == pytest.approx(41.4)
    assert FabricThresholds(absolute_busbw_gbps=44.0).floor(46.0) == 44.0
    assert FabricThresholds(absolute_busbw_gbps=30.0).floor(None) == 30.0


def test_pair_size_is_capped_at_the_largest_size() -> None:
    assert FabricConfig(max_bytes=1 << 28).pair_size == 1 << 28
    with pytest.raises(ValueError, match=r"fabric.minBytes \(64\) is larger than fabric.maxBytes"):
        FabricConfig(min_bytes=64, max_bytes=32)
