"""The fabric's training phase (spec.fabric.train) on the real control plane: the real agents
(simulated fabric double, run by the pod runner) meet, all-reduce, then train data-parallel across
their group and in its pair rounds; the operator compares the run's groups, names the node slow in
its training pairs and lists the group whose losses differ.

Every wait is bounded and nothing asserts a duration.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from gpuval_devtools.controlplane import Cluster
from tests.integration.operator.test_operator_fabric import fabric_of
from tests.integration.operator.test_operator_fabric_isolation import run_fabric
from tests.support.fleet import Fleet, Operator

pytestmark = pytest.mark.usefixtures("install_crds")

TRAIN = {"enabled": True, "model": "tiny", "steps": 4, "warmupSteps": 1, "timeoutSeconds": 30}


def test_a_node_slow_in_the_training_phase_is_named_and_a_group_whose_losses_differ_is_listed(
    cluster: Cluster, fleet: Fleet, operator: Operator, unique_name: Callable[[str], str]
) -> None:
    # Three groups of three: in g1 a node trains at 0.7 across nodes (its network and its own
    # checks are fine); in g2 a node's losses go wrong from step 2 (it passes on its own).
    ranks = sorted(unique_name("t") for _ in range(9))
    slow, wrong = ranks[1], ranks[4]
    for node in ranks:
        faults: list[dict[str, Any]] = []
        if node == slow:
            faults.append({"kind": "fabric-train-slow", "factor": 0.7})
        if node == wrong:
            faults.append({"kind": "train-wrong-loss", "step": 2})
        fleet.add(node, faults=faults)
    status, reports = run_fabric(
        cluster, fleet, operator, unique_name("train"), 600, groupSize=3, train=TRAIN
    )

    assert fabric_of(reports) == {
        **{n: ("Passed", None) for n in ranks if n != slow},
        slow: ("Failed", "FabricTrainSlowNode"),
    }
    assert reports[slow]["verdict"] == "Failed" and reports[slow]["reason"] == "FabricTrainSlowNode"
    assert "slow in every training pair it was in" in reports[slow]["fabric"]["message"]
    # Every member reports its group's training, its pairs and its loss record.
    result = reports[ranks[0]]["fabric"]["result"]["train"]
    assert result["nodes"] == 3 and len(result["pairs"]) >= 3
    assert result["record"]["determinants"]["model"].endswith("across 3 nodes")
    train = status["fabric"]["train"]
    [odd] = train["mismatchedGroups"]
    assert odd["group"] == "g2" and wrong in odd["nodes"] and odd["step"] == 2
    assert train["medianPairTokensPerSecondPerGpu"] > 0 and train["slowGroups"] == []
    assert "training losses differ in 1 group" in status["fabric"]["summary"]
    assert status["nodes"]["failed"] == 1 and status["nodes"]["passed"] == 8
