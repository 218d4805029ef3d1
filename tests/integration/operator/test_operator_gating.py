"""Keep proving it: nodes that join, reboot or were deleted mid-run; several validations on one
node; a dry run that touches nothing (issue 12)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from gpuval_devtools.controlplane import Cluster
from tests.support.fleet import (
    Fleet,
    Operator,
    apply,
    by_node,
    completed_run,
    delete_validation,
    pods_of,
    reports_of,
    status_of,
)
from tests.support.kube import get_json, wait_for
from tests.support.nodes import QUICK_CHECKS, node_of, taint_keys, training_job

pytestmark = pytest.mark.usefixtures("install_crds")

STARTUP = {"key": "gpuval.dev/unvalidated", "effect": "NoSchedule"}
GATING = {"batchSeconds": 1, "startupTaint": {"key": STARTUP["key"]}}


def _condition(node: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = next(
        c for c in node["status"]["conditions"] if c["type"] == "GpuValidated"
    )
    return found


def _verdicts(cluster: Cluster, name: str) -> dict[str, str | None]:
    return {n: s.get("verdict") for n, s in by_node(reports_of(cluster, name)).items()}


def test_a_joining_node_is_validated_and_loses_its_startup_taint_on_pass_keeps_it_on_failure(
    cluster: Cluster, fleet: Fleet, operator: Operator, unique_name: Callable[[str], str]
) -> None:
    first = fleet.add(unique_name("first"))
    name = unique_name("gate")
    spec = {
        "gating": GATING,
        "checks": QUICK_CHECKS,
        "nodeActions": {"taint": {"effect": "NoSchedule"}},
    }
    with operator():
        apply(cluster, fleet.validation(name, **spec))
        completed_run(cluster, name)
        good = fleet.add(unique_name("joins"), taints=[STARTUP])
        bad = fleet.add(
            unique_name("joinsbad"), [{"kind": "miscompare", "gpu": 1}], taints=[STARTUP]
        )

        def joined() -> bool:
            verdicts = _verdicts(cluster, name)
            return bool(verdicts.get(good) and verdicts.get(bad))

        def reopened_and_done() -> dict[str, Any] | None:
            found = status_of(cluster, name)
            return found if (found.get("run") or {}).get("completedAt") else None

        wait_for("both joining nodes to get a verdict in the same run", joined, timeout=90)
        status = wait_for("the reopened run to complete", reopened_and_done, timeout=60)
        passed, failed = node_of(cluster, good), node_of(cluster, bad)
        events = get_json(
            cluster, "events", "-n", "default", "--field-selector", f"involvedObject.name={name}"
        )
        delete_validation(cluster, name)

    assert status["run"]["number"] == 1, "the nodes joined the current run"
    assert status["nodes"]["total"] == 3 and status["nodes"]["passed"] == 2
    assert _verdicts_ok(status, bad)
    assert STARTUP["key"] not in taint_keys(passed)
    assert passed["metadata"]["labels"]["gpuval.dev/verdict"] == "passed"
    assert _condition(passed)["status"] == "True"
    assert {STARTUP["key"], "gpuval.dev/unhealthy"} <= taint_keys(failed)
    assert _condition(failed)["status"] == "False"
    assert "failed by" in _condition(failed)["message"]
    queued = [e["message"] for e in events["items"] if e["reason"] == "NodeQueued"]
    assert any(good in m and "joined" in m for m in queued), queued
    assert first not in {m.split()[0] for m in queued}, "the first node was in the run already"


def _verdicts_ok(status: dict[str, Any], bad: str) -> bool:
    return [n["node"] for n in status["failingNodes"]] == [bad]


def test_a_rebooted_node_is_validated_again(
    cluster: Cluster, fleet: Fleet, operator: Operator, unique_name: Callable[[str], str]
) -> None:
    node = fleet.add(unique_name("reboots"))
    name = unique_name("reboot")
    with operator():
        apply(cluster, fleet.validation(name, gating=GATING, checks=QUICK_CHECKS))
        completed_run(cluster, name)
        cluster.kubectl(
            "patch",
            "node",
            node,
            "--subresource=status",
            "--type=merge",
            "-p",
            json.dumps({"status": {"nodeInfo": {"bootID": "boot-2"}}}),
        )
        wait_for(
            "a second attempt's pod on the rebooted node",
            lambda: any(p["metadata"]["name"].endswith("-a2") for p in pods_of(cluster, name)),
            timeout=60,
        )
        record = f"verdict.gpuval.dev/{name}"

        def tested_on_new_boot() -> bool:
            annotations = node_of(cluster, node)["metadata"]["annotations"]
            return bool(json.loads(annotations.get(record, "{}")).get("boot") == "boot-2")

        wait_for("the node's record to name its new boot", tested_on_new_boot, timeout=60)
        status = status_of(cluster, name)
        delete_validation(cluster, name)
    assert status["run"]["number"] == 1 and status["nodes"]["passed"] == 1


def test_a_node_deleted_before_its_agent_started_is_not_run_within_seconds(
    cluster: Cluster, fleet: Fleet, operator: Operator, unique_name: Callable[[str], str]
) -> None:
    node = fleet.add(unique_name("vanish"))
    name = unique_name("vanish")
    with training_job(cluster, node, unique_name("training")), operator():
        apply(cluster, fleet.validation(name, nodeTimeoutSeconds=600, checks=QUICK_CHECKS))
        wait_for("the agent pod, waiting for busy GPUs", lambda: pods_of(cluster, name), timeout=30)
        cluster.delete_node(node)
        status = completed_run(cluster, name, timeout=25)
        report = by_node(reports_of(cluster, name, status["run"]["id"]))[node]
        delete_validation(cluster, name)
    assert report["verdict"] == "NotRun" and report["reason"] == "NodeGoneUntested"


def test_two_validations_on_one_node_leave_it_failed_naming_the_failing_one_until_it_passes(
    cluster: Cluster, fleet: Fleet, operator: Operator, unique_name: Callable[[str], str]
) -> None:
    node = fleet.add(unique_name("shared"), [{"kind": "thermal-slowdown", "gpu": 2}])
    strict, lax = unique_name("strict"), unique_name("lax")
    actions = {"taint": {"effect": "NoSchedule"}}
    lenient = {
        "burn": {
            "durationSeconds": 1,
            "failOnThermalSlowdown": False,
            "minTflops": {"fractionOfExpected": 0.5},
        }
    }
    with operator():
        apply(cluster, fleet.validation(strict, checks=QUICK_CHECKS, nodeActions=actions))
        completed_run(cluster, strict)
        apply(cluster, fleet.validation(lax, checks=lenient, nodeActions=actions))
        completed_run(cluster, lax)
        both = node_of(cluster, node)
        # The strict validation now tolerates the slowdown too: it passes, the node is passed.
        apply(cluster, fleet.validation(strict, checks=lenient, nodeActions=actions))
        completed_run(cluster, strict, after=1)
        after = node_of(cluster, node)
        delete_validation(cluster, strict)
        delete_validation(cluster, lax)
    assert _verdicts_failed_by(both) == strict
    assert "gpuval.dev/unhealthy" in taint_keys(both)
    assert both["metadata"]["labels"]["gpuval.dev/verdict"] == "failed"
    assert f"failed by {strict}" in _condition(both)["message"]
    assert after["metadata"]["labels"]["gpuval.dev/verdict"] == "passed"
    assert "gpuval.dev/unhealthy" not in taint_keys(after)
    assert _condition(after)["status"] == "True"


def _verdicts_failed_by(node: dict[str, Any]) -> str:
    return str(node["metadata"]["annotations"].get("gpuval.dev/failed-by"))


def test_a_dry_run_touches_no_node_and_says_what_it_would_do(
    cluster: Cluster, fleet: Fleet, operator: Operator, unique_name: Callable[[str], str]
) -> None:
    bad = fleet.add(unique_name("dry"), [{"kind": "miscompare", "gpu": 0}])
    name = unique_name("dry")
    before = node_of(cluster, bad)
    actions = {"taint": {"effect": "NoExecute"}, "cordon": True, "dryRun": True}
    with operator():
        apply(cluster, fleet.validation(name, checks=QUICK_CHECKS, nodeActions=actions))
        status = completed_run(cluster, name)
        after = node_of(cluster, bad)
        events = get_json(
            cluster, "events", "-n", "default", "--field-selector", f"involvedObject.name={bad}"
        )
        delete_validation(cluster, name)
    # kube-controller-manager adds the beta.kubernetes.io labels to a new node on its own time:
    # what gpuval could have written is compared, all of it.
    assert _ours(after["metadata"]["labels"]) == _ours(before["metadata"]["labels"]) == {}
    assert _ours(after["metadata"].get("annotations")) == {}
    assert not after["spec"].get("unschedulable")
    assert not [t for t in after["spec"].get("taints") or [] if "gpuval.dev/" in t["key"]]
    assert not any(c["type"] == "GpuValidated" for c in after["status"]["conditions"])
    [planned] = status["dryRun"]
    assert planned["node"] == bad
    assert "taint gpuval.dev/unhealthy=BurnMismatch:NoExecute" in planned["actions"]
    assert "cordon" in planned["actions"] and "condition GpuValidated=False" in planned["actions"]
    assert any(e["reason"] == "DryRunNodeAction" for e in events["items"])


def _ours(values: dict[str, str] | None) -> dict[str, str]:
    """The gpuval.dev keys (labels, annotations, per-validation verdict entries) among `values`."""
    return {k: v for k, v in (values or {}).items() if "gpuval.dev/" in k and "simulate" not in k}
