"""The fabric verdicts settled before the last group (gpuval_operator.fabric.early): what is settled
early is what the run-wide comparison settles at the end, whatever order the groups finish in,
and nothing is settled while the floor could still rise past a pair."""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence

import pytest

from gpuval_api.fabric import FabricPair, FabricThresholds
from gpuval_api.fabric.isolation import blame, reference_busbw
from gpuval_api.reasons import Reason
from gpuval_api.result import Verdict
from gpuval_operator.fabric.early import certain, early_finals, pair_floor_ceiling
from gpuval_operator.fabric.plan import (
    GroupPlan,
    cross_groups,
    domain_groups,
    possible_representatives,
    representatives,
)
from gpuval_operator.fabric.verdicts import Final, GroupEvidence, MemberResult, classify
from tests.support.fabricmodel import GIB, Fabric

PASS = MemberResult(Verdict.PASSED, None, "the agent's own words", by_agent=True)
THRESHOLDS = FabricThresholds()


class JitteryFabric(Fabric):
    """The model's figures, each pair a few percent off (seeded by the pair: the same pair
    measures the same in every group order)."""

    spread: float = 0.06

    def edge(self, a: str, b: str) -> float:
        wobble = random.Random("|".join(sorted((a, b)))).uniform(-self.spread, self.spread)
        return super().edge(a, b) * (1 + wobble)


def pair(a: str, b: str, busbw: float | None, number: int = 1) -> FabricPair:
    return FabricPair(round=number, a=a, b=b, bytes=GIB, busbw_gbps=busbw)


def evidence(plan: GroupPlan, fabric: Fabric, domains: Mapping[str, str]) -> GroupEvidence:
    """A group as its agents report it: each names who its own group's floor names."""
    pairs = fabric.rounds(plan.nodes)
    floor = THRESHOLDS.floor(reference_busbw(pairs))
    named = {b.node: b for b in blame(pairs, floor)}
    results = tuple(
        MemberResult(Verdict.FAILED, named[n].reason, named[n].message, by_agent=True)
        if n in named
        else PASS
        for n in plan.nodes
    )
    return GroupEvidence(
        plan.name,
        plan.nodes,
        results,
        fabric.group_busbw(plan.nodes),
        pairs,
        plan.domain,
        cross=plan.cross,
        domains={n: domains[n] for n in plan.nodes} if plan.cross else None,
    )


def fleet(racks: int, per_rack: int) -> tuple[list[str], dict[str, str]]:
    nodes = [f"r{r:02d}-n{i:03d}" for r in range(racks) for i in range(per_rack)]
    return nodes, {n: f"rack-{n[1:3]}" for n in nodes}


def play(
    fabric: Fabric, nodes: Sequence[str], domains: Mapping[str, str], order: random.Random
) -> tuple[dict[str, Final], dict[str, Final]]:
    """The domain groups finish in `order`; after each, what is settled early (as the driver asks:
    representatives that may yet be chosen left out), then the cross-domain groups and the
    comparison. Returns (early finals, final verdicts)."""
    inside = domain_groups(nodes, 8, domains)
    measured = {p.name: evidence(p, fabric, domains) for p in inside}
    done: list[GroupEvidence] = []
    early: dict[str, Final] = {}
    for plan in order.sample(inside, len(inside)):
        done.append(measured[plan.name])
        passed: dict[str, bool | None] = {n: None for n in nodes}
        for group in done:
            for n, r in zip(group.nodes, group.results, strict=True):
                passed[n] = r.verdict is Verdict.PASSED
        pending = sum(len(p.nodes) for p in inside) - sum(len(g.nodes) for g in done)
        found = early_finals(done, pending, THRESHOLDS, possible_representatives(inside, passed))
        for node, final in found.items():
            assert early.setdefault(node, final) == final, node  # never settled two ways
    winners = {
        n for g in measured.values() for n, r in zip(g.nodes, g.results, strict=True) if r is PASS
    }
    across = cross_groups(representatives(inside, winners), 8)
    everything = list(measured.values()) + [evidence(p, fabric, domains) for p in across]
    final = classify(everything, THRESHOLDS).nodes
    reps = {n for p in across for n in p.nodes}
    found = early_finals(list(measured.values()), 0, THRESHOLDS, reps)
    for node, settled in found.items():
        assert early.setdefault(node, settled) == settled, node
    return early, dict(final)


@pytest.mark.parametrize("seed", range(6))
def test_what_is_settled_early_is_what_the_comparison_settles_whatever_the_order(
    seed: int,
) -> None:
    nodes, domains = fleet(12, 40)
    fabric = JitteryFabric(
        speed={"r01-n005": 0.85, "r04-n017": 0.8, "r04-n018": 0.8, "r07-n030": 0.85},
        links={frozenset(("r02-n002", "r02-n003")): 0.6},
        domain=domains,
        uplinks={"rack-07": 0.6},
        paths={frozenset(("rack-09", "rack-10")): 0.7},
    )
    early, final = play(fabric, nodes, domains, random.Random(seed))

    for node, settled in early.items():
        assert final[node] == settled, node
    named = {n for n, f in final.items() if f.verdict is not Verdict.PASSED}
    assert named == {"r01-n005", "r04-n017", "r04-n018", "r07-n030", "r02-n002", "r02-n003"}
    assert not named & set(early)
    # Not a vacuous property: all but the representatives, the groups that hold a fault and the
    # few pairs the jitter put near the floor were settled before the comparison.
    assert len(early) >= 0.8 * len(nodes)


@pytest.mark.parametrize("seed", range(6))
def test_racks_slower_than_the_run_are_not_settled_by_the_figures_seen_first(seed: int) -> None:
    # Five racks of twelve are 14 % slower, every node in them: against their own figures they
    # pass, against the whole run's their groups are slow groups (no pair reaches the floor, no
    # one named). Whatever finishes first, none is settled early: their pairs are below the floor.
    nodes, domains = fleet(12, 40)
    slow = {n for n in nodes if int(n[1:3]) < 5}
    fabric = JitteryFabric(speed=dict.fromkeys(slow, 0.86), domain=domains)
    early, final = play(fabric, nodes, domains, random.Random(seed))

    for node, settled in early.items():
        assert final[node] == settled, node
    assert not slow & set(early)
    assert len(early) >= 0.8 * (len(nodes) - len(slow))


def test_a_node_only_its_own_group_calls_slow_is_settled_as_the_run_settles_it() -> None:
    # Group g2's own floor names c3 (its pairs with it a tenth lower), the run's floor does not.
    fast = [f"a{i}" for i in range(8)]
    slowish = [f"c{i}" for i in range(8)]
    done = [
        GroupEvidence(
            "g1", tuple(fast), (PASS,) * 8, 380.0, tuple(pair(a, b, 380.0) for a, b in _ring(fast))
        ),
        GroupEvidence(
            "g2",
            tuple(slowish),
            (PASS,) * 3
            + (MemberResult(Verdict.FAILED, Reason.FABRIC_SLOW_NODE, "slow", by_agent=True),)
            + (PASS,) * 4,
            360.0,
            tuple(pair(a, b, 350.0 if "c3" in (a, b) else 390.0) for a, b in _ring(slowish)),
        ),
    ]
    early = early_finals(done, 0, THRESHOLDS)
    final = classify(done, THRESHOLDS).nodes
    assert early["c3"].verdict is Verdict.PASSED
    assert "no node of group g2 stands out" in early["c3"].message
    assert early == final


def test_nothing_is_settled_while_half_the_nodes_still_wait() -> None:
    nodes = [f"a{i}" for i in range(8)]
    done = [GroupEvidence("g1", tuple(nodes), (PASS,) * 8, 380.0, _pairs(nodes, 380.0))]
    assert pair_floor_ceiling(done, 8, THRESHOLDS) == math.inf
    assert early_finals(done, 8, THRESHOLDS) == {}
    # Seven nodes more to come: the median is still a figure seen, the ceiling a tenth under it.
    assert pair_floor_ceiling(done, 7, THRESHOLDS) == pytest.approx(0.9 * 380.0)
    assert set(early_finals(done, 7, THRESHOLDS)) == set(nodes)


def test_the_ceiling_is_the_floor_with_every_waiting_node_above_every_figure() -> None:
    low = [f"a{i}" for i in range(4)]
    high = [f"b{i}" for i in range(4)]
    done = [
        GroupEvidence("g1", tuple(low), (PASS,) * 4, 330.0, _pairs(low, 330.0)),
        GroupEvidence("g2", tuple(high), (PASS,) * 4, 400.0, _pairs(high, 400.0)),
    ]
    # 8 figures and 3 unknown: the median of 11 is the 6th, the second-lowest of the 400s.
    assert pair_floor_ceiling(done, 3, THRESHOLDS) == pytest.approx(0.9 * 400.0)
    # g1's pairs (330) are below that ceiling, though above the floor of the figures seen so far
    # (0.9 * 365 = 328.5): it waits.
    assert not certain(done[0], 360.0) and certain(done[1], 360.0)
    assert set(early_finals(done, 3, THRESHOLDS)) == set(high)
    # Every node in: the ceiling is the floor itself, 0.9 of the median (365).
    assert set(early_finals(done, 0, THRESHOLDS)) == set(low) | set(high)


@pytest.mark.parametrize(
    "change",
    ["failed pair", "hang", "two nodes", "cross", "excluded"],
)
def test_what_classify_decides_with_the_whole_run_in_view_waits(change: str) -> None:
    nodes = tuple(f"a{i}" for i in range(8))
    pairs = _pairs(list(nodes), 380.0)
    results: tuple[MemberResult, ...] = (PASS,) * 8
    cross, excluded = False, ()
    if change == "failed pair":
        pairs = (*pairs[:-1], pair(pairs[-1].a, pairs[-1].b, None))
    elif change == "hang":
        results = (MemberResult(Verdict.FAILED, Reason.NCCL_TIMEOUT, "hung", True), *results[1:])
    elif change == "two nodes":
        nodes, results, pairs = nodes[:2], results[:2], (pair("a0", "a1", 380.0),)
    elif change == "cross":
        cross = True
    else:
        excluded = ("a0",)
    group = GroupEvidence("g1", nodes, results, 380.0, pairs, cross=cross)
    other = GroupEvidence(
        "g2",
        tuple(f"b{i}" for i in range(8)),
        (PASS,) * 8,
        380.0,
        _pairs([f"b{i}" for i in range(8)], 380.0),
    )
    found = early_finals([group, other], 0, THRESHOLDS, excluded)
    assert set(found) & set(nodes) == (set(nodes) - {"a0"} if change == "excluded" else set())
    assert set(found) >= set(other.nodes)


def test_possible_representatives_are_each_domains_nodes_up_to_the_first_that_passed() -> None:
    plans = [
        GroupPlan("g1", ("a1", "a2", "a3"), "rack-a"),
        GroupPlan("g2", ("a4", "a5", "a6"), "rack-a"),
        GroupPlan("g3", ("b1", "b2", "b3"), "rack-b"),
        GroupPlan("g4", ("c1",), "rack-c"),
    ]
    passed: dict[str, bool | None] = {n: None for p in plans for n in p.nodes}
    everything = {n for p in plans for n in p.nodes}
    assert possible_representatives(plans, passed) == everything
    passed |= {"a1": False, "a2": True, "a3": True, "b1": True, "c1": True}
    assert possible_representatives(plans, passed) == {"a1", "a2", "b1", "c1"}
    assert set(representatives(plans, {n for n, p in passed.items() if p})) <= {"a2", "b1", "c1"}


def _ring(nodes: Sequence[str]) -> list[tuple[str, str]]:
    return [(n, nodes[(i + 1) % len(nodes)]) for i, n in enumerate(nodes)]


def _pairs(nodes: Sequence[str], busbw: float) -> tuple[FabricPair, ...]:
    return tuple(pair(a, b, busbw) for a, b in _ring(nodes))
