"""Roll-up of node verdicts into conditions and a bounded status; uniformity outliers."""

from __future__ import annotations

import json
from typing import Any

from gpuval_api.checks import parse_checks
from gpuval_api.crd import GpuValidationStatus
from gpuval_api.result import Verdict
from gpuval_operator import names
from gpuval_operator.planning import Candidate
from gpuval_operator.podfacts import DeviceHealthFact
from gpuval_operator.run import rollup
from gpuval_operator.run.state import Phase, RunState
from gpuval_operator.run.uniformity import Outlier, find_outliers


def run_with(passed: int, failed: int, running: int = 0) -> RunState:
    run = RunState(
        validation="v",
        run_id="1-aaaa",
        number=1,
        generation=3,
        trigger="created",
        started_at=1000.0,
    )
    for i in range(passed + failed + running):
        node = f"node-{i:05d}"
        run.add(
            node, 8, names.report_name("v", "1-aaaa", node), names.pod_name("v", "1-aaaa", node)
        )
        if i < passed:
            run.finish_node(node, Verdict.PASSED, None, "")
        elif i < passed + failed:
            run.finish_node(node, Verdict.FAILED, "BurnMismatch", "gpu 3 computed wrong results")
    return run


def conditions(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status["conditions"]}


def test_a_run_in_progress_is_unknown_but_a_failure_shows_at_once() -> None:
    run = run_with(passed=2, failed=1, running=3)
    status = rollup.build_run_status(run, previous_conditions=[], now=2000.0)
    c = conditions(status)
    assert c["Succeeded"]["status"] == "Unknown" and c["Succeeded"]["reason"] == "Running"
    assert c["NodesHealthy"]["status"] == "False" and "node-00002" in c["NodesHealthy"]["message"]
    assert c["Uniform"]["status"] == "Unknown"
    assert c["Invalid"]["status"] == "False"
    assert all(x["observedGeneration"] == 3 for x in c.values())
    assert status["phase"] == "Running" and "lastCompletedRun" not in status


def test_a_completed_run_with_all_passed_succeeds() -> None:
    run = run_with(passed=3, failed=0)
    run.completed_at = 3000.0
    run.outliers = []
    status = rollup.build_run_status(run, previous_conditions=[], now=3000.0)
    c = conditions(status)
    assert (c["Succeeded"]["status"], c["NodesHealthy"]["status"], c["Uniform"]["status"]) == (
        "True",
        "True",
        "True",
    )
    assert (
        status["phase"] == "Succeeded"
        and status["lastCompletedRun"]["completedAt"] == "1970-01-01T00:50:00Z"
    )


def test_the_status_says_how_far_node_actions_got_once_every_verdict_is_in() -> None:
    run = run_with(passed=9, failed=1)
    run.acting = (5, 10)
    c = conditions(rollup.build_run_status(run, previous_conditions=[], now=2000.0))
    assert (c["Succeeded"]["status"], c["Succeeded"]["reason"]) == (
        "Unknown",
        "ApplyingNodeActions",
    )
    assert c["Succeeded"]["message"] == (
        "10 of 10 nodes have a verdict; node actions applied on 5 of 10"
    )
    # Verdicts still to come: the run is running, and the message still says the progress.
    run = run_with(passed=2, failed=1, running=3)
    run.acting = (0, 3)
    c = conditions(rollup.build_run_status(run, previous_conditions=[], now=2000.0))
    assert c["Succeeded"]["reason"] == "Running"
    assert c["Succeeded"]["message"].endswith("node actions applied on 0 of 3")
    run.acting = None
    c = conditions(rollup.build_run_status(run, previous_conditions=[], now=2000.0))
    assert c["Succeeded"]["message"] == "3 of 6 nodes have a verdict"


def test_transition_time_is_kept_while_a_condition_holds() -> None:
    run = run_with(passed=1, failed=1, running=1)
    first = rollup.build_run_status(run, previous_conditions=[], now=2000.0)
    later = rollup.build_run_status(run, previous_conditions=first["conditions"], now=2500.0)
    assert conditions(later)["NodesHealthy"]["lastTransitionTime"] == "1970-01-01T00:33:20Z"
    run.nodes["node-00002"].phase = run.nodes["node-00000"].phase
    run.completed_at = 2600.0
    run.outliers = []
    final = rollup.build_run_status(run, previous_conditions=later["conditions"], now=2600.0)
    assert conditions(final)["Succeeded"]["lastTransitionTime"] == "1970-01-01T00:43:20Z"


def test_status_stays_bounded_at_ten_thousand_nodes() -> None:
    run = run_with(passed=5000, failed=5000)
    run.completed_at = 5000.0
    outliers = [
        Outlier("driverVersion", f"node-{i:05d}", "550", "580", "majority") for i in range(3000)
    ]
    run.outliers = outliers
    status = rollup.build_run_status(run, previous_conditions=[], now=5000.0)
    assert (
        len(status["failingNodes"]) == rollup.MAX_LISTED and status["failingNodesOmitted"] == 4950
    )
    assert len(status["outliers"]) == rollup.MAX_LISTED and status["outliersOmitted"] == 2950
    assert len(json.dumps(status)) < 32 * 1024


def test_invalid_status_names_every_error_and_schedules_nothing() -> None:
    status = rollup.build_invalid_status(
        ["spec.schedule='x': not a cron expression"], generation=2, previous_conditions=[], now=0.0
    )
    c = conditions(status)
    assert c["Invalid"]["status"] == "True" and "spec.schedule='x'" in c["Invalid"]["message"]
    assert c["Succeeded"]["status"] == "False" and status["phase"] == "Invalid"


def test_the_majority_value_names_each_outlier() -> None:
    envs = {
        "a": {"driverVersion": "580.159.04", "ncclVersion": "2.28.9"},
        "b": {"driverVersion": "580.159.04", "ncclVersion": "2.28.9"},
        "c": {"driverVersion": "550.54.15", "ncclVersion": "2.28.9"},
    }
    assert find_outliers(envs, {}) == [
        Outlier("driverVersion", "c", "550.54.15", "580.159.04", "majority")
    ]


def test_expected_values_win_over_the_majority() -> None:
    envs = {n: {"cudaDriverVersion": "12.4"} for n in ("a", "b", "c")}
    outliers = find_outliers(envs, {"cudaDriverVersion": "13.0"})
    assert [(o.node, o.source, o.expected) for o in outliers] == [
        ("a", "spec", "13.0"),
        ("b", "spec", "13.0"),
        ("c", "spec", "13.0"),
    ]


def test_a_tie_names_every_node_rather_than_guessing() -> None:
    envs = {"a": {"kernel": "6.8"}, "b": {"kernel": "6.1"}}
    outliers = find_outliers(envs, {})
    assert {o.node for o in outliers} == {"a", "b"}
    assert all(o.expected.startswith("no majority") for o in outliers)


def test_uniform_nodes_have_no_outliers() -> None:
    envs = {n: {"driverVersion": "580", "gpuCount": "8"} for n in ("a", "b")}
    assert find_outliers(envs, {"gpuCount": "8"}) == []


def test_a_run_that_selected_no_node_does_not_succeed() -> None:
    run = run_with(passed=0, failed=0)
    run.completed_at = 2000.0
    status = rollup.build_run_status(run, previous_conditions=[], now=2000.0)
    c = conditions(status)
    assert (c["Succeeded"]["status"], c["Succeeded"]["reason"]) == ("False", "NoNodesSelected")
    assert "spec.nodeSelector" in c["Succeeded"]["message"]
    assert status["phase"] == "Failed"


def test_a_gating_validation_with_no_node_yet_waits_for_nodes_and_announces_nothing() -> None:
    run = run_with(0, 0)
    run.gating, run.completed_at = True, 1001.0
    status = rollup.build_run_status(run, previous_conditions=[], now=1001.0)
    assert status["phase"] == "Pending"
    found = conditions(status)
    assert found["Succeeded"]["status"] == "Unknown"
    assert found["Succeeded"]["reason"] == "WaitingForNodes"
    assert "spec.gating validates each node that joins" in found["Succeeded"]["message"]
    assert not rollup.announce_completion(run, budget=50)
    run.gating = False  # without gating an empty selection is the spec's fault, as before
    assert rollup.build_run_status(run, previous_conditions=[], now=1001.0)["phase"] == "Failed"


def test_run_completed_is_announced_at_each_end_of_a_run_within_the_budget() -> None:
    """Issue 34 part 5: a run reopened by arrivals ended 50 of 50 without a word, its only
    RunCompleted saying 25 of 25. Each end is announced, saying when, at most the budget's."""
    run = run_with(2, 0)
    run.completed_at = 1001.0
    assert rollup.announce_completion(run, budget=2)
    first = rollup.run_summary(run, None)
    assert (
        first
        == "run 1-aaaa completed at 1970-01-01T00:16:41Z: 2 passed, 0 failed, 0 not tested of 2"
    )
    run.announced, run.announcements = True, 1
    assert not rollup.announce_completion(run, budget=2), "once per end"
    run.reopen()
    run.add_candidates([Candidate("node-new", 8)])
    run.nodes["node-new"].phase = Phase.PASSED
    run.completed_at = 1062.0
    assert rollup.announce_completion(run, budget=2), "a reopened run's end is announced"
    assert rollup.run_summary(run, None) == (
        "run 1-aaaa completed again at 1970-01-01T00:17:42Z: 3 passed, 0 failed, 0 not tested of 3"
    )
    run.announced, run.announcements = True, 2
    run.reopen()
    run.completed_at = 1100.0
    assert not rollup.announce_completion(run, budget=2), "the budget holds"
    status = rollup.build_run_status(run, previous_conditions=[], now=1100.0)
    again = rollup.read_run("v", status, fabric=False)
    assert again is not None and again.announced, "a restarted operator does not announce it again"
    assert again.announcements == 1


def test_a_completed_run_without_any_environment_says_nothing_was_compared_not_later() -> None:
    run = run_with(passed=0, failed=2)
    run.completed_at, run.outliers = 3000.0, None  # no node recorded an environment
    uniform = conditions(rollup.build_run_status(run, previous_conditions=[], now=3000.0))[
        "Uniform"
    ]
    assert (uniform["status"], uniform["reason"]) == ("Unknown", "NoEnvironment")
    assert "when the run completes" not in uniform["message"]
    assert uniform["message"].startswith(
        "not compared: none of the run's 2 nodes recorded an environment (0 passed, 2 failed, "
        "0 not tested)"
    )
    running = run_with(passed=0, failed=1, running=1)
    running.outliers = None
    still = conditions(rollup.build_run_status(running, previous_conditions=[], now=2000.0))
    assert (still["Uniform"]["reason"], still["Uniform"]["message"]) == (
        "NotCompared",
        "compared when the run completes",
    )


def test_selected_dra_nodes_without_devices_are_named_and_read_back_after_a_restart() -> None:
    run = run_with(passed=4, failed=0)
    run.without_devices = ("node-bare",)

    status = rollup.build_run_status(run, previous_conditions=[], now=2000.0)

    published = conditions(status)["DevicesPublished"]
    assert (published["status"], published["reason"]) == ("False", "NodesWithoutDevices")
    assert "1 of 5 selected nodes" in published["message"] and "node-bare" in published["message"]
    assert status["nodesWithoutDevices"] == ["node-bare"]
    again = rollup.read_run("v", status, fabric=False)
    assert again is not None and again.without_devices == ("node-bare",)
    # Every selected node publishes: True; without DRA no such condition at all.
    run.without_devices = ()
    status = rollup.build_run_status(run, previous_conditions=[], now=2000.0)
    assert conditions(status)["DevicesPublished"]["status"] == "True"
    run.without_devices = None
    status = rollup.build_run_status(run, previous_conditions=[], now=2000.0)
    assert "DevicesPublished" not in conditions(status) and status["nodesWithoutDevices"] == []


def test_the_kubelets_unhealthy_devices_are_listed_in_the_status_by_node() -> None:
    run = run_with(passed=2, failed=0, running=1)
    running = run.nodes["node-00002"]
    running.device_health = (
        DeviceHealthFact("claim:devices", "gpu.nvidia.com/node-00002/gpu-0", "Healthy"),
        DeviceHealthFact("claim:devices", "gpu.nvidia.com/node-00002/gpu-3", "Unhealthy", "XID 79"),
    )

    status = rollup.build_run_status(run, previous_conditions=[], now=2000.0)

    assert status["unhealthyDevices"] == [
        {
            "node": "node-00002",
            "resourceId": "gpu.nvidia.com/node-00002/gpu-3",
            "health": "Unhealthy",
            "message": "XID 79",
        }
    ]
    assert status["unhealthyDevicesOmitted"] == 0
    GpuValidationStatus.model_validate(status)  # the CRD's schema takes it


def test_an_enabled_false_beside_the_full_profile_is_said_in_a_condition() -> None:
    run = run_with(passed=1, failed=0)
    run.note_checks(parse_checks('{"profile": "full", "train": {"enabled": false}}'))
    c = conditions(rollup.build_run_status(run, previous_conditions=[], now=2000.0))
    said = c["ProfileOverridden"]
    assert (said["status"], said["reason"]) == ("True", "EnabledFalseWins")
    assert "spec.checks.train.enabled false keeps train off" in said["message"]
    assert "spec.checks.profile full adds memory and train" in said["message"]

    for document in ('{"profile": "full"}', "{}", '{"train": {"enabled": false}}'):
        run.note_checks(parse_checks(document))
        c = conditions(rollup.build_run_status(run, previous_conditions=[], now=2000.0))
        assert (c["ProfileOverridden"]["status"], c["ProfileOverridden"]["reason"]) == (
            "False",
            "ProfileApplied",
        ), document
