"""The repair loop's series (spec.remediation), built at scrape time from each validation's
`RepairFigures`: requests by action and outcome, nodes in repair, nodes needing a person (one
series each, which the chart's GpuvalNodeNeedsRepair alert fires on), and the time from failure to
back in service, and the repair requests the API server refuses."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from gpuval_operator.remediation.figures import RepairFigures


class RepairFamilies:
    def __init__(self) -> None:
        v = "validation"
        self.requests = CounterMetricFamily(
            "gpuval_repair_requests",
            "Repairs asked of the cluster's engine whose re-validation under load ended, by the "
            "action asked (ResetGpu, Reboot) and its outcome (passed: back in service; failed; "
            "withdrawn: the node passed by another path before its repair ended).",
            labels=[v, "action", "outcome"],
        )
        self.in_progress = GaugeMetricFamily(
            "gpuval_repairs_in_progress",
            "Nodes whose repair is asked or being proven again, by action.",
            labels=[v, "action"],
        )
        self.needing = GaugeMetricFamily(
            "gpuval_validation_nodes_needing_repair",
            "Nodes that failed again after spec.remediation.maxRepairs repairs (NeedsRepair).",
            labels=[v],
        )
        self.needs = GaugeMetricFamily(
            "gpuval_node_needs_repair",
            "1 for a node that needs repair by a person, with its failure's reason.",
            labels=[v, "node", "reason"],
        )
        self.back = HistogramMetricFamily(
            "gpuval_repair_back_in_service_seconds",
            "From a node's failure to its pass after a repair (back in service).",
            labels=[v],
        )
        self.refused = CounterMetricFamily(
            "gpuval_repair_requests_refused",
            "Repair objects (spec.remediation mode Template) the API server refused or did not "
            "serve, by kind (Kind.group/version); each is tried again after a growing pause.",
            labels=[v, "kind"],
        )
        self.waiting = GaugeMetricFamily(
            "gpuval_repair_requests_waiting",
            "Nodes whose repair request the API server refuses now, waiting for the next try.",
            labels=[v, "kind"],
        )
        self._any = False

    def add(self, name: str, figures: RepairFigures) -> None:
        if not (
            figures.outcomes
            or figures.in_progress
            or figures.needs_repair
            or figures.back_count
            or figures.refused
        ):
            return
        self._any = True
        for (action, outcome), count in sorted(figures.outcomes.items()):
            self.requests.add_metric([name, action, outcome], float(count))
        for action, count in sorted(figures.in_progress.items()):
            self.in_progress.add_metric([name, action], float(count))
        self.needing.add_metric([name], float(len(figures.needs_repair)))
        for node, reason in sorted(figures.needs_repair.items()):
            self.needs.add_metric([name, node, reason], 1.0)
        self.back.add_metric([name], figures.cumulative(), figures.back_sum)
        for kind, count in sorted(figures.refused.items()):
            self.refused.add_metric([name, kind], float(count))
            self.waiting.add_metric([name, kind], float(figures.refused_nodes.get(kind, 0)))

    def all(self) -> Iterator[Metric]:
        if self._any:
            yield from (self.requests, self.in_progress, self.needing, self.needs, self.back)
            yield from (self.refused, self.waiting)
