"""The training check through the operator on the local control plane (issue 36): five simulated
nodes train; the slow one fails on its own agent's judgement (LowTrainingThroughput), the one
whose losses leave its peers' passes on its own and is failed by the run's comparison of the
nodes' losses (TrainingMismatch, naming the step), the others pass."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gpuval_api.checks import PROFILED, CheckName, ChecksConfig, Profile
from gpuval_devtools.controlplane import Cluster
from tests.support.fleet import (
    Fleet,
    Operator,
    apply,
    by_node,
    completed_run,
    conditions,
    delete_validation,
    reports_of,
)

pytestmark = pytest.mark.usefixtures("install_crds")


def test_a_slow_node_and_a_node_with_a_wrong_loss_are_each_named_with_their_reason(
    cluster: Cluster, fleet: Fleet, operator: Operator, unique_name: Callable[[str], str]
) -> None:
    healthy = [fleet.add(unique_name("train-ok"), gpus=2) for _ in range(3)]
    slow = fleet.add(unique_name("train-slow"), [{"kind": "train-slow"}], gpus=2)
    wrong = fleet.add(
        unique_name("train-wrong"), [{"kind": "train-wrong-loss", "step": 12}], gpus=2
    )
    name = unique_name("train")
    checks = {
        "burn": {"durationSeconds": 2},
        "nccl": {"maxBytes": 1 << 24},
        "train": {"enabled": True},
    }
    with operator():
        apply(cluster, fleet.validation(name, checks=checks))
        status = completed_run(cluster, name)
        reports = by_node(reports_of(cluster, name, status["run"]["id"]))
        delete_validation(cluster, name)

    assert {n: reports[n]["verdict"] for n in healthy} == dict.fromkeys(healthy, "Passed")
    assert reports[slow]["verdict"] == "Failed"
    assert reports[slow]["reason"] == "LowTrainingThroughput"
    assert reports[slow]["failures"][0]["check"] == "train"
    assert "below the minimum 63,200 (train.minTokensPerSecond)" in reports[slow]["message"]
    assert reports[wrong]["verdict"] == "Failed"
    assert reports[wrong]["reason"] == "TrainingMismatch"
    assert reports[wrong]["failures"][0]["check"] == "train"
    message = reports[wrong]["message"]
    assert "training loss differs from step 12 of 65 on" in message
    assert "where 4 nodes of the same stack" in message  # the slow node's losses are right
    assert status["nodes"]["passed"] == 3 and status["nodes"]["failed"] == 2
    failing = {f["node"]: f["reason"] for f in status["failingNodes"]}
    assert failing == {slow: "LowTrainingThroughput", wrong: "TrainingMismatch"}
    [outlier] = status["outliers"]
    assert (outlier["node"], outlier["field"], outlier["source"]) == (
        wrong,
        "trainingLoss",
        "majority",
    )


def test_each_profile_of_a_gpuvalidation_runs_its_checks_and_an_enabled_false_beside_it_is_said(
    cluster: Cluster, fleet: Fleet, operator: Operator, unique_name: Callable[[str], str]
) -> None:
    # Issue 42: `spec.checks.profile: full` ran neither the memory test nor the training step
    # (the CRD stored `enabled: false` for both, which won over the profile).
    cases: dict[str, dict[str, object]] = {
        **{str(p): {"profile": p.value} for p in Profile},
        "full-train-off": {"profile": Profile.FULL.value, "train": {"enabled": False}},
    }
    names = {case: unique_name(f"profile-{case}") for case in cases}
    nodes = {
        case: fleet.add(unique_name(f"profile-{case}"), gpus=2, labels={"profile-case": case})
        for case in cases
    }
    with operator():
        for case, given in cases.items():
            body = fleet.validation(
                names[case],
                checks={"burn": {"durationSeconds": 2}, "nccl": {"maxBytes": 1 << 24}, **given},
            )
            body["spec"]["nodeSelector"]["matchLabels"]["profile-case"] = case
            apply(cluster, body)
        statuses = {case: completed_run(cluster, names[case]) for case in cases}
        ran = {
            case: [
                c["name"]
                for c in by_node(reports_of(cluster, names[case], statuses[case]["run"]["id"]))[
                    nodes[case]
                ]["result"]["checks"]
            ]
            for case in cases
        }
        for name in names.values():
            delete_validation(cluster, name)

    # What the report shows ran is what the command line's profile runs.
    for profile in Profile:
        assert ran[str(profile)] == ChecksConfig(profile=profile).enabled(), profile
    assert set(PROFILED) <= set(ran[Profile.FULL])
    clash = ran["full-train-off"]
    assert CheckName.MEMORY in clash and CheckName.TRAIN not in clash
    said = {case: conditions(status)["ProfileOverridden"] for case, status in statuses.items()}
    assert said["full-train-off"]["status"] == "True"
    assert said["full-train-off"]["reason"] == "EnabledFalseWins"
    assert "spec.checks.train.enabled false keeps train off" in said["full-train-off"]["message"]
    assert all(said[str(p)]["status"] == "False" for p in Profile)
