"""The fabric phase at 10,000 nodes, pure: 40 racks of 250 planned into groups of 8, every group's
rounds computed from a fabric with injected faults (tests/support/fabricmodel.py), representatives
chosen from the domain groups' own verdicts, the cross-domain groups run, and the run-wide
comparison: every injected fault is named, nothing else, in at most four rounds per group and
two groups per node. No cluster (benchmarks/operator_scale.py --fabric runs it on one)."""

from __future__ import annotations

from collections.abc import Sequence

from gpuval_api.fabric import FabricThresholds, pair_rounds
from gpuval_api.fabric.isolation import blame, reference_busbw
from gpuval_api.reasons import Reason
from gpuval_api.result import Verdict
from gpuval_operator.fabric.plan import GroupPlan, cross_groups, domain_groups, representatives
from gpuval_operator.fabric.verdicts import Classification, GroupEvidence, MemberResult, classify
from tests.support.fabricmodel import Fabric

RACKS, PER_RACK, SIZE = 40, 250, 8
PASS = MemberResult(Verdict.PASSED, None, "fine", by_agent=True)


def node(rack: int, index: int) -> str:
    return f"r{rack:02d}-n{index:03d}"


def evidence(plan: GroupPlan, fabric: Fabric, domains: dict[str, str]) -> GroupEvidence:
    nodes = plan.nodes
    return GroupEvidence(
        plan.name,
        nodes,
        (PASS,) * len(nodes),
        fabric.group_busbw(nodes),
        fabric.rounds(nodes),
        plan.domain,
        cross=plan.cross,
        domains={n: domains[n] for n in nodes} if plan.cross else None,
    )


def run(fabric: Fabric, nodes: Sequence[str], domains: dict[str, str]) -> Classification:
    """Plan, measure the domain groups, choose representatives by the agents' own verdicts in
    their groups (a node their pairs name did not pass), measure the cross-domain groups,
    compare the whole run."""
    inside = domain_groups(nodes, SIZE, domains)
    measured = [evidence(p, fabric, domains) for p in inside]
    passed: set[str] = set()
    for group in measured:
        floor = FabricThresholds().floor(reference_busbw(group.pairs))
        named = {b.node for b in blame(group.pairs, floor)}
        passed.update(n for n in group.nodes if n not in named)
    across = cross_groups(representatives(inside, passed), SIZE)
    measured += [evidence(p, fabric, domains) for p in across]
    return classify(measured, FabricThresholds())


def test_ten_thousand_nodes_in_forty_racks_name_every_injected_fault_and_nothing_else() -> None:
    nodes = [node(r, i) for r in range(RACKS) for i in range(PER_RACK)]
    domains = {n: f"rack-{n[1:3]}" for n in nodes}
    fabric = Fabric(
        speed={
            node(5, 100): 0.85,  # one NIC of 8 down
            node(9, 17): 0.8,  # two slow nodes side by side in one group
            node(9, 18): 0.8,
            node(17, 40): 0.85,  # a slow node inside a slow domain
        },
        links={frozenset((node(12, 2), node(12, 3))): 0.6},  # a bad cable inside rack 12
        domain=domains,
        uplinks={"rack-17": 0.6},  # rack 17's uplink
        paths={frozenset(("rack-02", "rack-03")): 0.7},  # between two racks
    )
    found = run(fabric, nodes, domains)

    named = {n: f.reason for n, f in found.nodes.items() if f.verdict is not Verdict.PASSED}
    assert named == {
        node(5, 100): Reason.FABRIC_SLOW_NODE,
        node(9, 17): Reason.FABRIC_SLOW_NODE,
        node(9, 18): Reason.FABRIC_SLOW_NODE,
        node(17, 40): Reason.FABRIC_SLOW_NODE,
        node(12, 2): Reason.FABRIC_SLOW_LINK,
        node(12, 3): Reason.FABRIC_SLOW_LINK,
    }
    assert sorted((p.reason, p.domains) for p in found.paths) == [
        (Reason.FABRIC_SLOW_DOMAIN, ("rack-17",)),
        (Reason.FABRIC_SLOW_PATH, ("rack-02", "rack-03")),
    ]
    assert not any(g.slow for g in found.groups)
    assert len(found.nodes) == RACKS * PER_RACK

    # The bound: four rounds at most in every group's pods, two groups at most per node.
    for outcome in found.groups:
        world = len(outcome.nodes)
        assert len(pair_rounds(world)) + 1 <= 4, outcome.name
    crossing = [g for g in found.groups if g.name.startswith("x")]
    assert len(crossing) == RACKS // SIZE
    memberships: dict[str, int] = {}
    for outcome in found.groups:
        for n in outcome.nodes:
            memberships[n] = memberships.get(n, 0) + 1
    assert max(memberships.values()) == 2 and sum(v == 2 for v in memberships.values()) == RACKS
