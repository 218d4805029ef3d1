"""Fabric isolation on the real control plane, where it is hardest: a slow path between two
topology domains and a slow domain with a slow node inside, two slow nodes side by side, and the
smallest groups (a run of three nodes, groups of two, a run of two). The real agents (simulated
fabric double, run by the pod runner) measure, the operator compares the run and settles.

Every wait is bounded and nothing asserts a duration.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from gpuval_devtools.controlplane import Cluster
from tests.integration.operator.test_operator_fabric import LOCAL, fabric, fabric_of
from tests.support.fleet import (
    Fleet,
    Operator,
    apply,
    by_node,
    completed_run,
    delete_validation,
    reports_of,
)

pytestmark = pytest.mark.usefixtures("install_crds")

RACK = "topology.gpuval.dev/rack"


def run_fabric(
    cluster: Cluster, fleet: Fleet, operator: Operator, name: str, timeout: float, **spec: Any
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """Apply a fabric validation over the fleet; the completed run's status and reports."""
    with operator():
        # A generous node timeout: the machine these run on is shared, and a local check that
        # times out would leave its node out of the fabric.
        body = {
            "maxConcurrent": "100%",
            "nodeTimeoutSeconds": 600,
            "checks": LOCAL,
            "fabric": fabric(**spec),
        }
        apply(cluster, fleet.validation(name, **body))
        status = completed_run(cluster, name, timeout=timeout)
        reports = by_node(reports_of(cluster, name, status["run"]["id"]))
        delete_validation(cluster, name)
    untested = {n: r.get("reason") for n, r in reports.items() if "fabric" not in r}
    assert not untested, f"nodes without a fabric result: {untested}; {status['failingNodes']}"
    return status, reports


def test_a_slow_path_between_domains_and_a_slow_domain_are_named_and_no_representative_is(
    cluster: Cluster, fleet: Fleet, operator: Operator, unique_name: Callable[[str], str]
) -> None:
    # Six racks of three: a group of three inside each, then one cross-domain group of the six
    # representatives (each rack's first node by name). Rack 0's uplink is slow and one of its
    # nodes is slow too; the path between racks 1 and 2 (ranks 1 and 2 of the cross-domain
    # group: a pair of its second round) is slow.
    racks = sorted(unique_name("rack") for _ in range(6))
    names = {rack: sorted(unique_name("p") for _ in range(3)) for rack in racks}
    slow_node = names[racks[0]][1]
    for rack in racks:
        for node in names[rack]:
            faults: list[dict[str, Any]] = []
            if rack == racks[0]:
                faults.append({"kind": "fabric-slow-path", "factor": 0.6})
            if rack == racks[1]:
                faults.append({"kind": "fabric-slow-path", "peer": racks[2], "factor": 0.6})
            if node == slow_node:
                faults.append({"kind": "fabric-slow-node", "factor": 0.7})
            fleet.add(node, faults=faults, labels={RACK: rack}, fabricDomain=rack)
    status, reports = run_fabric(
        cluster, fleet, operator, unique_name("paths"), 900, groupSize=8, topologyKey=RACK
    )

    assert {n: v for n, v in fabric_of(reports).items() if v[0] != "Passed"} == {
        slow_node: ("Failed", "FabricSlowNode")
    }
    paths = {(p["reason"], tuple(p["domains"])): p for p in status["fabric"]["slowPaths"]}
    assert set(paths) == {
        ("FabricSlowDomain", (racks[0],)),
        ("FabricSlowPath", (racks[1], racks[2])),
    }
    assert paths[("FabricSlowDomain", (racks[0],))]["nodes"] == [names[racks[0]][0]]
    assert paths[("FabricSlowPath", (racks[1], racks[2]))]["nodes"] == [
        names[racks[1]][0],
        names[racks[2]][0],
    ]
    representative = reports[names[racks[0]][0]]
    assert representative["verdict"] == "Passed"
    assert f"path out of domain {racks[0]} is slow" in representative["fabric"]["message"]
    assert status["fabric"]["slowGroups"] == []
    assert "2 slow paths between domains" in status["fabric"]["summary"]
    assert status["nodes"]["failed"] == 1


def test_two_slow_nodes_side_by_side_are_both_named_and_neither_is_called_fine(
    cluster: Cluster, fleet: Fleet, operator: Operator, unique_name: Callable[[str], str]
) -> None:
    ranks = sorted(unique_name("s") for _ in range(8))
    first, second = ranks[3], ranks[4]  # a pair of the second round: side by side in the ring
    for node in ranks:
        slow = node in (first, second)
        fleet.add(node, faults=[{"kind": "fabric-slow-node", "factor": 0.8}] if slow else [])
    status, reports = run_fabric(cluster, fleet, operator, unique_name("pair"), 600)

    assert {n: v for n, v in fabric_of(reports).items() if v[0] != "Passed"} == {
        first: ("Failed", "FabricSlowNode"),
        second: ("Failed", "FabricSlowNode"),
    }
    said = {n: reports[n]["fabric"]["message"] for n in (first, second)}
    assert f"{second} is slow in every pair too, named on its own" in said[first]
    assert f"its partner {ranks[2]} was fine with other nodes" in said[first]
    assert f"{first} is slow in every pair too, named on its own" in said[second]
    assert f"its partner {ranks[5]} was fine with other nodes" in said[second]
    assert f"{second} was fine" not in said[first] and f"{first} was fine" not in said[second]
    assert status["nodes"]["failed"] == 2 and status["nodes"]["passed"] == 6


def test_a_run_of_three_nodes_names_its_one_slow_node(
    cluster: Cluster, fleet: Fleet, operator: Operator, unique_name: Callable[[str], str]
) -> None:
    ranks = sorted(unique_name("t") for _ in range(3))
    slow = ranks[1]
    for node in ranks:
        faults = [{"kind": "fabric-slow-node", "factor": 0.7}] if node == slow else []
        fleet.add(node, faults=faults)
    status, reports = run_fabric(cluster, fleet, operator, unique_name("three"), 600)

    assert fabric_of(reports) == {
        **{n: ("Passed", None) for n in ranks if n != slow},
        slow: ("Failed", "FabricSlowNode"),
    }
    assert reports[slow]["verdict"] == "Failed"
    # The reference is the healthy pairs' figure (the double's 380 GB/s, less its latency), not
    # the slow node's.
    assert status["fabric"]["medianPairGBps"] == pytest.approx(380.0, rel=0.01)


def test_in_groups_of_two_a_slow_node_names_its_pair_the_link_or_either_node_and_blames_none(
    cluster: Cluster, fleet: Fleet, operator: Operator, unique_name: Callable[[str], str]
) -> None:
    ranks = sorted(unique_name("w") for _ in range(6))
    slow, partner = ranks[0], ranks[1]  # group g1
    for node in ranks:
        faults = [{"kind": "fabric-slow-node", "factor": 0.7}] if node == slow else []
        fleet.add(node, faults=faults)
    status, reports = run_fabric(cluster, fleet, operator, unique_name("two"), 600, groupSize=2)

    assert fabric_of(reports) == {
        **{n: ("Passed", None) for n in ranks[2:]},
        slow: ("NotRun", "FabricSlowPair"),
        partner: ("NotRun", "FabricSlowPair"),
    }
    for node in (slow, partner):
        message = reports[node]["fabric"]["message"]
        assert "the link between them or either node" in message and "cannot tell which" in message
        assert reports[node]["verdict"] == "Passed", "no evidence against either node alone"
    assert status["nodes"]["failed"] == 0
    assert status["fabric"]["nodes"]["notRun"] == 2


def test_a_run_of_two_nodes_says_its_pair_has_nothing_to_be_compared_with(
    cluster: Cluster, fleet: Fleet, operator: Operator, unique_name: Callable[[str], str]
) -> None:
    ranks = sorted(unique_name("o") for _ in range(2))
    for node in ranks:
        faults = [{"kind": "fabric-slow-node", "factor": 0.7}] if node == ranks[0] else []
        fleet.add(node, faults=faults)
    _, reports = run_fabric(cluster, fleet, operator, unique_name("alone"), 600)

    assert fabric_of(reports) == {n: ("Passed", None) for n in ranks}
    for node in ranks:
        assert (
            "only fabric.thresholds.absoluteBusbwGBps can find it slow"
            in (reports[node]["fabric"]["message"])
        )
