"""The run-wide comparison of the fabric groups: who is named, who is spared, which groups are
slow (gpuval_operator.fabric.verdicts). Pure: no cluster."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from gpuval_api.fabric import FabricPair, FabricThresholds, pair_rounds
from gpuval_api.reasons import Reason
from gpuval_api.result import Verdict
from gpuval_operator.fabric.facts import FabricFacts
from gpuval_operator.fabric.verdicts import (
    Final,
    GroupEvidence,
    MemberResult,
    as_reported,
    classify,
)
from tests.support.fabricmodel import BASE, Fabric

PASS = MemberResult(Verdict.PASSED, None, "fine", by_agent=True)


def pairs_of(
    nodes: Sequence[str],
    speed: Mapping[str, float] | None = None,
    links: Mapping[frozenset[str], float] | None = None,
) -> tuple[FabricPair, ...]:
    """The pair rounds of a group, each pair at BASE times its slower node and its link."""
    speed, links = speed or {}, links or {}
    found = []
    for number, rnd in enumerate(pair_rounds(len(nodes)), start=1):
        for a, b in rnd:
            na, nb = nodes[a], nodes[b]
            factor = min(speed.get(na, 1.0), speed.get(nb, 1.0)) * links.get(
                frozenset((na, nb)), 1.0
            )
            found.append(
                FabricPair(round=number, a=na, b=nb, bytes=1 << 30, busbw_gbps=BASE * factor)
            )
    return tuple(found)


def group(
    name: str,
    nodes: Sequence[str],
    busbw: float | None = BASE,
    results: Sequence[MemberResult] | None = None,
    pairs: tuple[FabricPair, ...] | None = None,
) -> GroupEvidence:
    results = results or [PASS] * len(nodes)
    found = pairs_of(nodes) if pairs is None else pairs
    return GroupEvidence(name, tuple(nodes), tuple(results), busbw, found, None)


def names(prefix: str, count: int = 8) -> list[str]:
    return [f"{prefix}{i}" for i in range(count)]


def test_a_slow_node_is_named_and_its_partners_pass() -> None:
    nodes = names("a")
    slow = group("g1", nodes, busbw=BASE * 0.8, pairs=pairs_of(nodes, {"a3": 0.8}))
    found = classify([slow, group("g2", names("b"))], FabricThresholds())
    assert found.nodes["a3"].verdict is Verdict.FAILED
    assert found.nodes["a3"].reason is Reason.FABRIC_SLOW_NODE
    assert {n for n, f in found.nodes.items() if f.verdict is not Verdict.PASSED} == {"a3"}
    # The group is below its floor, but a node explains it: no slow group.
    assert not any(g.slow for g in found.groups)


def test_a_slow_link_names_both_its_nodes_and_no_one_else() -> None:
    nodes = names("a")
    link = pairs_of(nodes, links={frozenset(("a2", "a3")): 0.6})
    found = classify([group("g1", nodes, pairs=link)], FabricThresholds())
    named = {n: f.reason for n, f in found.nodes.items() if f.verdict is Verdict.FAILED}
    assert named == {"a2": Reason.FABRIC_SLOW_LINK, "a3": Reason.FABRIC_SLOW_LINK}
    assert "a3" in found.nodes["a2"].message


def test_a_node_its_agent_named_slow_against_its_group_alone_passes_when_the_run_does_not() -> None:
    # Group g1's agents compared a1 with their own slow median; the run's pairs are faster still,
    # but a1 is only 5 % below them: within the 0.9 threshold.
    nodes = names("a")
    agent_said = MemberResult(Verdict.FAILED, Reason.FABRIC_SLOW_NODE, "slow in every pair", True)
    results = [PASS, agent_said, *[PASS] * 6]
    g1 = group("g1", nodes, results=results, pairs=pairs_of(nodes, {"a1": 0.95}))
    found = classify([g1, group("g2", names("b"))], FabricThresholds())
    assert found.nodes["a1"].verdict is Verdict.PASSED
    assert "FabricSlowNode" in found.nodes["a1"].message


def test_a_uniformly_slow_group_names_no_node_and_is_a_slow_group() -> None:
    slow_nodes = names("s", 4)
    slow = group(
        "g3",
        slow_nodes,
        busbw=BASE * 0.5,
        pairs=pairs_of(slow_nodes, dict.fromkeys(slow_nodes, 0.5)),
    )
    fast = [group(f"g{i}", names(f"f{i}", 4), busbw=BASE) for i in range(2)]
    found = classify([*fast, slow], FabricThresholds())
    assert all(f.verdict is Verdict.PASSED for f in found.nodes.values())
    assert [g.name for g in found.groups if g.slow] == ["g3"]
    outcome = next(g for g in found.groups if g.name == "g3")
    assert outcome.floor is not None and outcome.floor > outcome.busbw  # type: ignore[operator]


def test_groups_are_compared_with_groups_of_their_own_size_only() -> None:
    # A group of three is slower than the groups of eight (fewer GPUs share the ring), but it is
    # the only one of its size: never slow against them.
    small = group("g9", names("t", 3), busbw=BASE * 0.5)
    found = classify([group("g1", names("a")), group("g2", names("b")), small], FabricThresholds())
    assert not any(g.slow for g in found.groups)


def test_an_absolute_floor_marks_a_group_slow_without_blaming_its_nodes() -> None:
    nodes = names("a", 4)
    below = MemberResult(Verdict.FAILED, Reason.NCCL_LOW_BUSBW, "below the absolute floor", True)
    g1 = group(
        "g1",
        nodes,
        busbw=300.0,
        results=[below] * 4,
        pairs=pairs_of(nodes, dict.fromkeys(nodes, 300 / BASE)),
    )
    found = classify([g1], FabricThresholds(absolute_busbw_gbps=350.0))
    assert all(f.verdict is Verdict.PASSED for f in found.nodes.values())
    assert found.groups[0].slow


def test_when_every_other_rank_cannot_reach_rank_0_rank_0_is_named_and_they_are_not() -> None:
    nodes = names("a", 4)
    came = MemberResult(
        Verdict.NOT_RUN, Reason.FABRIC_UNREACHABLE, "a1, a2, a3 never reached", True
    )
    lost = MemberResult(
        Verdict.FAILED, Reason.FABRIC_UNREACHABLE, "could not reach 10.0.0.1:20000", True
    )
    found = classify(
        [group("g1", nodes, busbw=None, results=[came, lost, lost, lost], pairs=())],
        FabricThresholds(),
    )
    assert (found.nodes["a0"].verdict, found.nodes["a0"].reason) == (
        Verdict.FAILED,
        Reason.FABRIC_UNREACHABLE,
    )
    assert {found.nodes[n].verdict for n in nodes[1:]} == {Verdict.NOT_RUN}
    assert "10.0.0.1:20000" in found.nodes["a0"].message


def test_one_rank_that_cannot_reach_rank_0_is_named_alone() -> None:
    nodes = names("a", 4)
    came = MemberResult(Verdict.NOT_RUN, Reason.FABRIC_UNREACHABLE, "a2 never reached", True)
    lost = MemberResult(Verdict.FAILED, Reason.FABRIC_UNREACHABLE, "could not reach", True)
    found = classify(
        [group("g1", nodes, busbw=None, results=[came, came, lost, came], pairs=())],
        FabricThresholds(),
    )
    assert found.nodes["a2"].verdict is Verdict.FAILED
    assert {found.nodes[n].verdict for n in ("a0", "a1", "a3")} == {Verdict.NOT_RUN}


def test_in_a_group_of_two_an_unreachable_rank_names_neither_side() -> None:
    came = MemberResult(Verdict.NOT_RUN, Reason.FABRIC_UNREACHABLE, "a1 never reached", True)
    lost = MemberResult(Verdict.FAILED, Reason.FABRIC_UNREACHABLE, "could not reach", True)
    found = classify(
        [group("g1", ["a0", "a1"], busbw=None, results=[came, lost], pairs=())], FabricThresholds()
    )
    assert {f.verdict for f in found.nodes.values()} == {Verdict.NOT_RUN}


def test_what_is_not_slowness_stands_and_a_node_in_two_groups_gets_the_worse() -> None:
    fell_back = MemberResult(Verdict.FAILED, Reason.FABRIC_TRANSPORT_FALLBACK, "sockets", True)
    nodes = names("a", 4)
    g1 = group("g1", nodes, results=[PASS, PASS, fell_back, PASS])
    x1 = group(
        "x1",
        ["a0", "b0", "c0"],
        results=[MemberResult(Verdict.FAILED, Reason.NCCL_TIMEOUT, "hung", True), PASS, PASS],
    )
    found = classify([g1, x1], FabricThresholds())
    assert found.nodes["a2"].reason is Reason.FABRIC_TRANSPORT_FALLBACK
    assert found.nodes["a0"].reason is Reason.NCCL_TIMEOUT


def test_a_group_that_did_not_form_is_not_run_as_recorded() -> None:
    gang = MemberResult(Verdict.NOT_RUN, Reason.FABRIC_GANG_NOT_FORMED, "did not form")
    found = classify(
        [group("g1", names("a", 3), busbw=None, results=[gang] * 3, pairs=())], FabricThresholds()
    )
    assert {(f.verdict, f.reason) for f in found.nodes.values()} == {
        (Verdict.NOT_RUN, Reason.FABRIC_GANG_NOT_FORMED)
    }
    assert found.groups[0].worst.reason is Reason.FABRIC_GANG_NOT_FORMED


def test_what_an_agent_wrote_as_its_group_was_given_up_does_not_count() -> None:
    gang = MemberResult(Verdict.NOT_RUN, Reason.FABRIC_GANG_NOT_FORMED, "b's pod never started")
    lost = MemberResult(Verdict.NOT_RUN, Reason.FABRIC_UNREACHABLE, "lost the coordinator", True)
    found = classify(
        [group("g1", ["a", "b", "c"], busbw=None, results=[gang, gang, lost], pairs=())],
        FabricThresholds(),
    )
    assert found.nodes["c"] == found.nodes["a"]
    assert found.nodes["c"].reason is Reason.FABRIC_GANG_NOT_FORMED


def test_in_a_group_of_three_a_node_slow_in_both_its_pairs_is_named() -> None:
    nodes = names("a", 3)
    found = classify(
        [group("g1", nodes, pairs=pairs_of(nodes, {"a1": 0.8})), group("g2", names("b"))],
        FabricThresholds(),
    )
    assert found.nodes["a1"].reason is Reason.FABRIC_SLOW_NODE
    assert {found.nodes["a0"].verdict, found.nodes["a2"].verdict} == {Verdict.PASSED}


def test_a_run_of_three_nodes_names_the_one_slow_node_its_two_pairs_cannot_hide() -> None:
    # The slow node sits in two of the three pairs: the median pair is its own slow figure,
    # and a floor taken from it would pass every node.
    nodes = names("a", 3)
    fabric = Fabric(speed={"a2": 0.7})
    found = classify([group("g1", nodes, pairs=fabric.rounds(nodes))], FabricThresholds())
    assert {n: f.reason for n, f in found.nodes.items()} == {
        "a0": None,
        "a1": None,
        "a2": Reason.FABRIC_SLOW_NODE,
    }
    assert found.median_pair == pytest.approx(BASE)


def test_the_slow_pair_of_a_group_of_two_is_the_link_or_either_node_and_blames_neither() -> None:
    pair = ["a0", "a1"]
    others = [group(f"g{i}", names(f"b{i}", 2)) for i in range(2)]
    slow = group("g9", pair, busbw=BASE * 0.5, pairs=pairs_of(pair, {"a0": 0.5}))
    found = classify([*others, slow], FabricThresholds())
    assert {(found.nodes[n].verdict, found.nodes[n].reason) for n in pair} == {
        (Verdict.NOT_RUN, Reason.FABRIC_SLOW_PAIR)
    }
    assert "the link between them or either node" in found.nodes["a0"].message
    assert "cannot tell which" in found.nodes["a1"].message
    assert not any(g.slow for g in found.groups), "the pair's finding explains its group"
    assert {f.verdict for n, f in found.nodes.items() if n not in pair} == {Verdict.PASSED}


def test_a_run_of_two_nodes_says_it_has_nothing_to_compare_its_pair_with() -> None:
    pair = ["a0", "a1"]
    found = classify([group("g1", pair, pairs=pairs_of(pair, {"a0": 0.5}))], FabricThresholds())
    assert {f.verdict for f in found.nodes.values()} == {Verdict.PASSED}
    assert "only fabric.thresholds.absoluteBusbwGBps can find it slow" in found.nodes["a0"].message
    below = classify(
        [group("g1", pair, pairs=pairs_of(pair, {"a0": 0.5}))],
        FabricThresholds(absolute_busbw_gbps=300.0),
    )
    assert {f.reason for f in below.nodes.values()} == {Reason.FABRIC_SLOW_PAIR}


def test_two_slow_nodes_side_by_side_each_name_the_other_as_slow_too() -> None:
    nodes = names("a")
    fabric = Fabric(speed={"a3": 0.8, "a4": 0.8})
    found = classify(
        [group("g1", nodes, pairs=fabric.rounds(nodes)), group("g2", names("b"))],
        FabricThresholds(),
    )
    named = {n: f.reason for n, f in found.nodes.items() if f.verdict is not Verdict.PASSED}
    assert named == {"a3": Reason.FABRIC_SLOW_NODE, "a4": Reason.FABRIC_SLOW_NODE}
    assert "a4 is slow in every pair too" in found.nodes["a3"].message
    assert "its partner a2 was fine with other nodes" in found.nodes["a3"].message
    assert "a3 is slow in every pair too" in found.nodes["a4"].message
    assert "a3 was fine" not in found.nodes["a4"].message


def cross(
    name: str, reps: Sequence[str], fabric: Fabric, lone: frozenset[str] = frozenset()
) -> GroupEvidence:
    nodes = tuple(reps)
    return GroupEvidence(
        name,
        nodes,
        (PASS,) * len(nodes),
        fabric.group_busbw(nodes),
        fabric.rounds(nodes),
        None,
        cross=True,
        domains={n: fabric.domain[n] for n in nodes},
        lone=lone,
    )


def _racks(count: int, per: int) -> dict[str, str]:
    return {f"r{r}n{i}": f"rack-{r}" for r in range(count) for i in range(per)}


def test_a_slow_path_out_of_a_domain_is_named_and_its_representative_is_not_blamed() -> None:
    domain = _racks(4, 3)
    fabric = Fabric(domain=domain, uplinks={"rack-1": 0.6})
    inside = [group(f"g{r}", [f"r{r}n{i}" for i in range(3)]) for r in range(4)]
    reps = [f"r{r}n0" for r in range(4)]
    found = classify([*inside, cross("x1", reps, fabric)], FabricThresholds())
    assert {f.verdict for f in found.nodes.values()} == {Verdict.PASSED}
    [path] = found.paths
    assert (path.reason, path.domains, path.nodes) == (
        Reason.FABRIC_SLOW_DOMAIN,
        ("rack-1",),
        ("r1n0",),
    )
    assert "path out of domain rack-1 is slow" in path.message
    assert found.nodes["r1n0"].noted and "rack-1" in found.nodes["r1n0"].message
    assert not any(g.slow for g in found.groups)


def test_a_slow_path_between_two_domains_names_both_domains_and_no_node() -> None:
    domain = _racks(4, 3)
    fabric = Fabric(domain=domain, paths={frozenset(("rack-1", "rack-2")): 0.6})
    inside = [group(f"g{r}", [f"r{r}n{i}" for i in range(3)]) for r in range(4)]
    found = classify(
        [*inside, cross("x1", [f"r{r}n0" for r in range(4)], fabric)], FabricThresholds()
    )
    assert {f.verdict for f in found.nodes.values()} == {Verdict.PASSED}
    [path] = found.paths
    assert (path.reason, path.domains, path.nodes) == (
        Reason.FABRIC_SLOW_PATH,
        ("rack-1", "rack-2"),
        ("r1n0", "r2n0"),
    )
    assert "between domains rack-1 and rack-2" in path.message


def test_a_slow_node_inside_a_slow_domain_is_named_and_so_is_the_domain() -> None:
    domain = _racks(3, 4)
    fabric = Fabric(domain=domain, speed={"r1n2": 0.8}, uplinks={"rack-1": 0.6})
    inside = [
        group(f"g{r}", nodes, pairs=fabric.rounds(nodes))
        for r in range(3)
        for nodes in [[f"r{r}n{i}" for i in range(4)]]
    ]
    found = classify(
        [*inside, cross("x1", [f"r{r}n0" for r in range(3)], fabric)], FabricThresholds()
    )
    named = {n: f.reason for n, f in found.nodes.items() if f.verdict is not Verdict.PASSED}
    assert named == {"r1n2": Reason.FABRIC_SLOW_NODE}
    assert [(p.reason, p.domains) for p in found.paths] == [
        (Reason.FABRIC_SLOW_DOMAIN, ("rack-1",))
    ]


def test_cross_domain_pairs_are_judged_against_each_other_not_against_the_racks() -> None:
    # An oversubscribed spine: every path between racks at half the rate inside one. Nothing is
    # slow: the cross-domain groups have their own reference.
    domain = _racks(8, 3)
    every = {frozenset((f"rack-{a}", f"rack-{b}")): 0.5 for a in range(8) for b in range(8)}
    fabric = Fabric(domain=domain, paths=every)
    inside = [group(f"g{r}", [f"r{r}n{i}" for i in range(3)]) for r in range(8)]
    found = classify(
        [*inside, cross("x1", [f"r{r}n0" for r in range(8)], fabric)], FabricThresholds()
    )
    assert found.paths == [] and not any(g.slow for g in found.groups)
    assert found.cross_median_pair == pytest.approx(BASE * 0.5)
    assert found.median_pair == pytest.approx(BASE)


def test_a_representative_alone_in_its_domain_slow_across_domains_is_the_node_named() -> None:
    domain = {**_racks(3, 3), "solo": "rack-9"}
    fabric = Fabric(domain=domain, speed={"solo": 0.7})
    inside = [group(f"g{r}", [f"r{r}n{i}" for i in range(3)]) for r in range(3)]
    reps = ["r0n0", "r1n0", "r2n0", "solo"]
    found = classify(
        [*inside, cross("x1", reps, fabric, lone=frozenset({"solo"}))], FabricThresholds()
    )
    assert found.nodes["solo"].reason is Reason.FABRIC_SLOW_NODE
    assert found.paths == []


def facts(**status: object) -> FabricFacts:
    body = {"group": "g1", "rank": 0, "world": 2, "verdict": "Passed", "message": "fine"}
    found = FabricFacts.parse({**body, "result": {**body}, **status})
    assert found is not None
    return found


def test_a_pass_the_report_already_shows_as_its_agent_wrote_it_is_not_written_again() -> None:
    assert as_reported(Final(Verdict.PASSED, None, "fine"), facts())
    # Anything the comparison changed is written: the words, the verdict, or a report the
    # operator wrote (no agent result) or already classified.
    assert not as_reported(Final(Verdict.PASSED, None, "passed; the path out of rack-1"), facts())
    failed = Final(Verdict.FAILED, Reason.FABRIC_SLOW_NODE, "slow in every pair")
    assert not as_reported(failed, facts(verdict="Failed", reason="FabricSlowNode"))
    assert not as_reported(Final(Verdict.PASSED, None, "fine"), facts(classified=True))
    recorded = FabricFacts.parse({"group": "g1", "rank": 0, "world": 2, "verdict": "Passed"})
    assert recorded is not None and not as_reported(Final(Verdict.PASSED, None, ""), recorded)


def test_a_slow_pair_its_agents_named_against_their_own_floor_passes_when_the_run_does_not() -> (
    None
):
    pair = ["a0", "a1"]
    said = MemberResult(Verdict.NOT_RUN, Reason.FABRIC_SLOW_PAIR, "the link or either node", True)
    two = group("g1", pair, results=[said, said], pairs=pairs_of(pair, {"a0": 0.95}))
    found = classify([two, group("g2", names("b"))], FabricThresholds())
    assert {found.nodes[n].verdict for n in pair} == {Verdict.PASSED}
    assert "FabricSlowPair" in found.nodes["a0"].message
