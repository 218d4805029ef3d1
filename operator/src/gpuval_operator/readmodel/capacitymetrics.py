"""Healthy capacity's series (docs/operator/capacity.md), built at scrape time from each
validation's `CapacitySummary`: its selected GPUs and nodes by state (every state, 0 when none,
so a count that falls to 0 reads 0) and the healthy GPUs' share."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric

from gpuval_api.capacity import CapacityState
from gpuval_operator.capacity import CapacitySummary

_STATES = ", ".join(str(s) for s in CapacityState)


class CapacityFamilies:
    def __init__(self) -> None:
        v = "validation"
        self.gpus = GaugeMetricFamily(
            "gpuval_validation_gpus",
            f"The selected nodes' GPUs by healthy-capacity state ({_STATES}).",
            labels=[v, "state"],
        )
        self.nodes = GaugeMetricFamily(
            "gpuval_validation_capacity_nodes",
            "The selected nodes (those with GPUs) by healthy-capacity state (withheld is a GPU "
            "state only).",
            labels=[v, "state"],
        )
        self.ratio = GaugeMetricFamily(
            "gpuval_validation_healthy_capacity_ratio",
            "Healthy GPUs over the selected GPUs (1 when none is selected).",
            labels=[v],
        )

    def add(self, name: str, summary: CapacitySummary | None) -> None:
        if summary is None:
            return
        for state, count in summary.gpus.items():
            self.gpus.add_metric([name, str(state)], float(count))
        for state, count in summary.nodes.items():
            self.nodes.add_metric([name, str(state)], float(count))
        self.ratio.add_metric([name], summary.healthy_ratio)

    def all(self) -> Iterator[Metric]:
        yield from (self.gpus, self.nodes, self.ratio)
