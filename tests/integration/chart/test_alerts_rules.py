"""Every alert of the chart's PrometheusRule, unit-tested with `promtool test rules` (Debian's
promtool): the rules are the ones helm renders from charts/gpuval, so a templating slip (an escaped
`{{ $labels.node }}`, a threshold value) fails here. Each alert has cases where it must fire, with
its labels and annotations, and cases where it must not (a passing node, before its `for`)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import chart
from tests.support.promtool import run_rule_tests

ALERTS = (
    "GpuvalNodeFailedBurn",
    "GpuvalNodeFailed",
    "GpuvalNodeFabricFailed",
    "GpuvalNodeActionsHeld",
    "GpuvalNodeNeedsRepair",
    "GpuvalFleetNotUniform",
    "GpuvalValidationStale",
    "GpuvalAgentPodsUnschedulable",
    "GpuvalNodeUntested",
    "GpuvalProofTooOld",
)


@pytest.fixture(scope="module")
def rules_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The chart's alert rules as a Prometheus rule file (the PrometheusRule's spec)."""
    objs = chart.render(values={"prometheusRule.enabled": True})
    rule = chart.find(objs, "PrometheusRule")
    path = tmp_path_factory.mktemp("rules") / "gpuval-rules.yaml"
    path.write_text(yaml.safe_dump(rule["spec"]))
    return path


def _failed_burn() -> list[dict[str, Any]]:
    return [
        {
            "interval": "1m",
            "input_series": [
                {
                    "series": 'gpuval_node_check_failure_info{validation="fleet",node="gpu-3",'
                    'check="burn",reason="BurnMismatch"}',
                    "values": "1x10",
                },
                # gpu-3's first failure was a health check: the burn alert must still fire.
                {
                    "series": 'gpuval_node_failure_info{validation="fleet",node="gpu-3",'
                    'reason="EccUncorrectable"}',
                    "values": "1x10",
                },
                {
                    "series": 'gpuval_node_check_failure_info{validation="fleet",node="gpu-3",'
                    'check="health",reason="EccUncorrectable"}',
                    "values": "1x10",
                },
                # gpu-5 failed only its health check: no burn alert.
                {
                    "series": 'gpuval_node_failure_info{validation="fleet",node="gpu-5",'
                    'reason="EccUncorrectable"}',
                    "values": "1x10",
                },
                {
                    "series": 'gpuval_node_check_failure_info{validation="fleet",node="gpu-5",'
                    'check="health",reason="EccUncorrectable"}',
                    "values": "1x10",
                },
                {"series": 'gpuval_node_passed{validation="fleet",node="gpu-3"}', "values": "0x10"},
                {"series": 'gpuval_node_passed{validation="fleet",node="gpu-5"}', "values": "0x10"},
            ],
            "alert_rule_test": [
                {
                    # for: 0m: a failed burn alerts at the first evaluation.
                    "eval_time": "0m",
                    "alertname": "GpuvalNodeFailedBurn",
                    "exp_alerts": [
                        {
                            "exp_labels": {
                                "severity": "critical",
                                "validation": "fleet",
                                "node": "gpu-3",
                                "reason": "BurnMismatch",
                            },
                            "exp_annotations": {
                                "summary": "GPU node gpu-3 failed its burn: BurnMismatch",
                                "description": (
                                    "GpuValidation fleet found node gpu-3 failing its burn with "
                                    "BurnMismatch. A GPU that computes wrong results, overheats "
                                    "or is power-capped under load should not take work: see "
                                    "kubectl get gpunodereports -l gpuval.dev/validation=fleet"
                                ),
                            },
                        }
                    ],
                },
            ],
        },
        {
            "interval": "1m",
            "input_series": [
                # Every burn reason alerts; a passing node has no failure series at all.
                *[
                    {
                        "series": f'gpuval_node_check_failure_info{{validation="v",'
                        f'node="n-{reason}",check="burn",reason="{reason}"}}',
                        "values": "1x3",
                    }
                    for reason in (
                        "BurnNaN",
                        "LowThroughput",
                        "OverTemperature",
                        "ThermalSlowdown",
                        "PowerCapped",
                    )
                ],
                {"series": 'gpuval_node_passed{validation="v",node="ok"}', "values": "1x3"},
            ],
            "alert_rule_test": [
                {
                    "eval_time": "1m",
                    "alertname": "GpuvalNodeFailedBurn",
                    "exp_alerts": [
                        {
                            "exp_labels": {
                                "severity": "critical",
                                "validation": "v",
                                "node": f"n-{reason}",
                                "reason": reason,
                            },
                            "exp_annotations": {
                                "summary": f"GPU node n-{reason} failed its burn: {reason}",
                                "description": (
                                    f"GpuValidation v found node n-{reason} failing its burn with "
                                    f"{reason}. A GPU that computes wrong results, overheats or "
                                    "is power-capped under load should not take work: see "
                                    "kubectl get gpunodereports -l gpuval.dev/validation=v"
                                ),
                            },
                        }
                        for reason in (
                            "BurnNaN",
                            "LowThroughput",
                            "OverTemperature",
                            "ThermalSlowdown",
                            "PowerCapped",
                        )
                    ],
                },
            ],
        },
    ]


def _node_failed() -> list[dict[str, Any]]:
    def alert(node: str, reason: str | None) -> dict[str, Any]:
        labels = {"severity": "warning", "validation": "fleet", "node": node}
        if reason:
            labels["reason"] = reason
        return {
            "exp_labels": labels,
            "exp_annotations": {
                "summary": f"GPU node {node} failed validation fleet",
                "description": (
                    f"Node {node} failed a check of GpuValidation fleet (reason: "
                    f"{reason or 'unknown'}). Its GpuNodeReport names the failing check, the GPU "
                    "and a hint."
                ),
            },
        }

    return [
        {
            "interval": "1m",
            "input_series": [
                {"series": 'gpuval_node_passed{validation="fleet",node="gpu-1"}', "values": "1x10"},
                {"series": 'gpuval_node_passed{validation="fleet",node="gpu-2"}', "values": "0x10"},
                {
                    "series": 'gpuval_node_failure_info{validation="fleet",node="gpu-2",'
                    'reason="EccUncorrectable"}',
                    "values": "1x10",
                },
                # Failed without a failure series (e.g. an older operator): still an alert.
                {"series": 'gpuval_node_passed{validation="fleet",node="gpu-4"}', "values": "0x10"},
            ],
            "alert_rule_test": [
                {"eval_time": "4m", "alertname": "GpuvalNodeFailed", "exp_alerts": []},
                {
                    "eval_time": "6m",
                    "alertname": "GpuvalNodeFailed",
                    "exp_alerts": [alert("gpu-2", "EccUncorrectable"), alert("gpu-4", None)],
                },
            ],
        }
    ]


def _not_uniform() -> list[dict[str, Any]]:
    return [
        {
            "interval": "1m",
            "input_series": [
                {"series": 'gpuval_validation_uniform{validation="fleet"}', "values": "0x20"},
                {"series": 'gpuval_validation_uniform{validation="pool-b"}', "values": "1x20"},
            ],
            "alert_rule_test": [
                {"eval_time": "14m", "alertname": "GpuvalFleetNotUniform", "exp_alerts": []},
                {
                    "eval_time": "16m",
                    "alertname": "GpuvalFleetNotUniform",
                    "exp_alerts": [
                        {
                            "exp_labels": {"severity": "warning", "validation": "fleet"},
                            "exp_annotations": {
                                "summary": (
                                    "GPU nodes of fleet differ in driver, CUDA, NCCL or GPU"
                                ),
                                "description": (
                                    "The nodes of GpuValidation fleet do not share one driver, "
                                    "CUDA, NCCL, GPU model or firmware (mixed versions are a "
                                    "classic cause of NCCL hangs). kubectl get gpuvalidation "
                                    "fleet -o jsonpath='{.status.outliers}' names each outlier."
                                ),
                            },
                        }
                    ],
                },
            ],
        }
    ]


def _stale() -> list[dict[str, Any]]:
    def alert(validation: str, ago: str) -> dict[str, Any]:
        return {
            "exp_labels": {"severity": "warning", "validation": validation},
            "exp_annotations": {
                "summary": f"GpuValidation {validation} has no recent successful run",
                "description": (
                    f"GpuValidation {validation} last passed on every node {ago} ago (or "
                    f"never). Check its schedule and its status: kubectl describe gpuvalidation "
                    f"{validation}"
                ),
            },
        }

    hour = 3600
    return [
        {
            # promtool's clock starts at 0; samples every hour for 60 hours.
            "interval": "1h",
            "input_series": [
                # Last full pass at hour 1: stale (> 48 h) from hour 49 on.
                {
                    "series": 'gpuval_validation_last_success_timestamp_seconds{validation="old"}',
                    "values": f"{hour}x60",
                },
                {
                    "series": (
                        'gpuval_validation_last_run_start_timestamp_seconds{validation="old"}'
                    ),
                    "values": f"{hour}x60",
                },
                # Passed at hour 40: fresh all along.
                {
                    "series": (
                        'gpuval_validation_last_success_timestamp_seconds{validation="fresh"}'
                    ),
                    "values": f"{40 * hour}x60",
                },
                {
                    "series": (
                        'gpuval_validation_last_run_start_timestamp_seconds{validation="fresh"}'
                    ),
                    "values": f"{40 * hour}x60",
                },
                # Never passed; its first run started at hour 0.
                {
                    "series": (
                        'gpuval_validation_last_run_start_timestamp_seconds{validation="never"}'
                    ),
                    "values": "0x60",
                },
            ],
            "alert_rule_test": [
                {"eval_time": "48h", "alertname": "GpuvalValidationStale", "exp_alerts": []},
                {
                    "eval_time": "50h",
                    "alertname": "GpuvalValidationStale",
                    "exp_alerts": [alert("old", "2d 1h 0m 0s"), alert("never", "2d 2h 0m 0s")],
                },
            ],
        }
    ]


def _unschedulable() -> list[dict[str, Any]]:
    return [
        {
            "interval": "1m",
            "input_series": [
                {
                    "series": 'gpuval_validation_unschedulable_pods{validation="fleet"}',
                    "values": "2x40",
                },
                {
                    "series": 'gpuval_validation_unschedulable_pods{validation="idle"}',
                    "values": "0x40",
                },
            ],
            "alert_rule_test": [
                {"eval_time": "29m", "alertname": "GpuvalAgentPodsUnschedulable", "exp_alerts": []},
                {
                    "eval_time": "31m",
                    "alertname": "GpuvalAgentPodsUnschedulable",
                    "exp_alerts": [
                        {
                            "exp_labels": {"severity": "warning", "validation": "fleet"},
                            "exp_annotations": {
                                "summary": "2 gpuval agent pods of fleet cannot be scheduled",
                                "description": (
                                    "Agent pods of GpuValidation fleet wait for their nodes' "
                                    "GPUs (nvidia.com/gpu) or are kept off by taints. They never "
                                    "preempt work; if the GPUs stay busy the nodes end NotRun "
                                    "(PodUnschedulable) at the per-node timeout, untouched, and "
                                    "are tried again. kubectl -n "
                                    "gpuval-system-agents get pods -l gpuval.dev/validation=fleet"
                                ),
                            },
                        }
                    ],
                },
            ],
        }
    ]


# What the operator exports for a node it could not test: no gpuval_node_passed, no failure
# series, only the NotRun pair.
NOT_RUN_SERIES = [
    {
        "series": (
            'gpuval_node_not_run_info{validation="fleet",node="busy",reason="PodUnschedulable"}'
        ),
        "values": "1x1500",
    },
    {
        "series": 'gpuval_node_not_run_since_timestamp_seconds{validation="fleet",node="busy"}',
        "values": "0x1500",
    },
    # A node whose fabric group did not form (its own fabric pod never started): NotRun, and
    # no fabric series of a verdict either.
    {
        "series": 'gpuval_node_not_run_info{validation="fleet",node="gangless",'
        'reason="FabricGangNotFormed"}',
        "values": "1x1500",
    },
    {
        "series": 'gpuval_node_not_run_since_timestamp_seconds{validation="fleet",node="gangless"}',
        "values": "60000x1500",
    },
]


def _fabric_failed() -> list[dict[str, Any]]:
    def alert(node: str, reason: str) -> dict[str, Any]:
        return {
            "exp_labels": {
                "severity": "warning",
                "validation": "fleet",
                "node": node,
                "reason": reason,
            },
            "exp_annotations": {
                "summary": f"GPU node {node} failed the fabric test: {reason}",
                "description": (
                    f"GpuValidation fleet named node {node} in its cross-node NCCL test "
                    f"({reason}). Multi-node jobs on it run at its pace or hang. Its report's "
                    "status.fabric names the partners, the figures and the transport: kubectl "
                    "get gpunodereports -l gpuval.dev/validation=fleet"
                ),
            },
        }

    failure = 'gpuval_node_fabric_failure_info{{validation="fleet",node="{}",reason="{}"}}'
    passed = 'gpuval_node_fabric_passed{{validation="fleet",node="{}"}}'
    return [
        {
            "interval": "1m",
            "input_series": [
                {"series": passed.format("gpu-1"), "values": "1x10"},
                {"series": passed.format("gpu-2"), "values": "0x10"},
                {"series": failure.format("gpu-2", "FabricSlowNode"), "values": "1x10"},
                {"series": passed.format("gpu-3"), "values": "0x10"},
                {"series": failure.format("gpu-3", "FabricSlowLink"), "values": "1x10"},
                {"series": passed.format("gpu-4"), "values": "0x10"},
                {"series": failure.format("gpu-4", "FabricUnreachable"), "values": "1x10"},
            ],
            "alert_rule_test": [
                {
                    # for: 0m: a node the fabric named alerts at the first evaluation.
                    "eval_time": "0m",
                    "alertname": "GpuvalNodeFabricFailed",
                    "exp_alerts": [
                        alert("gpu-2", "FabricSlowNode"),
                        alert("gpu-3", "FabricSlowLink"),
                        alert("gpu-4", "FabricUnreachable"),
                    ],
                },
            ],
        }
    ]


def held_alert(validation: str, cause: str, count: int) -> dict[str, Any]:
    """GpuvalNodeActionsHeld as it fires for `count` held nodes of `validation` (also read by
    the breaker's cluster test, with the series the operator exported)."""
    return {
        "exp_labels": {"severity": "warning", "validation": validation, "cause": cause},
        "exp_annotations": {
            "summary": (
                f"GpuValidation {validation} holds the node actions of {count} failed nodes "
                f"({cause})"
            ),
            "description": (
                f"GpuValidation {validation} did not taint or cordon {count} failed nodes "
                f"({cause}: MaxNodesReached, its nodeActions.maxNodes are out of service; "
                "OperatorMaxNodesReached, gpuval's operator-wide limit is; Systemic, most tested "
                "nodes failed with one reason, so the spec or the stack is the likely cause). "
                f"Their verdicts stand. kubectl gpuval status {validation} says why; kubectl "
                f"gpuval release {validation} acts on them up to the limits."
            ),
        },
    }


def _actions_held() -> list[dict[str, Any]]:
    held = "gpuval_validation_node_actions_held"
    return [
        {
            "interval": "1m",
            "input_series": [
                {
                    "series": f'{held}{{validation="fleet",cause="MaxNodesReached"}}',
                    "values": "36x10",
                },
                {"series": f'{held}{{validation="driver",cause="Systemic"}}', "values": "40x10"},
                # Nothing held: the operator exports no series; a 0 never fires either.
                {
                    "series": f'{held}{{validation="calm",cause="MaxNodesReached"}}',
                    "values": "0x10",
                },
                # Node failures alone never fire it: only held actions do.
                {"series": 'gpuval_node_passed{validation="calm",node="n"}', "values": "0x10"},
            ],
            "alert_rule_test": [
                {
                    # for: 0m: a hold alerts at the first evaluation.
                    "eval_time": "0m",
                    "alertname": "GpuvalNodeActionsHeld",
                    "exp_alerts": [
                        held_alert("fleet", "MaxNodesReached", 36),
                        held_alert("driver", "Systemic", 40),
                    ],
                },
            ],
        }
    ]


def needs_repair_alert(validation: str, node: str, reason: str) -> dict[str, Any]:
    """GpuvalNodeNeedsRepair as it fires for `node` (also read by the repair loop's cluster
    test, with the series the operator exported)."""
    return {
        "exp_labels": {
            "severity": "warning",
            "validation": validation,
            "node": node,
            "reason": reason,
        },
        "exp_annotations": {
            "summary": f"GPU node {node} needs repair by a person ({reason})",
            "description": (
                f"Node {node} failed GpuValidation {validation} again ({reason}) after the "
                "repairs its spec.remediation allows within its window: no further repair is "
                "asked of the cluster's engine, and the node stays out of service. kubectl gpuval "
                f"status {validation} shows its repairs with their times. Once it is repaired by "
                "hand, remove its label gpuval.dev/needs-repair: gpuval validates it again under "
                "load and returns it to service when it passes."
            ),
        },
    }


def _needs_repair() -> list[dict[str, Any]]:
    series = 'gpuval_node_needs_repair{{validation="fleet",node="{}",reason="KernelXidReboot"}}'
    return [
        {
            "interval": "1m",
            "input_series": [
                {"series": series.format("gpu-7"), "values": "1x10"},
                # Repaired by hand: the series is gone (stale), the alert with it.
                {"series": series.format("gpu-8"), "values": "1 1 stale"},
                # A node in repair, or failing, is no node that needs a person.
                {
                    "series": 'gpuval_repairs_in_progress{validation="fleet",action="Reboot"}',
                    "values": "3x10",
                },
                {"series": 'gpuval_node_passed{validation="fleet",node="gpu-9"}', "values": "0x10"},
            ],
            "alert_rule_test": [
                {
                    "eval_time": "0m",
                    "alertname": "GpuvalNodeNeedsRepair",
                    "exp_alerts": [
                        needs_repair_alert("fleet", "gpu-7", "KernelXidReboot"),
                        needs_repair_alert("fleet", "gpu-8", "KernelXidReboot"),
                    ],
                },
                {
                    "eval_time": "5m",
                    "alertname": "GpuvalNodeNeedsRepair",
                    "exp_alerts": [needs_repair_alert("fleet", "gpu-7", "KernelXidReboot")],
                },
            ],
        }
    ]


def _untested() -> list[dict[str, Any]]:
    alert = {
        "exp_labels": {
            "severity": "info",
            "validation": "fleet",
            "node": "busy",
            "reason": "PodUnschedulable",
        },
        "exp_annotations": {
            "summary": "GPU node busy has gone untested by fleet",
            "description": (
                "gpuval validation fleet could not test node busy for 1d 0h 1m 0s "
                "(PodUnschedulable): no action was taken on it. Usually work holds its GPUs; "
                "see its GpuNodeReport and kubectl describe node busy."
            ),
        },
    }
    return [
        {
            "interval": "1m",
            "input_series": NOT_RUN_SERIES,
            "alert_rule_test": [
                {"eval_time": "23h", "alertname": "GpuvalNodeUntested", "exp_alerts": []},
                {"eval_time": "1441m", "alertname": "GpuvalNodeUntested", "exp_alerts": [alert]},
            ],
        }
    ]


def _not_run_never_fails() -> list[dict[str, Any]]:
    """A NotRun node for a day: none of the failure alerts fire for it."""
    quiet = (
        "GpuvalNodeFailedBurn",
        "GpuvalNodeFailed",
        "GpuvalNodeFabricFailed",
        "GpuvalNodeActionsHeld",
        "GpuvalNodeNeedsRepair",
        "GpuvalFleetNotUniform",
    )
    return [
        {
            "interval": "1m",
            "input_series": NOT_RUN_SERIES,
            "alert_rule_test": [
                {"eval_time": "1441m", "alertname": name, "exp_alerts": []} for name in quiet
            ],
        }
    ]


def _proof_too_old() -> list[dict[str, Any]]:
    """maxProofAgeSeconds 1h: "old"'s oldest proof passes it at 30m and stays past it; "kept"
    is refreshed before it gets there."""
    alert = {
        "exp_labels": {"severity": "warning", "validation": "old"},
        "exp_annotations": {
            "summary": "A GPU node's proof is older than GpuValidation old allows",
            "description": (
                "The oldest proof among the nodes of GpuValidation old is 1h 30m 0s past its "
                "spec.maxProofAgeSeconds. Its proof-expired run re-validates such nodes where "
                "their GPUs are idle; see kubectl get nodes -L gpuval.dev/proven-at and "
                "kubectl gpuval status old"
            ),
        },
    }
    return [
        {
            "interval": "1m",
            "input_series": [
                {
                    "series": 'gpuval_validation_proof_max_age_seconds{validation="old"}',
                    "values": "3600x200",
                },
                {
                    "series": 'gpuval_validation_proof_oldest_age_seconds{validation="old"}',
                    "values": "1800+60x200",
                },
                {
                    "series": 'gpuval_validation_proof_max_age_seconds{validation="kept"}',
                    "values": "3600x200",
                },
                {
                    "series": 'gpuval_validation_proof_oldest_age_seconds{validation="kept"}',
                    "values": "1800+60x50 0+60x150",
                },
            ],
            "alert_rule_test": [
                # Past the age at 30m: pending for the hour of `for`.
                {"eval_time": "80m", "alertname": "GpuvalProofTooOld", "exp_alerts": []},
                {"eval_time": "120m", "alertname": "GpuvalProofTooOld", "exp_alerts": [alert]},
            ],
        }
    ]


CASES = {
    "GpuvalNodeUntested": _untested,
    "GpuvalNodeFailedBurn": _failed_burn,
    "GpuvalNodeFailed": _node_failed,
    "GpuvalNodeFabricFailed": _fabric_failed,
    "GpuvalNodeActionsHeld": _actions_held,
    "GpuvalNodeNeedsRepair": _needs_repair,
    "GpuvalFleetNotUniform": _not_uniform,
    "GpuvalValidationStale": _stale,
    "GpuvalAgentPodsUnschedulable": _unschedulable,
    "GpuvalProofTooOld": _proof_too_old,
}


def test_every_alert_of_the_chart_has_promtool_cases(rules_file: Path) -> None:
    rules = yaml.safe_load(rules_file.read_text())
    rendered = [r["alert"] for group in rules["groups"] for r in group["rules"]]
    assert sorted(rendered) == sorted(ALERTS) == sorted(CASES)


def test_promtool_check_rules_accepts_the_charts_rules(promtool: Path, rules_file: Path) -> None:
    proc = subprocess.run(
        [str(promtool), "check", "rules", str(rules_file)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(ALERTS)} rules found" in proc.stdout


@pytest.mark.parametrize("alert", ALERTS)
def test_promtool_test_rules_passes_for(
    alert: str, promtool: Path, rules_file: Path, tmp_path: Path
) -> None:
    proc = run_rule_tests(promtool, [rules_file], CASES[alert](), tmp_path / f"{alert}.test.yaml")

    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_a_node_gpuval_could_not_test_never_fires_the_failure_alerts(
    promtool: Path, rules_file: Path, tmp_path: Path
) -> None:
    proc = run_rule_tests(promtool, [rules_file], _not_run_never_fails(), tmp_path / "nr.yaml")
    assert proc.returncode == 0, proc.stdout + proc.stderr
