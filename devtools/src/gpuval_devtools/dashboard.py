"""The one source of charts/gpuval/files/dashboard.json: gpuval's Grafana dashboard, built with
grafana-foundation-sdk's typed builders (pinned in devtools/pyproject.toml), so mypy --strict
checks every field and enum against the SDK's types.

    python -m gpuval_devtools.dashboard           rewrite charts/gpuval/files/dashboard.json
    python -m gpuval_devtools.dashboard --check   fail when that file differs from this source

Every query reads the operator's series (gpuval_operator.readmodel.metrics); the real-Prometheus
test runs each one against what Prometheus scraped from the real operator and wants series back.
Distributions are bar gauges of each node's figure as a fraction of the fleet median, slowest
first, red below 90 %: the outliers are named by the bars, whatever the fleet's size. With
spec.baseline, the same bars show each node against its GPU stack's baseline and its own history.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from grafana_foundation_sdk.builders import (
    bargauge,
    common,
    dashboard,
    histogram,
    prometheus,
    stat,
    statetimeline,
    table,
    timeseries,
)
from grafana_foundation_sdk.cog.builder import Builder
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as common_models
from grafana_foundation_sdk.models import dashboard as models
from grafana_foundation_sdk.models import prometheus as prometheus_models

from gpuval_api.baselinemodel import BaselineSettings
from gpuval_api.figures import SPELLINGS, Figure, all_figures
from gpuval_api.views import OUTLIER_RATIO

TARGET = Path(__file__).resolve().parents[3] / "charts" / "gpuval" / "files" / "dashboard.json"
UID = "gpuval-overview"
DATASOURCE = models.DataSourceRef(type_val="prometheus", uid="${datasource}")
SELECT = 'validation=~"$validation", node=~"$node"'
VALIDATION = 'validation=~"$validation"'
SLOWEST = 15


def query(expr: str, legend: str = "", *, instant: bool = False) -> prometheus.Dataquery:
    target = prometheus.Dataquery().expr(expr).datasource(DATASOURCE)
    if legend:
        target = target.legend_format(legend)
    return target.instant() if instant else target.range()


def _thresholds(*steps: tuple[float | None, str]) -> dashboard.ThresholdsConfig:
    return (
        dashboard.ThresholdsConfig()
        .mode(models.ThresholdsMode.ABSOLUTE)
        .steps([models.Threshold(value=value, color=colour) for value, colour in steps])
    )


def stat_panel(
    panel_id: int, title: str, expr: str, legend: str = "", unit: str = "none"
) -> stat.Panel:
    return (
        stat.Panel()
        .id(panel_id)
        .title(title)
        .datasource(DATASOURCE)
        .span(4)
        .height(4)
        .unit(unit)
        .with_target(query(expr, legend, instant=True))
        .color_mode(common_models.BigValueColorMode.VALUE)
        .graph_mode(common_models.BigValueGraphMode.NONE)
        .reduce_options(common.ReduceDataOptions().calcs(["lastNotNull"]))
    )


def table_panel(panel_id: int, title: str, expr: str, span: int = 12) -> table.Panel:
    """An instant query as a table: one row per series, its labels as columns."""
    return (
        table.Panel()
        .id(panel_id)
        .title(title)
        .datasource(DATASOURCE)
        .span(span)
        .height(8)
        .with_target(query(expr, instant=True).format(prometheus_models.PromQueryFormat.TABLE))
    )


def _timeseries(panel_id: int, title: str, unit: str) -> timeseries.Panel:
    return (
        timeseries.Panel()
        .id(panel_id)
        .title(title)
        .datasource(DATASOURCE)
        .span(12)
        .height(8)
        .unit(unit)
    )


def count_panel(panel_id: int, title: str, expr: str, legend: str) -> timeseries.Panel:
    """How many nodes (or counters) of each kind over time, one line per label set."""
    return _timeseries(panel_id, title, "none").min(0).with_target(query(expr, legend))


def bars_panel(
    panel_id: int, title: str, unit: str, targets: Sequence[tuple[str, str]], span: int = 12
) -> bargauge.Panel:
    """Instant values as horizontal bars from 0, one per series: (expr, legend) per query."""
    panel = (
        bargauge.Panel()
        .id(panel_id)
        .title(title)
        .datasource(DATASOURCE)
        .span(span)
        .height(8)
        .unit(unit)
        .min(0)
        .display_mode(common_models.BarGaugeDisplayMode.BASIC)
        .orientation(common_models.VizOrientation.HORIZONTAL)
    )
    for expr, legend in targets:
        panel = panel.with_target(query(expr, legend, instant=True))
    return panel


def verdict_panels() -> list[Builder[models.Panel]]:
    """Node states (any state the operator exports: passed, failed, and later notrun), uniformity,
    verdicts and reasons over time, and the failing nodes with the check and reason."""
    states = stat_panel(
        2,
        "Nodes by state",
        f"sum by (state) (gpuval_validation_nodes{{{VALIDATION}}})",
        "{{state}}",
    ).span(8)
    uniform = stat_panel(
        3, "Uniform (1 yes, 0 no)", f"min(gpuval_validation_uniform{{{VALIDATION}}})"
    ).thresholds(_thresholds((None, "red"), (1, "green")))
    outliers = stat_panel(
        4, "Uniformity outliers", f"sum(gpuval_validation_outliers{{{VALIDATION}}})"
    ).thresholds(_thresholds((None, "green"), (1, "orange")))
    stale = stat_panel(
        5,
        "Time since last fully passed run",
        "time() - max by (validation) "
        f"(gpuval_validation_last_success_timestamp_seconds{{{VALIDATION}}})",
        "{{validation}}",
        unit="s",
    )
    unschedulable = stat_panel(
        6, "Unschedulable agent pods", f"sum(gpuval_validation_unschedulable_pods{{{VALIDATION}}})"
    ).span(4)
    reasons = count_panel(
        7,
        "Failing nodes by reason",
        f"count by (reason) ({sel('gpuval_node_failure_info')})",
        "{{reason}}",
    )
    verdicts = (
        statetimeline.Panel()
        .id(8)
        .title("Node verdicts (1 passed, 0 failed)")
        .datasource(DATASOURCE)
        .span(12)
        .height(8)
        .with_target(query(f"gpuval_node_passed{{{SELECT}}}", "{{node}}"))
        .thresholds(_thresholds((None, "red"), (1, "green")))
    )
    failing = table_panel(
        9,
        "Failing nodes: check and reason",
        f"gpuval_node_check_failure_info{{{SELECT}}} == 1",
        span=24,
    )
    return [states, uniform, outliers, stale, unschedulable, reasons, verdicts, failing]


def untested_panels() -> list[Builder[models.Panel]]:
    """Nodes gpuval could not test (NotRun: GPUs busy, pod evicted, image not pulled), kept
    apart from the failures: by reason over time, and which nodes, since when."""
    by_reason = count_panel(
        51,
        "Untested nodes (NotRun) by reason",
        f"count by (reason) ({sel('gpuval_node_not_run_info')})",
        "{{reason}}",
    )
    since = table_panel(
        52,
        "Untested nodes: reason and time untested",
        f"time() - {sel('gpuval_node_not_run_since_timestamp_seconds')}",
    ).unit("s")
    return [by_reason, since]


def state_panels() -> list[Builder[models.Panel]]:
    """The hardware state the state check read on each node (issue 19): what it found by reason
    and severity, the NVLinks and InfiniBand ports down, and the error counters that grew while
    a load check ran. Per-GPU detail stays in the reports (`kubectl gpuval status NAME`)."""
    by_reason = count_panel(
        71,
        "Nodes with state findings by reason and severity",
        f"count by (reason, severity) ({sel('gpuval_node_state_finding_info')})",
        "{{reason}} ({{severity}})",
    )
    findings = table_panel(
        72,
        "State findings per node: reason, severity, how many (GPUs, links, ports)",
        f"{sel('gpuval_node_state_findings')} > 0",
    )
    down = bars_panel(
        73,
        f"Links down at rest: NVLinks and InfiniBand ports, {SLOWEST} worst nodes",
        "none",
        [
            (f"topk({SLOWEST}, {sel('gpuval_node_nvlinks_down')})", "{{node}} NVLinks"),
            (f"topk({SLOWEST}, {sel('gpuval_node_ib_ports_down')})", "{{node}} IB ports"),
        ],
    ).thresholds(_thresholds((None, "green"), (1, "red")))
    grown = count_panel(
        74,
        "Error counters that grew under load, by node and check",
        f"sum by (validation, node, check) ({sel('gpuval_node_state_counters_grown')})",
        "{{node}} {{check}}",
    )
    return [by_reason, findings, down, grown]


def fabric_panels() -> list[Builder[models.Panel]]:
    """The cross-node NCCL test (spec.fabric): each group's busbw, lowest first, and the nodes it
    named with the reason (a group that did not form is NotRun: it shows under untested)."""
    groups = bars_panel(
        61,
        "Fabric groups: all-reduce busbw, lowest first",
        "Bps",
        [
            (
                f"sort(gpuval_fabric_group_busbw_bytes_per_second{{{VALIDATION}}})",
                "{{validation}} {{group}}",
            )
        ],
    )
    named = table_panel(
        62, "Nodes the fabric named: reason", f"gpuval_node_fabric_failure_info{{{SELECT}}} == 1"
    )
    verdicts = (
        statetimeline.Panel()
        .id(63)
        .title("Node fabric verdicts (1 passed, 0 failed)")
        .datasource(DATASOURCE)
        .span(24)
        .height(8)
        .with_target(query(f"gpuval_node_fabric_passed{{{SELECT}}}", "{{node}}"))
        .thresholds(_thresholds((None, "red"), (1, "green")))
    )
    return [groups, named, verdicts]


def baseline_panels() -> list[Builder[models.Panel]]:
    """spec.baseline: each node's worst figure against its GPU stack's GpuBaseline and against
    its own kept runs, furthest below first (the bar says which figure), and the baseline ratio
    over time (a fleet-wide drop after a driver update shows as every line falling at once)."""

    def furthest_below(
        panel_id: int, title: str, metric: str, red_below: float
    ) -> Builder[models.Panel]:
        return (
            bargauge.Panel()
            .id(panel_id)
            .title(title)
            .datasource(DATASOURCE)
            .span(12)
            .height(8)
            .unit("percentunit")
            .min(0)
            .max(1.1)
            .with_target(
                query(f"bottomk({SLOWEST}, {sel(metric)})", "{{node}} {{figure}}", instant=True)
            )
            .display_mode(common_models.BarGaugeDisplayMode.BASIC)
            .orientation(common_models.VizOrientation.HORIZONTAL)
            .thresholds(_thresholds((None, "red"), (red_below, "green")))
        )

    settings = BaselineSettings()
    baseline = furthest_below(
        81,
        f"Furthest below their baseline: slowest {SLOWEST} nodes' worst figure over the "
        f"baseline's centre (red: below {1 - settings.fraction:g}, BelowBaseline)",
        "gpuval_node_baseline_ratio",
        1 - settings.fraction,
    )
    history = furthest_below(
        82,
        f"Furthest below their own history: slowest {SLOWEST} nodes' worst key figure over its "
        f"median in their kept runs (red: below {1 - settings.history.drift_fraction:g}, "
        "DriftFromHistory)",
        "gpuval_node_history_ratio",
        1 - settings.history.drift_fraction,
    )
    over_time = series_panel(
        83,
        "Worst figure over its baseline's centre, per node",
        [("gpuval_node_baseline_ratio", "{{figure}}")],
        "percentunit",
    ).span(24)
    return [baseline, history, over_time]


def repair_panels() -> list[Builder[models.Panel]]:
    """spec.remediation: the nodes in the cluster's repair engine's hands and those that need a
    person, repair requests by action and outcome, the time from failure to back in service
    (median and slowest), and which nodes need repair."""
    in_repair = stat_panel(
        91, "Nodes in repair", f"sum(gpuval_repairs_in_progress{{{VALIDATION}}}) or vector(0)"
    )
    needing = stat_panel(
        92,
        "Nodes needing repair by a person",
        f"sum(gpuval_validation_nodes_needing_repair{{{VALIDATION}}}) or vector(0)",
    ).thresholds(_thresholds((None, "green"), (1, "red")))
    requests = count_panel(
        93,
        "Repair requests ended, by action and outcome (per hour)",
        f"sum by (action, outcome) (increase(gpuval_repair_requests_total{{{VALIDATION}}}[1h]))",
        "{{action}} {{outcome}}",
    )
    buckets = f"gpuval_repair_back_in_service_seconds_bucket{{{VALIDATION}}}"
    back = (
        _timeseries(94, "Failure to back in service after a repair", "s")
        .min(0)
        .with_target(
            query(f"histogram_quantile(0.5, sum by (le) (increase({buckets}[1d])))", "median")
        )
        .with_target(
            query(f"histogram_quantile(0.99, sum by (le) (increase({buckets}[1d])))", "p99")
        )
    )
    needs = table_panel(
        95, "Nodes needing repair: reason", f"gpuval_node_needs_repair{{{SELECT}}} == 1", span=24
    )
    return [in_repair, needing, requests, back, needs]


def proof_panels() -> list[Builder[models.Panel]]:
    """spec.maxProofAgeSeconds (docs/operator/proof-age.md): the fraction of the GPUs proven
    within the age, per validation over time, and the oldest proof's age against the age allowed."""
    within = (
        _timeseries(121, "GPUs proven within spec.maxProofAgeSeconds", "percentunit")
        .min(0)
        .max(1)
        .with_target(
            query(
                f"gpuval_validation_gpus_proven_within_age_ratio{{{VALIDATION}}}",
                "{{validation}}",
            )
        )
    )
    oldest = (
        _timeseries(122, "Oldest proof's age, and the age allowed", "s")
        .min(0)
        .with_target(
            query(f"gpuval_validation_proof_oldest_age_seconds{{{VALIDATION}}}", "{{validation}}")
        )
        .with_target(
            query(
                f"gpuval_validation_proof_max_age_seconds{{{VALIDATION}}}",
                "{{validation}} allowed",
            )
        )
    )
    return [within, oldest]


def capacity_panels() -> list[Builder[models.Panel]]:
    """Healthy capacity (docs/operator/capacity.md), the figure gpuval exists to raise: the
    selected GPUs proven healthy, the healthy GPUs out of service with their failed node, those
    needing a person, and the GPUs and nodes by state over time."""
    gpus = f"gpuval_validation_gpus{{{VALIDATION}}}"

    def of_state(state: str) -> str:
        return f'sum(gpuval_validation_gpus{{{VALIDATION}, state="{state}"}}) or vector(0)'

    healthy = stat_panel(
        131,
        "GPUs proven healthy",
        f'sum(gpuval_validation_gpus{{{VALIDATION}, state="healthy"}}) / sum({gpus})',
        unit="percentunit",
    ).thresholds(_thresholds((None, "red"), (0.9, "orange"), (0.98, "green")))
    withheld = stat_panel(
        132, "Healthy GPUs withheld with their failed node", of_state("withheld")
    ).thresholds(_thresholds((None, "green"), (1, "orange")))
    person = stat_panel(133, "GPUs needing a person", of_state("needsPerson")).thresholds(
        _thresholds((None, "green"), (1, "red"))
    )
    by_state = count_panel(134, "GPUs by state", f"sum by (state) ({gpus})", "{{state}}")
    nodes = count_panel(
        135,
        "Nodes by state",
        f"sum by (state) (gpuval_validation_capacity_nodes{{{VALIDATION}}})",
        "{{state}}",
    )
    return [healthy, withheld, person, by_state, nodes]


def _ratio_to_median(metric: str) -> str:
    series = f"{metric}{{{SELECT}}}"
    return (
        f"bottomk({SLOWEST}, {series} / on (validation) group_left "
        f"quantile by (validation) (0.5, {series}))"
    )


def _above_median(metric: str) -> str:
    series = f"{metric}{{{SELECT}}}"
    return (
        f"topk({SLOWEST}, {series} - on (validation) group_left "
        f"quantile by (validation) (0.5, {series}))"
    )


def distribution_panels(
    panel_id: int, label: str, metric: str, unit: str, lower: bool = False
) -> list[Builder[models.Panel]]:
    """A figure across the fleet: the histogram of every node's value, and the slowest nodes as a
    fraction of the median, red below OUTLIER_RATIO; where lower is better, the highest nodes by
    how far above the median they are (in the figure's unit: a median of 0, a count the healthy
    nodes do not have, has no fraction)."""
    spread = (
        histogram.Panel()
        .id(panel_id)
        .title(f"{label}: distribution over nodes")
        .datasource(DATASOURCE)
        .span(10)
        .height(8)
        .unit(unit)
        .combine(True)
        .with_target(query(f"{metric}{{{SELECT}}}", "{{node}}", instant=True))
    )
    if lower:
        highest = bars_panel(
            panel_id + 1,
            f"{label}: highest {SLOWEST} nodes, above the fleet median (lower is better)",
            unit,
            [(_above_median(metric), "{{node}}")],
            span=14,
        )
        return [spread, highest]
    slowest = (
        bars_panel(
            panel_id + 1,
            f"{label}: slowest {SLOWEST} nodes, fraction of the fleet median (red: outliers)",
            "percentunit",
            [(_ratio_to_median(metric), "{{node}}")],
            span=14,
        )
        .max(1.1)
        .thresholds(_thresholds((None, "red"), (OUTLIER_RATIO, "green")))
    )
    return [spread, slowest]


def sel(metric: str) -> str:
    """`metric` restricted to the dashboard's validation and node variables."""
    return f"{metric}{{{SELECT}}}"


def series_panel(
    panel_id: int, title: str, series: Sequence[tuple[str, str]], unit: str
) -> timeseries.Panel:
    """(metric, legend suffix) pairs over time, one line per node (and GPU)."""
    panel = _timeseries(panel_id, title, unit)
    for metric, suffix in series:
        per_gpu = metric.startswith("gpuval_gpu_")
        legend = "{{validation}} {{node}}" + (" GPU {{gpu}}" if per_gpu else "")
        panel = panel.with_target(query(sel(metric), f"{legend} {suffix}".strip()))
    return panel


def _add(
    board: dashboard.Dashboard, row: str, panels: Sequence[Builder[models.Panel]], row_id: int
) -> None:
    board.with_row(dashboard.Row(row).id(row_id))
    for panel in panels:
        board.with_panel(panel)


def _grafana_unit(figure: Figure) -> str:
    return SPELLINGS[figure.unit].grafana


def distribution_row(first_id: int) -> list[Builder[models.Panel]]:
    """The distribution and the slowest nodes of each registry figure shown so (gpuval_api.figures:
    `shown.distribution`), two panels each."""
    panels: list[Builder[models.Panel]] = []
    for index, figure in enumerate(f for f in all_figures() if f.shown.distribution):
        metric = f"gpuval_node_{figure.prometheus}"
        panels += distribution_panels(
            first_id + 2 * index, figure.label, metric, _grafana_unit(figure), figure.lower
        )
    return panels


def trend_row(first_id: int) -> list[Builder[models.Panel]]:
    """One panel over time per `shown.trend` title of the registry, with each figure of that title
    as its node series, in the registry's order."""
    panels: dict[str, list[Figure]] = {}
    for figure in all_figures():
        if figure.shown.trend and figure.summary:
            panels.setdefault(figure.shown.trend, []).append(figure)
    return [
        series_panel(
            first_id + index,
            title,
            [(f"gpuval_node_{f.prometheus}", f.shown.legend) for f in members],
            _grafana_unit(members[0]),
        )
        for index, (title, members) in enumerate(panels.items())
    ]


def per_gpu_row(first_id: int) -> list[Builder[models.Panel]]:
    """One panel over time per registry figure shown per GPU (`shown.per_gpu`, a per-GPU series)."""
    chosen = [f for f in all_figures() if f.shown.per_gpu and f.per_gpu_metric]
    return [
        series_panel(
            first_id + index,
            # A rate that is already a GPU's ("Training throughput per GPU") says it once.
            figure.label if figure.label.endswith(" per GPU") else f"{figure.label} per GPU",
            [(f"gpuval_gpu_{figure.prometheus}", "")],
            _grafana_unit(figure),
        )
        for index, figure in enumerate(chosen)
    ]


def _variable(name: str, label: str, source: str) -> dashboard.QueryVariable:
    return (
        dashboard.QueryVariable(name)
        .label(label)
        .datasource(DATASOURCE)
        .query(f"label_values({source}, {name})")
        .refresh(models.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .multi(True)
        .include_all(True)
        .all_value(".*")
    )


def build() -> dashboard.Dashboard:
    board = (
        dashboard.Dashboard("gpuval: GPU node validation")
        .uid(UID)
        .description(
            "Verdicts, burn throughput, bandwidths, NCCL busbw (in the node and across "
            "nodes) and temperatures of the GPU nodes gpuval validates, with the slowest "
            "nodes named."
        )
        .tags(["gpuval", "gpu"])
        .timezone("utc")
        .editable()
        .refresh("1m")
        .time("now-7d", "now")
        .with_variable(
            dashboard.DatasourceVariable("datasource").label("Data source").type("prometheus")
        )
        .with_variable(_variable("validation", "GpuValidation", "gpuval_validation_nodes"))
        .with_variable(_variable("node", "Node", f"gpuval_node_passed{{{VALIDATION}}}"))
    )
    _add(board, "Healthy capacity (GPUs and nodes by state)", capacity_panels(), 130)
    _add(board, "Verdicts", verdict_panels(), 1)
    _add(board, "Untested nodes (NotRun: no action taken, never a failure)", untested_panels(), 50)
    _add(board, "Hardware state (the state check, before and after the load)", state_panels(), 70)
    _add(board, "Fabric: NCCL across nodes (spec.fabric)", fabric_panels(), 60)
    _add(board, "Baselines and history (spec.baseline)", baseline_panels(), 80)
    _add(board, "Repairs (spec.remediation)", repair_panels(), 90)
    _add(board, "Proof age (spec.maxProofAgeSeconds)", proof_panels(), 120)
    _add(board, "Distributions (worst GPU per node)", distribution_row(100), 10)
    _add(board, "Figures over time (worst GPU per node)", trend_row(200), 20)
    _add(board, "Per GPU (operator.metricsPerGpu)", per_gpu_row(400), 40)
    return board


def render() -> str:
    """The dashboard JSON exactly as the chart carries it."""
    return JSONEncoder(sort_keys=True, indent=2).encode(build().build()) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gpuval_devtools.dashboard", description=__doc__
    )
    parser.add_argument("--check", action="store_true", help="fail when the chart's copy is stale")
    args = parser.parse_args(argv)
    text = render()
    json.loads(text)  # the encoder's output is JSON, or this raises before anything is written
    if args.check:
        if TARGET.read_text() != text:
            print(
                f"{TARGET} is stale against gpuval_devtools.dashboard: run `make dashboard` "
                "and commit the result",
                file=sys.stderr,
            )
            return 1
        return 0
    TARGET.write_text(text)
    print(TARGET)
    return 0


if __name__ == "__main__":
    sys.exit(main())
