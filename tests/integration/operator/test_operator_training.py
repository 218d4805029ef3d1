"""The training check through the operator on the local control plane (issue 36): five simulated
nodes train; the slow one fails on its own agent's judgement (LowTrainingThroughput), the one
whose losses leave its peers' passes on its own and is failed by the run's comparison of the
nodes' losses (TrainingMismatch, naming the step), the others pass; status.training says how
each stack was compared. Two nodes that differ with no majority are named undecided, neither
failed (issue 42 part 6)."""

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
from tests.support.kube import get_json, wait_for

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
    [how] = status["training"]["compared"]
    assert how.startswith("5 nodes of NVIDIA H200") and "bit for bit with the losses 4 of" in how
    assert status["training"]["undecided"] == []


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


def test_two_nodes_whose_losses_differ_are_undecided_and_both_are_named(
    cluster: Cluster, fleet: Fleet, operator: Operator, unique_name: Callable[[str], str]
) -> None:
    first = fleet.add(unique_name("pair-a"), gpus=1)
    second = fleet.add(unique_name("pair-b"), [{"kind": "train-wrong-loss", "step": 20}], gpus=1)
    name = unique_name("pair")
    checks = {"burn": {"durationSeconds": 2}, "train": {"enabled": True}}
    with operator():
        apply(cluster, fleet.validation(name, checks=checks))
        status = completed_run(cluster, name)
        reports = by_node(reports_of(cluster, name, status["run"]["id"]))
        delete_validation(cluster, name)

    assert {n: reports[n]["verdict"] for n in (first, second)} == {
        first: "Passed",
        second: "Passed",
    }
    [undecided] = status["training"]["undecided"]
    pair = ", ".join(sorted((first, second)))
    assert undecided.startswith(f"undecided: {pair} (2 nodes of one stack")
    assert "from step 20 of 65 on, and no majority tells which is right" in undecided
    [how] = status["training"]["compared"]
    assert f"({pair}): undecided, they differ and no majority" in how


def test_a_learned_baseline_holds_the_losses_and_fails_a_lone_node_that_differs_from_them(
    cluster: Cluster, fleet: Fleet, operator: Operator, unique_name: Callable[[str], str]
) -> None:
    # Issue 42 part 6: alone in its run a node has no peer; the GpuBaseline learned from an
    # earlier run holds its stack's losses, and its agent pod is held to them bit for bit.
    learned_name = "nvidia-h200-x4-700w-gen5x16"
    cluster.kubectl("delete", "gpubaseline", learned_name, "--ignore-not-found", "--wait=true")
    for _ in range(2):
        fleet.add(unique_name("learn-ok"), gpus=4)
    lone = fleet.add(
        unique_name("lone"),
        [{"kind": "train-wrong-loss", "step": 30}],
        gpus=4,
        labels={"gpuval-lone": "yes"},
    )
    checks = {"burn": {"durationSeconds": 2}, "nccl": {"maxBytes": 1 << 24}}
    checks["train"] = {"enabled": True}
    first, second = unique_name("learn"), unique_name("lone")
    only_healthy = {
        "matchLabels": {"gpuval-test": fleet.label},
        "matchExpressions": [{"key": "gpuval-lone", "operator": "DoesNotExist"}],
    }
    only_lone = {"matchLabels": {"gpuval-test": fleet.label, "gpuval-lone": "yes"}}
    try:
        with operator():
            apply(
                cluster,
                fleet.validation(
                    first, checks=checks, nodeSelector=only_healthy, baseline={"minNodes": 2}
                ),
            )
            completed_run(cluster, first)
            learned = wait_for(
                f"{learned_name} to be learned",
                lambda: get_json(cluster, "gpubaseline", learned_name),
                timeout=120,
                interval=1,
            )
            lone_spec = {"checks": checks, "nodeSelector": only_lone, "baseline": {"mode": "Use"}}
            apply(cluster, fleet.validation(second, **lone_spec))
            status = completed_run(cluster, second)
            reports = by_node(reports_of(cluster, second, status["run"]["id"]))
    finally:
        delete_validation(cluster, first)
        delete_validation(cluster, second)
        cluster.kubectl("delete", "gpubaseline", learned_name, "--ignore-not-found")

    [losses] = learned["spec"]["training"]
    assert losses["nodes"] == 2 and len(losses["losses"]) == 65
    assert losses["experiment"].endswith("|gpus 4|seed 1234|steps 65")
    assert reports[lone]["verdict"] == "Failed", (status.get("baseline"), reports[lone])
    assert reports[lone]["reason"] == "TrainingMismatch"
    message = reports[lone]["message"]
    assert f"which {learned_name} learned from 2 nodes of the same stack" in message
    assert "from step 30 of 65 on" in message
    [how] = status["training"]["compared"]
    assert how.startswith(f"{lone} (") and "not compared, no other node" in how
