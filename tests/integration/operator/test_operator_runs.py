"""The operator on the real control plane, with the real agent run by the pod runner on kwok nodes.

Each test adds its own simulated nodes under a unique label and selects only them, so tests sharing
the session's cluster never validate each other's nodes. The operator runs in-process through
kopf's KopfRunner, except where a test kills it: there it is its own process, ended with SIGKILL as
a crashed pod would be.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuval_api import keys
from gpuval_api.env import OperatorEnv
from gpuval_devtools.controlplane import Cluster, free_port
from gpuval_devtools.launch import AGENT_NAMESPACE, operator_process
from gpuval_operator import rbac
from tests.support.fleet import (
    Fleet,
    apply,
    by_node,
    completed_run,
    conditions,
    delete_validation,
    events_of,
    pods_of,
    reports_of,
    scrape,
    status_of,
)
from tests.support.kube import get_json, wait_for
from tests.support.nodes import QUICK_CHECKS

pytestmark = pytest.mark.usefixtures("install_crds")

TERMINAL = ("Succeeded", "Failed")


def test_a_run_validates_every_selected_node_and_names_the_faulty_one(
    cluster: Cluster,
    fleet: Fleet,
    operator: Callable[[], contextlib.AbstractContextManager[int]],
    unique_name: Callable[[str], str],
) -> None:
    good = [fleet.add(unique_name("ok")) for _ in range(2)]
    bad = fleet.add(unique_name("bad"), faults=[{"kind": "miscompare", "gpu": 3}])
    name = unique_name("e2e")
    with operator() as port:
        apply(cluster, fleet.validation(name, maxConcurrent=3))
        status = completed_run(cluster, name)
        # Healthy capacity: counted from the nodes' entries once the watch sees them.
        capacity = wait_for(
            "status.capacity to count the failed node",
            lambda: (
                (status_of(cluster, name).get("capacity") or {}).get("nodes", {}).get("failed")
                and status_of(cluster, name)["capacity"]
            ),
            timeout=60,
        )
        metrics = wait_for(
            "the capacity metrics to count the failed node",
            lambda: (
                (
                    text := scrape(port),
                    f'gpuval_validation_gpus{{state="failed",validation="{name}"}} 1.0' in text,
                )[1]
                and text
            ),
            timeout=30,
        )
        reports = by_node(reports_of(cluster, name, status["run"]["id"]))
        labels = {n: get_json(cluster, "node", n)["metadata"]["labels"] for n in fleet.nodes}
        delete_validation(cluster, name)
        # Deleting the validation takes its record off its nodes, and what it alone asked for.
        wait_for(
            "the deleted validation's labels to leave its nodes",
            lambda: all(
                "gpuval.dev/verdict" not in get_json(cluster, "node", n)["metadata"]["labels"]
                for n in fleet.nodes
            ),
            timeout=30,
        )

    assert status["nodes"] == {
        "total": 3,
        "pending": 0,
        "waiting": 0,
        "running": 0,
        "passed": 2,
        "failed": 1,
        "notRun": 0,
    }
    assert status["phase"] == "Failed"
    assert status["failingNodes"] == [
        {"node": bad, "reason": "BurnMismatch", "message": status["failingNodes"][0]["message"]}
    ]
    cond = conditions(status)
    assert cond["Succeeded"]["status"] == "False" and cond["NodesHealthy"]["status"] == "False"
    assert cond["Uniform"]["status"] == "True" and cond["Invalid"]["status"] == "False"
    assert all(c["observedGeneration"] == 1 for c in cond.values())

    assert set(reports) == {*good, bad}
    assert all(
        reports[n]["verdict"] == "Passed" and reports[n]["summary"]["gpuCount"] == 8 for n in good
    )
    assert reports[bad]["verdict"] == "Failed" and reports[bad]["reason"] == "BurnMismatch"
    assert reports[bad]["result"]["backend"] == "simulated"

    assert {n: labels[n].get("gpuval.dev/verdict") for n in fleet.nodes} == {
        **{n: "passed" for n in good},
        bad: "failed",
    }
    assert labels[bad]["gpuval.dev/reason"] == "BurnMismatch"
    assert f'gpuval_node_passed{{node="{bad}",validation="{name}"}} 0.0' in metrics
    assert f'gpuval_validation_nodes{{state="passed",validation="{name}"}} 2.0' in metrics
    assert (
        f'gpuval_node_failure_info{{node="{bad}",reason="BurnMismatch",validation="{name}"}} 1.0'
        in metrics
    )

    # The failing GPU (3) counts failed, the bad node's seven others withheld with it.
    assert capacity == {
        "gpus": {
            "healthy": 16,
            "stale": 0,
            "untested": 0,
            "failed": 1,
            "withheld": 7,
            "repair": 0,
            "needsPerson": 0,
        },
        "nodes": {
            "healthy": 2,
            "stale": 0,
            "untested": 0,
            "failed": 1,
            "withheld": 0,
            "repair": 0,
            "needsPerson": 0,
        },
        "healthyRatio": "0.6667",
    }
    for state, count in (("healthy", 16), ("withheld", 7), ("needsPerson", 0)):
        assert f'gpuval_validation_gpus{{state="{state}",validation="{name}"}} {count}.0' in metrics
    assert f'gpuval_validation_capacity_nodes{{state="failed",validation="{name}"}} 1.0' in metrics
    assert f'gpuval_validation_healthy_capacity_ratio{{validation="{name}"}} 0.666' in metrics

    events = get_json(
        cluster, "events", "-n", "default", "--field-selector", f"involvedObject.name={bad}"
    )
    assert any(e["reason"] == "ValidationFailed" for e in events["items"])


def test_the_concurrency_limit_holds_across_waves(
    cluster: Cluster,
    fleet: Fleet,
    operator: Callable[[], contextlib.AbstractContextManager[int]],
    unique_name: Callable[[str], str],
) -> None:
    for _ in range(5):
        fleet.add(unique_name("wave"), timeScale=0.1)
    name = unique_name("conc")
    busiest = 0
    with operator():
        apply(cluster, fleet.validation(name, maxConcurrent=2))
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            # A node is in flight from its pod's creation until its report has a verdict; its
            # pod may still be wrapping up after that, which is not validation work. Pods are
            # listed before reports, so a wave that starts between the two lists is not
            # counted together with the node that made room for it.
            pods = pods_of(cluster, name)
            done = {
                n
                for n, s in by_node(reports_of(cluster, name)).items()
                if s.get("phase") == "Completed"
            }
            in_flight = [
                p
                for p in pods
                if p["metadata"]["annotations"]["gpuval.dev/node"] not in done
                and (p.get("status") or {}).get("phase") not in TERMINAL
            ]
            busiest = max(busiest, len(in_flight))
            if (status_of(cluster, name).get("run") or {}).get("completedAt"):
                break
            time.sleep(0.3)
        status = status_of(cluster, name)
        delete_validation(cluster, name)
    assert status["nodes"]["passed"] == 5
    assert busiest == 2, f"at most 2 nodes at a time, and the limit was used; saw {busiest}"


def test_an_agent_that_never_finishes_fails_its_node_at_the_timeout_and_its_pod_goes(
    cluster: Cluster,
    fleet: Fleet,
    operator: Callable[[], contextlib.AbstractContextManager[int]],
    unique_name: Callable[[str], str],
) -> None:
    healthy = fleet.add(unique_name("ok"))
    hung = fleet.add(unique_name("hang"), faults=[{"kind": "hang"}])
    name = unique_name("hang")
    with operator():
        apply(
            cluster,
            fleet.validation(name, nodeTimeoutSeconds=20, checks=QUICK_CHECKS),
        )
        status = completed_run(cluster, name, timeout=150)
        wait_for(
            "the hung agent's pod to be deleted",
            lambda: all(
                p["metadata"]["annotations"]["gpuval.dev/node"] != hung
                for p in pods_of(cluster, name)
            ),
            timeout=60,
        )
        reports = by_node(reports_of(cluster, name, status["run"]["id"]))
        delete_validation(cluster, name)
    assert reports[healthy]["verdict"] == "Passed"
    assert reports[hung]["verdict"] == "Failed" and reports[hung]["reason"] == "TimedOut"
    assert "did not finish within 20s" in reports[hung]["message"]


def test_a_node_removed_mid_run_fails_as_node_gone_within_seconds(
    cluster: Cluster,
    fleet: Fleet,
    operator: Callable[[], contextlib.AbstractContextManager[int]],
    unique_name: Callable[[str], str],
) -> None:
    stays = fleet.add(unique_name("stays"))
    leaves = fleet.add(unique_name("leaves"), faults=[{"kind": "hang"}])
    name = unique_name("gone")
    with operator():
        apply(
            cluster,
            fleet.validation(name, nodeTimeoutSeconds=600, checks=QUICK_CHECKS),
        )
        wait_for(
            "the leaving node's agent to run",
            lambda: any(
                p["metadata"]["annotations"]["gpuval.dev/node"] == leaves
                and (p.get("status") or {}).get("phase") == "Running"
                for p in pods_of(cluster, name)
            ),
            timeout=60,
        )
        cluster.delete_node(leaves)
        # The node watch sees it at once: well before the pod's garbage collection (~40 s) or
        # the node's timeout (600 s).
        status = completed_run(cluster, name, timeout=25)
        reports = by_node(reports_of(cluster, name, status["run"]["id"]))
        delete_validation(cluster, name)
    assert reports[stays]["verdict"] == "Passed"
    assert reports[leaves]["verdict"] == "Failed", reports[leaves]
    assert reports[leaves]["reason"] == "NodeGone", reports[leaves]
    assert leaves in reports[leaves]["message"]


def test_an_invalid_spec_is_reported_and_nothing_is_scheduled_until_it_is_fixed(
    cluster: Cluster,
    fleet: Fleet,
    operator: Callable[[], contextlib.AbstractContextManager[int]],
    unique_name: Callable[[str], str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    fleet.add(unique_name("n"))
    name = unique_name("bad-spec")
    rejected = cluster.kubectl(
        "apply",
        "-f",
        "-",
        input=yaml.safe_dump(fleet.validation(name, maxConcurrent="150%")),
        check=False,
    )
    assert rejected.returncode != 0
    assert (
        "maxConcurrent must be a node count >= 1 or a percentage from 1% to 100%" in rejected.stderr
    )
    with operator():
        apply(cluster, fleet.validation(name, schedule="every night"))

        def invalid() -> dict[str, Any] | None:
            cond = conditions(status_of(cluster, name)).get("Invalid")
            return cond if cond and cond["status"] == "True" else None

        cond = wait_for("the Invalid condition", invalid, timeout=60)
        assert "spec.schedule='every night'" in cond["message"]
        assert "not a cron expression" in cond["message"]
        time.sleep(3)
        assert reports_of(cluster, name) == [] and pods_of(cluster, name) == []
        assert status_of(cluster, name)["phase"] == "Invalid"

        apply(cluster, fleet.validation(name))
        status = completed_run(cluster, name)
        delete_validation(cluster, name)
        wait_for("the deletion", lambda: get_json(cluster, "gpuvalidation", name) is None, 60)
    cond = conditions(status)
    # Issue 43 part 8: a clean deletion, then a clean stop of the operator, warn of nothing
    # (kopf cancelled the daemon at once: "Daemon 'validation_daemon' is cancelled. Will
    # escalate." at WARNING, each time).
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not [text for text in warned if "cancelled" in text or "orphaned" in text], warned
    assert cond["Invalid"]["status"] == "False" and cond["Succeeded"]["status"] == "True"
    # The first run of the object: nothing ran while the spec was invalid.
    assert status["run"]["trigger"] == "created" and status["observedGeneration"] == 2


def test_a_schedule_starts_a_new_run_at_each_tick(
    cluster: Cluster,
    fleet: Fleet,
    operator: Callable[[], contextlib.AbstractContextManager[int]],
    unique_name: Callable[[str], str],
) -> None:
    fleet.add(unique_name("n"))
    name = unique_name("cron")
    with operator():
        # A 6th cron field counts seconds: a tick every 15 s keeps the test short.
        apply(cluster, fleet.validation(name, schedule="* * * * * */15", history=2))
        first = completed_run(cluster, name)
        assert first["nextRunAt"]
        second = completed_run(cluster, name, timeout=90, after=first["run"]["number"])
        third = completed_run(cluster, name, timeout=90, after=second["run"]["number"])
        runs_kept = {r["spec"]["run"] for r in reports_of(cluster, name)}
        # Each run's trigger from its RunStarted Event too: the first completed run the status
        # showed may already be a scheduled one (run 1 can end just before a tick, between two
        # of the test's reads on a loaded machine), but run 1's Event stays.
        started = [e["message"] for e in events_of(cluster, name) if e["reason"] == "RunStarted"]
        delete_validation(cluster, name)
    triggers = {
        int(m.group(1)): m.group(2)
        for m in (re.match(r"run (\d+)-\S+ \((\w+)\) started", text) for text in started)
        if m is not None
    }
    assert triggers[1] == "created", started
    assert all(triggers[n] == "schedule" for n in range(2, third["run"]["number"] + 1)), started
    assert (second["run"]["trigger"], third["run"]["trigger"]) == ("schedule", "schedule")
    assert third["run"]["number"] == first["run"]["number"] + 2
    assert runs_kept == {second["run"]["id"], third["run"]["id"]}, "history: 2 keeps two runs"


def test_a_stale_proof_is_revalidated_stalest_first_and_a_fresh_one_is_left_alone(
    cluster: Cluster,
    fleet: Fleet,
    operator: Callable[[], contextlib.AbstractContextManager[int]],
    unique_name: Callable[[str], str],
) -> None:
    """spec.maxProofAgeSeconds: every pass writes the node's proof; proofs aged past the age
    (written here, as time would) get a proof-expired run over exactly those nodes, stalest
    first, which refreshes them; the node proven within the age is not run again."""
    fresh, old, oldest = (fleet.add(unique_name(n)) for n in ("pa", "pb", "pc"))
    name = unique_name("proof")

    def proof(node: str) -> tuple[str | None, str | None]:
        annotations = get_json(cluster, "node", node)["metadata"].get("annotations") or {}
        return (
            annotations.get(keys.NODE_ANNOTATION_PROVEN_AT),
            annotations.get(keys.NODE_ANNOTATION_PROVEN_BY),
        )

    def ratio(port: int) -> str | None:
        found = re.search(
            rf'gpuval_validation_gpus_proven_within_age_ratio{{validation="{name}"}} (\S+)',
            scrape(port),
        )
        return found.group(1) if found else None

    with operator():
        apply(cluster, fleet.validation(name, maxConcurrent=1, maxProofAgeSeconds=3600))
        first = completed_run(cluster, name)
    created = {n: proof(n) for n in fleet.nodes}
    # Aged as time would age them, while no operator runs (a running one would start a run
    # for the first aged node before the second is written): one by two hours, one by three.
    for node, hours in ((old, 2), (oldest, 3)):
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - hours * 3600))
        cluster.kubectl(
            "annotate", "node", node, "--overwrite", f"{keys.NODE_ANNOTATION_PROVEN_AT}={stamp}"
        )
    with operator() as port:
        second = completed_run(cluster, name, timeout=120, after=first["run"]["number"])
        pods = sorted(
            (
                p
                for p in pods_of(cluster, name)
                if p["metadata"]["labels"][keys.LABEL_RUN] == second["run"]["id"]
            ),
            key=lambda p: p["metadata"]["creationTimestamp"],
        )
        refreshed = {n: proof(n) for n in fleet.nodes}
        within = wait_for("the proof metric", lambda: ratio(port) == "1.0" or None, timeout=30)
        status = wait_for(
            "status.proof",
            lambda: (s := status_of(cluster, name).get("proof")) and s["stale"] == 0 and s,
            timeout=30,
        )
        delete_validation(cluster, name)

    run1, run2 = first["run"]["id"], second["run"]["id"]
    assert all(by == f"{name}/{run1} created" and at for at, by in created.values()), created
    assert second["run"]["trigger"] == "proof-expired"
    assert second["nodes"]["total"] == 2 and second["nodes"]["passed"] == 2
    # One node at a time (maxConcurrent 1), in order of proof age: the oldest's pod first.
    assert [p["metadata"]["annotations"][keys.ANNOTATION_NODE] for p in pods] == [oldest, old]
    assert pods[0]["metadata"]["creationTimestamp"] < pods[1]["metadata"]["creationTimestamp"]
    assert refreshed[fresh] == created[fresh], "the fresh node was not validated again"
    for node in (old, oldest):
        at, by = refreshed[node]
        assert by == f"{name}/{run2} proof-expired"
        assert at is not None and at >= (created[node][0] or "")
    assert within
    assert (status["maxAgeSeconds"], status["withinAge"], status["stale"]) == (3600, 3, 0)


def test_uniformity_names_the_outlier_with_its_value_and_the_majority(
    cluster: Cluster,
    fleet: Fleet,
    operator: Callable[[], contextlib.AbstractContextManager[int]],
    unique_name: Callable[[str], str],
) -> None:
    fleet.add(unique_name("a"))
    fleet.add(unique_name("b"))
    odd = fleet.add(unique_name("odd"), driver="550.54.15")
    name = unique_name("uni")
    with operator() as port:
        apply(
            cluster,
            fleet.validation(name, maxConcurrent="100%", expected={"ncclVersion": "2.28.9"}),
        )
        status = completed_run(cluster, name)
        metrics = scrape(port)
        delete_validation(cluster, name)
    assert conditions(status)["Uniform"]["status"] == "False"
    assert {
        "field": "driverVersion",
        "node": odd,
        "value": "550.54.15",
        "expected": "580.159.04",
        "source": "majority",
    } in status["outliers"]
    assert f'gpuval_validation_uniform{{validation="{name}"}} 0.0' in metrics


def test_node_actions_are_set_on_failure_and_removed_when_the_node_passes_again(
    cluster: Cluster,
    fleet: Fleet,
    operator: Callable[[], contextlib.AbstractContextManager[int]],
    unique_name: Callable[[str], str],
) -> None:
    node = fleet.add(unique_name("flaky"), faults=[{"kind": "ecc-uncorrectable", "gpu": 1}])
    admin_taint = {"key": "example.com/maintenance", "value": "bios", "effect": "PreferNoSchedule"}
    cluster.kubectl(
        "patch",
        "node",
        node,
        "--type=json",
        "-p",
        json.dumps([{"op": "add", "path": "/spec/taints", "value": [admin_taint]}]),
    )
    name = unique_name("act")
    actions = {"label": True, "cordon": True, "taint": {"effect": "NoSchedule"}}
    with operator():
        apply(cluster, fleet.validation(name, nodeActions=actions))
        completed_run(cluster, name)
        failed = get_json(cluster, "node", node)
        # The node is repaired: its simulation turns healthy, and a spec change starts a new run.
        cluster.kubectl(
            "annotate",
            "node",
            node,
            "--overwrite",
            "gpuval.dev/simulate=" + json.dumps({"gpus": 8, "timeScale": 0.01}),
        )
        apply(cluster, fleet.validation(name, nodeActions=actions, history=2))
        passed_status = completed_run(cluster, name, after=1)
        # kube-controller-manager follows the cordon with its own node.kubernetes.io/unschedulable
        # taint and takes it off a moment after the uncordon: the node is read once it has.
        passed = wait_for(
            "the controller manager's unschedulable taint gone after the uncordon",
            lambda: (
                (n := get_json(cluster, "node", node))
                and not any(
                    t.get("key") == "node.kubernetes.io/unschedulable"
                    for t in n["spec"].get("taints") or []
                )
                and n
            ),
            timeout=60,
        )
        delete_validation(cluster, name)

    assert failed["spec"]["unschedulable"] is True
    assert failed["metadata"]["annotations"]["gpuval.dev/cordoned-by"] == name
    assert {
        "key": "gpuval.dev/unhealthy",
        "value": "EccUncorrectable",
        "effect": "NoSchedule",
    } in failed["spec"]["taints"]
    assert failed["metadata"]["labels"]["gpuval.dev/verdict"] == "failed"

    assert passed_status["nodes"]["passed"] == 1, "a node gpuval cordoned is validated again"
    assert not passed["spec"].get("unschedulable")
    assert "gpuval.dev/cordoned-by" not in passed["metadata"]["annotations"]
    assert passed["spec"]["taints"] == [admin_taint]
    assert passed["metadata"]["labels"]["gpuval.dev/verdict"] == "passed"
    assert "gpuval.dev/reason" not in passed["metadata"]["labels"]


def test_a_passing_node_gets_its_labels_entry_and_condition_in_one_status_write(
    cluster: Cluster,
    fleet: Fleet,
    operator: Callable[[], contextlib.AbstractContextManager[int]],
    unique_name: Callable[[str], str],
) -> None:
    """A passing node's metadata and condition go in one write to its status subresource (a
    fabric settles 10,000 nodes at once: one write each instead of two): the API server takes
    the labels and the entry there, and records them as written through `status`."""
    node = fleet.add(unique_name("ok"))
    name = unique_name("onewrite")
    with operator():
        apply(cluster, fleet.validation(name, nodeActions={"label": True}))
        completed_run(cluster, name)
        shown = cluster.kubectl("get", "node", node, "-o", "json", "--show-managed-fields")
        passed = json.loads(shown.stdout)
        delete_validation(cluster, name)

    labels, annotations = passed["metadata"]["labels"], passed["metadata"]["annotations"]
    assert labels[keys.NODE_LABEL_VERDICT] == keys.NODE_VERDICT_PASSED
    assert labels[keys.NODE_LABEL_VALIDATED_AT].isdigit()
    assert any(k.startswith(keys.NODE_VERDICT_ANNOTATION_PREFIX) for k in annotations)
    condition = next(c for c in passed["status"]["conditions"] if c["type"] == keys.NODE_CONDITION)
    assert condition["status"] == "True"
    writers = [
        entry
        for entry in passed["metadata"]["managedFields"]
        if f"f:{keys.NODE_LABEL_VERDICT}"
        in json.dumps(entry.get("fieldsV1", {}).get("f:metadata", {}).get("f:labels", {}))
    ]
    assert [w.get("subresource") for w in writers] == ["status"], writers
    status_fields = json.dumps(writers[0]["fieldsV1"].get("f:status", {}))
    assert keys.NODE_CONDITION in status_fields, "the condition came in the same write"


def test_an_operator_killed_mid_run_resumes_without_duplicate_pods_or_lost_results(
    cluster: Cluster,
    fleet: Fleet,
    podrunner: Path,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    for _ in range(6):
        fleet.add(unique_name("r"), timeScale=0.2)
    name = unique_name("restart")
    seen: dict[str, set[str]] = {}

    def record_pods() -> None:
        for pod in pods_of(cluster, name):
            node = pod["metadata"]["annotations"]["gpuval.dev/node"]
            seen.setdefault(node, set()).add(pod["metadata"]["uid"])

    env = {"GPUVAL_POD_GRACE_SECONDS": "3"}
    with operator_process(
        cluster.kubeconfig, metrics_port=free_port(), log_file=tmp_path / "op1.log", extra_env=env
    ) as first:
        apply(
            cluster,
            fleet.validation(name, maxConcurrent=2, checks={"burn": {"durationSeconds": 20}}),
        )

        def some_done_some_not() -> bool:
            record_pods()
            nodes = status_of(cluster, name).get("nodes") or {}
            return bool(nodes.get("passed")) and nodes.get("pending", 0) > 0

        wait_for("a run part-way through", some_done_some_not, timeout=120, interval=0.3)
        first.send_signal(signal.SIGKILL)
        first.wait()
    before = status_of(cluster, name)
    with operator_process(
        cluster.kubeconfig, metrics_port=free_port(), log_file=tmp_path / "op2.log", extra_env=env
    ):

        def finished() -> dict[str, Any] | None:
            record_pods()
            status = status_of(cluster, name)
            return status if (status.get("run") or {}).get("completedAt") else None

        status = wait_for("the resumed run to complete", finished, timeout=240, interval=0.3)
        reports = by_node(reports_of(cluster, name, status["run"]["id"]))
        delete_validation(cluster, name)
        # This operator removes the finalizer; give it the moment it needs before it stops.
        wait_for(
            "the validation to go",
            lambda: get_json(cluster, "gpuvalidation", name) is None,
            timeout=30,
        )

    assert status["run"]["id"] == before["run"]["id"], "the run resumed, no new run started"
    assert status["nodes"] == {
        "total": 6,
        "pending": 0,
        "waiting": 0,
        "running": 0,
        "passed": 6,
        "failed": 0,
        "notRun": 0,
    }
    assert set(seen) == set(fleet.nodes)
    duplicates = {node: uids for node, uids in seen.items() if len(uids) != 1}
    assert duplicates == {}, f"one agent pod per node, got {duplicates}"
    assert {n: r.get("verdict") for n, r in reports.items()} == {n: "Passed" for n in fleet.nodes}


def test_the_operator_works_with_only_the_rbac_it_declares_and_is_denied_the_rest(
    cluster: Cluster,
    fleet: Fleet,
    podrunner: Path,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    ok = fleet.add(unique_name("ok"))
    bad = fleet.add(unique_name("bad"), faults=[{"kind": "xid", "gpu": 0}])
    account, home = unique_name("operator"), unique_name("opns")
    cluster.apply(
        [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": home}},
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": account, "namespace": home},
            },
            rbac.cluster_role(account),
            rbac.binding("ClusterRole", account, account, home),
            rbac.role(account, AGENT_NAMESPACE, rbac.AGENT_NAMESPACE_RULES),
            rbac.binding("Role", account, account, home, AGENT_NAMESPACE),
            rbac.role(account, rbac.EVENT_NAMESPACE, rbac.EVENT_RULES),
            rbac.binding("Role", account, account, home, rbac.EVENT_NAMESPACE),
            rbac.role(f"{account}-kopf", home, rbac.OWN_NAMESPACE_RULES),
            rbac.binding("Role", f"{account}-kopf", account, home, home),
        ]
    )
    token = cluster.kubectl("create", "token", account, "-n", home).stdout.strip()
    kubeconfig = cluster.token_kubeconfig(token, tmp_path / "operator.kubeconfig")
    name = unique_name("rbac")
    log = tmp_path / "operator.log"
    env = {OperatorEnv.POD_GRACE_SECONDS: "3"}
    with operator_process(kubeconfig, metrics_port=free_port(), log_file=log, extra_env=env):
        apply(cluster, fleet.validation(name, nodeActions={"taint": {"effect": "NoSchedule"}}))
        status = completed_run(cluster, name)
        tainted = get_json(cluster, "node", bad)["spec"].get("taints") or []
        events = get_json(cluster, "events", "-n", rbac.EVENT_NAMESPACE)["items"]
        described = wait_for(
            "the run's Events in kubectl describe",
            lambda: _describe_shows(cluster, "gpuvalidation", name, "RunCompleted"),
            timeout=20,
        )
        node_described = cluster.kubectl("describe", "node", bad).stdout
        delete_validation(cluster, name)
        wait_for(
            "the finalizer to be removed",
            lambda: get_json(cluster, "gpuvalidation", name) is None,
            timeout=30,
        )

    assert status["nodes"]["passed"] == 1 and status["failingNodes"][0]["node"] == bad
    assert any(t["key"] == "gpuval.dev/unhealthy" for t in tainted)
    involved = {(e["involvedObject"]["name"], e["reason"]) for e in events}
    assert {(name, "RunStarted"), (name, "RunCompleted"), (bad, "ValidationFailed")} <= involved
    # Events about cluster-scoped objects show in `kubectl describe` (issue 9: they did not).
    assert "RunStarted" in described and "NodeFailed" in described
    assert "ValidationFailed" in node_described and "XidError" in node_described
    text = log.read_text()
    assert "Forbidden" not in text and "HTTP 403" not in text, text[-3000:]
    assert ok in {n for n in fleet.nodes}
    who = f"system:serviceaccount:{home}:{account}"
    for verb, resource, *where in (
        ("delete", "nodes"),
        ("get", "secrets", "-n", home),
        ("create", "pods", "-n", "default"),
        ("delete", "gpuvalidations"),
        ("update", "nodes"),
    ):
        answer = cluster.kubectl("auth", "can-i", verb, resource, *where, "--as", who, check=False)
        assert answer.stdout.strip() == "no", f"{who} may {verb} {resource} {where}"


def _describe_shows(cluster: Cluster, kind: str, name: str, reason: str) -> str | None:
    text = cluster.kubectl("describe", kind, name).stdout
    events = text.partition("Events:")[2]
    return text if reason in events else None


def test_a_spec_change_mid_run_supersedes_the_run_and_cleans_up_its_children(
    cluster: Cluster,
    fleet: Fleet,
    operator: Callable[[], contextlib.AbstractContextManager[int]],
    unique_name: Callable[[str], str],
) -> None:
    for _ in range(3):
        fleet.add(unique_name("s"), timeScale=0.3)
    name = unique_name("super")
    slow = {"burn": {"durationSeconds": 20}}
    with operator():
        apply(cluster, fleet.validation(name, maxConcurrent=1, checks=slow))
        first = wait_for(
            "the first run's first pod",
            lambda: (
                (status_of(cluster, name).get("run") or {}).get("id")
                if pods_of(cluster, name)
                else None
            ),
            timeout=60,
        )
        apply(cluster, fleet.validation(name, maxConcurrent=3, checks=slow))
        status = completed_run(cluster, name, timeout=180)
        leftover_reports = reports_of(cluster, name, first)
        leftover_pods = [
            p for p in pods_of(cluster, name) if p["metadata"]["labels"]["gpuval.dev/run"] == first
        ]
        delete_validation(cluster, name)
    assert status["run"]["id"] != first and status["run"]["trigger"] == "spec-changed"
    assert status["run"]["generation"] == 2 and status["nodes"]["passed"] == 3
    assert leftover_reports == [] and leftover_pods == []
