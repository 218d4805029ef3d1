"""The burn alert end to end with a real Prometheus (Debian's) on loopback: it scrapes the real
operator's /metrics (the operator running with the chart's ServiceAccount and configuration) while a
simulated node fails its burn, evaluates the chart's rules, and the alert reaches `firing` in
Prometheus' HTTP API. In the same setting every Grafana dashboard query is run against what
Prometheus scraped from the operator, and must return series (a validation with spec.baseline
learns its pool's baseline, then runs again against it, for the baseline panels'); the repairs
row's, which only a repair loop makes, test_operator_remediation runs the same way.

Scrape and evaluation intervals are one second; every wait is bounded.
"""

from __future__ import annotations

import contextlib
import functools
import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuval_devtools.controlplane import Cluster
from tests.integration.chart.test_grafana_alert import burn_expr, rendered
from tests.support import chart
from tests.support.kube import get_json, wait_for
from tests.support.prometheus import (
    PROOF_ROW,
    REPAIR_ROW,
    dashboard_queries,
    firing,
    prometheus,
)

MISCOMPARE = [{"kind": "miscompare", "gpu": 3}]
# Hardware-state findings the healthy pool's validation only warns about: the node passes, and the
# dashboard's state row has series to show (a counter that grew, a port down). It trains too, so the
# training step's panels have series.
STATE_WARNINGS = [{"kind": "nvlink-errors-grow", "gpu": 3, "link": 3}, {"kind": "ib-port-down"}]
WARN_ONLY = {
    "burn": {"durationSeconds": 2},
    "state": {"actions": {"ErrorCountersGrew": "Warn", "IbPortDown": "Warn"}},
    "train": {"enabled": True, "steps": 4, "warmupSteps": 1},
}
SLOW_FABRIC = [{"kind": "fabric-slow-node", "factor": 0.5}]
# The fabric of a pool of four (the simulated backend computes its figures: sizes cost nothing).
FABRIC = {
    "groupSize": 4,
    "minBytes": 1 << 28,
    "maxBytes": 1 << 30,
    "pairBytes": 1 << 30,
    "iterations": 2,
    "timeouts": {"gangSeconds": 30, "initSeconds": 20, "phaseSeconds": 20},
}
# The simulated nodes' GPU stack names the baseline a validation learns (cluster-scoped).
LEARNED = "nvidia-h200-x8-700w-gen5x16"
METRIC_NAME = re.compile(r"\bgpuval_[a-z0-9_]+\b")


@pytest.fixture
def release(cluster: Cluster, install_crds: list[str]) -> Iterator[chart.Release]:
    with chart.installed(cluster, "alerts") as installed:
        yield installed


def _completed(cluster: Cluster, name: str) -> bool:
    status = (get_json(cluster, "gpuvalidation", name) or {}).get("status") or {}
    return bool((status.get("run") or {}).get("completedAt"))


def _gone(cluster: Cluster, name: str) -> bool:
    return get_json(cluster, "gpuvalidation", name) is None


def holding_gpus(node: str, name: str) -> dict[str, Any]:
    """A workload that holds every GPU of `node` (its agent pod cannot schedule)."""
    limits = {"nvidia.com/gpu": "8"}
    container = {"name": "train", "image": "example.com/train:1", "resources": {"limits": limits}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeName": node, "containers": [container]},
    }


def second_run(cluster: Cluster, name: str) -> None:
    """Once the validation's first run learned its baseline, a second run (a spec change)."""

    def status() -> dict[str, Any]:
        found: dict[str, Any] = (get_json(cluster, "gpuvalidation", name) or {}).get("status") or {}
        return found

    wait_for(f"{name} to learn {LEARNED}", lambda: (status().get("baseline") or {}).get("learned"))
    cluster.kubectl(
        "patch", "gpuvalidation", name, "--type", "merge", "-p", '{"spec":{"history":2}}'
    )
    wait_for(
        f"{name}'s second run to complete",
        lambda: (status().get("run") or {}).get("number") == 2 and _completed(cluster, name),
        timeout=180,
        interval=1,
    )


def test_burn_alert_fires_in_prometheus_and_every_dashboard_query_finds_operator_series(
    cluster: Cluster,
    release: chart.Release,
    kopf_runner: Callable[..., contextlib.AbstractContextManager[Any]],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    tag = uuid.uuid4().hex[:6]
    burn_pool, healthy_pool, busy_pool = f"burn-{tag}", f"healthy-{tag}", f"busy-{tag}"
    fabric_pool = f"fabric-{tag}"
    baseline_pool = f"baseline-{tag}"
    judged = [f"{baseline_pool}-{i}" for i in range(2)]
    good, bad, healthy = f"{burn_pool}-good", f"{burn_pool}-bad", f"{healthy_pool}-0"
    busy = f"{busy_pool}-0"
    slow = f"{fabric_pool}-2"
    linked = [f"{fabric_pool}-{i}" for i in range(4)]
    cluster.add_nodes(
        [
            chart.pool_node(good, burn_pool),
            chart.pool_node(bad, burn_pool, MISCOMPARE),
            chart.pool_node(healthy, healthy_pool, STATE_WARNINGS),
            chart.pool_node(busy, busy_pool),
            *(chart.pool_node(n, fabric_pool, SLOW_FABRIC if n == slow else ()) for n in linked),
            *(chart.pool_node(n, baseline_pool) for n in judged),
        ]
    )
    # Four validations: one with a node failing its burn, one that passes whole with state
    # warnings (so the last-success series the stale alert and a dashboard panel read exists
    # too, and the state row's findings), one whose
    # node's GPUs a workload holds (NotRun: the untested panels' series, and no failure alert),
    # and one testing the fabric of four nodes, one of them slow (the fabric panels and alert).
    validations = {
        f"alerts-{burn_pool}": chart.validation(f"alerts-{burn_pool}", burn_pool),
        f"alerts-{healthy_pool}": chart.validation(
            f"alerts-{healthy_pool}", healthy_pool, checks=WARN_ONLY
        ),
        f"alerts-{busy_pool}": chart.validation(
            f"alerts-{busy_pool}", busy_pool, nodeTimeoutSeconds=10, retry={"attempts": 1}
        ),
        f"alerts-{fabric_pool}": chart.validation(
            f"alerts-{fabric_pool}", fabric_pool, fabric=FABRIC
        ),
        # Learns its pool's baseline in its first run; its second is judged against it and
        # carries each node's history (the baseline panels' series).
        f"alerts-{baseline_pool}": chart.validation(
            f"alerts-{baseline_pool}", baseline_pool, baseline={"minNodes": 2}
        ),
    }
    cluster.kubectl("delete", "gpubaseline", LEARNED, "--ignore-not-found")
    cluster.apply([holding_gpus(busy, f"training-{tag}")])
    port = chart.operator_as_chart_serviceaccount(cluster, release, tmp_path, monkeypatch)
    # The dashboard's per-GPU panels read the series the chart's operator.metricsPerGpu adds.
    monkeypatch.setenv("GPUVAL_METRICS_PER_GPU", "true")
    try:
        with (
            chart.podrunner(cluster, release.agent_namespace, tmp_path),
            kopf_runner() as runner,
            prometheus(port, tmp_path) as server,
        ):
            cluster.apply(list(validations.values()))
            for name in validations:
                wait_for(
                    f"GpuValidation {name} to complete its run",
                    functools.partial(_completed, cluster, name),
                    timeout=180,
                    interval=1,
                )
            second_run(cluster, f"alerts-{baseline_pool}")
            burn = wait_for(
                f"GpuvalNodeFailedBurn for {bad} to reach firing in Prometheus",
                lambda: firing(server, "GpuvalNodeFailedBurn", bad),
                timeout=60,
                interval=1,
            )
            failed = wait_for(
                f"GpuvalNodeFailed for {bad} to reach firing in Prometheus",
                lambda: firing(server, "GpuvalNodeFailed", bad),
                timeout=60,
                interval=1,
            )
            fabric = wait_for(
                f"GpuvalNodeFabricFailed for {slow} to reach firing in Prometheus",
                lambda: firing(server, "GpuvalNodeFabricFailed", slow),
                timeout=60,
                interval=1,
            )
            # The rest is read once Prometheus has scraped the last series each validation makes:
            # the busy node's NotRun (its timeout) and the baseline pool's second run's ratios,
            # whichever ends last (either can: a fresh-clone run had the NotRun first).
            judged_by = f'validation="alerts-{baseline_pool}"'
            for what, expr in (
                (f"the NotRun of {busy}", f'gpuval_node_not_run_info{{node="{busy}"}}'),
                ("the baseline ratios", f"gpuval_node_baseline_ratio{{{judged_by}}}"),
                ("the history ratios", f"gpuval_node_history_ratio{{{judged_by}}}"),
            ):
                wait_for(
                    f"Prometheus to scrape {what}",
                    functools.partial(server.query, expr),
                    timeout=60,
                    interval=1,
                )
            alerts = server.alerts()
            assert server.target_health() == ["up"]
            scraped = chart.scrape(port)
            # The repair row's series come from a repair loop: test_operator_remediation.
            empty = [
                (title, expr)
                for title, expr in dashboard_queries(without={REPAIR_ROW, PROOF_ROW})
                if not server.query(expr)
            ]
            warned = server.query(f'gpuval_node_state_finding_info{{node="{healthy}"}}')
            grown = server.query(f'gpuval_node_state_counters_grown{{node="{healthy}"}}')
            ports_down = server.query(f'gpuval_node_ib_ports_down{{node="{healthy}"}}')
            # Grafana's rule: query A, then threshold B (A > 0), per series.
            grafana = server.query(f"({burn_expr(rendered()[1])}) > 0")
            for name in validations:
                cluster.kubectl("delete", "gpuvalidation", name, "--wait=false")
            for name in validations:
                wait_for(
                    f"the operator to finish {name}",
                    functools.partial(_gone, cluster, name),
                )
        assert runner.exit_code == 0, runner.output
    finally:
        for name in validations:
            cluster.kubectl("delete", "gpuvalidation", name, "--wait=false", check=False)
        cluster.kubectl("delete", "gpubaseline", LEARNED, "--ignore-not-found")
        for node in (good, bad, healthy, busy, *linked, *judged):
            cluster.kubectl("delete", "node", node, "--wait=false", check=False)
        cluster.kubectl(
            "delete", "pod", f"training-{tag}", "-n", "default", "--wait=false", check=False
        )

    burn_validation = f"alerts-{burn_pool}"
    assert burn["labels"]["validation"] == burn_validation
    assert burn["labels"]["reason"] == "BurnMismatch"
    assert burn["labels"]["severity"] == "critical"
    assert burn["annotations"]["summary"] == f"GPU node {bad} failed its burn: BurnMismatch"
    assert failed["labels"]["reason"] == "BurnMismatch"
    assert fabric["labels"]["reason"] == "FabricSlowNode"
    assert fabric["labels"]["validation"] == f"alerts-{fabric_pool}"
    # Only the failing nodes alert: the passing ones of every validation do not, nor the slow
    # node's partners in the fabric.
    alerting_nodes = {
        a["labels"].get("node") for a in alerts if a["labels"]["alertname"].startswith("GpuvalNode")
    }
    assert alerting_nodes == {bad, slow}

    assert {r["metric"]["node"] for r in grafana} == {bad}, grafana
    assert {r["metric"]["reason"] for r in grafana} == {"BurnMismatch"}

    assert not empty, f"dashboard queries with no series from the operator: {empty}"
    # The healthy pool's node passed with its state warnings, which its series carry.
    assert {(r["metric"]["reason"], r["metric"]["severity"]) for r in warned} == {
        ("ErrorCountersGrew", "Warning"),
        ("IbPortDown", "Warning"),
    }
    assert {r["metric"]["check"]: r["value"][1] for r in grown}["burn"] == "1"
    assert [r["value"][1] for r in ports_down] == ["1"]
    exported = set(re.findall(r"^(gpuval_[a-z0-9_]+)", scraped, flags=re.MULTILINE))
    queried = " ".join(expr for _title, expr in dashboard_queries(without={REPAIR_ROW, PROOF_ROW}))
    dashboard_names = set(METRIC_NAME.findall(queried))
    assert len(dashboard_names) >= 20, dashboard_names
    assert dashboard_names <= exported, sorted(dashboard_names - exported)
    rule_names = set(METRIC_NAME.findall((tmp_path / "gpuval-rules.yaml").read_text()))
    assert len(rule_names) >= 6
    # The needs-repair rule's series comes from a repair loop: test_operator_remediation; the
    # proof rule's from a validation with spec.maxProofAgeSeconds: test_operator_runs.
    repair_names = set(
        METRIC_NAME.findall(
            " ".join(e for _t, e in dashboard_queries(only={REPAIR_ROW, PROOF_ROW}))
        )
    )
    assert rule_names - repair_names <= exported, sorted(rule_names - repair_names - exported)
