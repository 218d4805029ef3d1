"""Where a node's verdict comes from besides its agent's own report: the container's termination
message when the report write never arrived (issue 9, B5), the run as a whole, which catches a
node whose burn reference differs from its peers' (issue 9, C), and a person who rewrites a
finished run's report by hand (issue 20): one reading of it for the metrics and the status."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from gpuval_devtools.controlplane import Cluster
from tests.support.fleet import (
    Fleet,
    Operator,
    apply,
    by_node,
    completed_run,
    delete_validation,
    reports_of,
    scrape,
    status_of,
)
from tests.support.kube import get_json, wait_for

pytestmark = pytest.mark.usefixtures("install_crds")


def test_a_verdict_the_agent_could_not_write_arrives_through_its_termination_message(
    cluster: Cluster, fleet: Fleet, operator: Operator, unique_name: Callable[[str], str]
) -> None:
    # Both agents find the API server gone for longer than their deadline: their report writes
    # all fail, and only the termination message the kubelet keeps carries their verdicts.
    healthy = fleet.add(unique_name("cut-ok"), api_outage_seconds=2)
    broken = fleet.add(
        unique_name("cut-bad"), faults=[{"kind": "miscompare", "gpu": 2}], api_outage_seconds=2
    )
    name = unique_name("outage")
    with operator():
        apply(cluster, fleet.validation(name))
        status = completed_run(cluster, name)
        reports = by_node(reports_of(cluster, name, status["run"]["id"]))
        delete_validation(cluster, name)

    assert status["nodes"]["passed"] == 1 and status["nodes"]["failed"] == 1
    assert reports[healthy]["verdict"] == "Passed"
    assert reports[broken]["verdict"] == "Failed" and reports[broken]["reason"] == "BurnMismatch"
    assert reports[broken]["failures"][0]["gpu"] == 2
    assert reports[broken]["summary"]["gpuCount"] == 8
    for node in (healthy, broken):
        assert "termination message" in reports[node]["message"], reports[node]["message"]
    assert status["failingNodes"][0]["node"] == broken
    assert status["failingNodes"][0]["reason"] == "BurnMismatch"


def test_a_one_gpu_node_that_computes_a_consistently_wrong_answer_is_caught_by_its_peers(
    cluster: Cluster, fleet: Fleet, operator: Operator, unique_name: Callable[[str], str]
) -> None:
    # On a one-GPU node no other GPU can disagree, and every iteration matches the GPU's own
    # (wrong) reference: the node passes on its own. Its peers' fingerprints give it away.
    peers = [fleet.add(unique_name("one"), gpus=1) for _ in range(3)]
    wrong = fleet.add(unique_name("sdc"), faults=[{"kind": "wrong-reference"}], gpus=1)
    name = unique_name("sdc")
    with operator() as port:
        apply(cluster, fleet.validation(name, nodeActions={"taint": {"effect": "NoSchedule"}}))
        status = completed_run(cluster, name)
        reports = by_node(reports_of(cluster, name, status["run"]["id"]))
        taints = get_json(cluster, "node", wrong)["spec"].get("taints") or []
        metrics = scrape(port)
        delete_validation(cluster, name)

    assert {n: reports[n]["verdict"] for n in peers} == dict.fromkeys(peers, "Passed")
    assert reports[wrong]["verdict"] == "Failed"
    assert reports[wrong]["reason"] == "BurnFingerprintMismatch"
    assert reports[wrong]["failures"][0]["check"] == "burn"
    assert "which 3 nodes with the same determinants" in reports[wrong]["message"]
    assert status["failingNodes"] == [
        {"node": wrong, "reason": "BurnFingerprintMismatch", "message": reports[wrong]["message"]}
    ]
    [outlier] = status["outliers"]
    assert outlier["node"] == wrong and outlier["field"] == "burnFingerprint.bf16"
    assert outlier["expected"] != outlier["value"] and outlier["source"] == "majority"
    assert any(t["value"] == "BurnFingerprintMismatch" for t in taints)
    assert f'gpuval_node_passed{{node="{wrong}",validation="{name}"}} 0.0' in metrics


def test_a_hand_edit_of_a_finished_runs_report_reads_the_same_in_the_metrics_and_the_status(
    cluster: Cluster, fleet: Fleet, operator: Operator, unique_name: Callable[[str], str]
) -> None:
    # A person overrules a finished run's verdict by writing its report's status (a valid write:
    # the schema takes it). The node's metrics, the validation's counts and failing nodes, and the
    # node's own labels must all read the report as it is now: never Passed in one, Failed in the
    # other.
    good = fleet.add(unique_name("ok"))
    bad = fleet.add(unique_name("bad"), faults=[{"kind": "miscompare", "gpu": 3}])
    name = unique_name("edit")
    with operator() as port:
        apply(cluster, fleet.validation(name))
        before = completed_run(cluster, name)
        run = before["run"]["id"]
        [report] = [r for r in reports_of(cluster, name, run) if r["spec"]["node"] == bad]
        edit = {"verdict": "Passed", "reason": None, "failures": [], "message": "overruled"}
        cluster.kubectl(
            "patch",
            "gpunodereport",
            report["metadata"]["name"],
            "--subresource=status",
            "--type=merge",
            "-p",
            json.dumps({"status": edit}),
        )
        passed = f'gpuval_node_passed{{node="{bad}",validation="{name}"}} 1.0'
        wait_for("the metrics to read the edited report", lambda: passed in scrape(port))

        def agreed() -> dict[str, object] | None:
            # The revised verdict reopens the run (phase Running, counts already revised) until
            # the operator's next pass closes it again: wait for that close, not the interim.
            status = status_of(cluster, name)
            counts = status.get("nodes") or {}
            closed = status.get("phase") != "Running"
            return status if counts.get("failed") == 0 and closed else None

        # Before issue 20 the run kept its first verdict: the status said failed 1 for good.
        after = wait_for("the run to close again on the edited report", agreed, timeout=30)
        metrics = scrape(port)
        label = wait_for(
            "the node's verdict label to follow",
            lambda: (
                get_json(cluster, "node", bad)["metadata"]["labels"].get("gpuval.dev/verdict")
                == "passed"
            ),
            timeout=30,
        )
        delete_validation(cluster, name)

    assert before["nodes"]["failed"] == 1 and before["failingNodes"][0]["node"] == bad
    assert after["run"]["id"] == run, "the same run, closed again on the edited verdict"
    assert after["nodes"] == {
        "total": 2,
        "pending": 0,
        "waiting": 0,
        "running": 0,
        "passed": 2,
        "failed": 0,
        "notRun": 0,
    }
    assert after["failingNodes"] == [] and after["phase"] == "Succeeded"
    assert f'gpuval_validation_nodes{{state="failed",validation="{name}"}} 0.0' in metrics
    assert f'gpuval_validation_nodes{{state="passed",validation="{name}"}} 2.0' in metrics
    assert f'gpuval_node_passed{{node="{good}",validation="{name}"}} 1.0' in metrics
    assert f'gpuval_node_failure_info{{node="{bad}"' not in metrics
    assert label
