"""spec.maxProofAgeSeconds' series (docs/operator/proof-age.md), built at scrape time from each
validation's `ProofSummary`: the fraction of its selected GPUs and nodes proven within the age,
its stale nodes, the age itself and the oldest proof's age (what the chart's GpuvalProofTooOld
alert compares)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric

from gpuval_operator.proofage import ProofSummary


class ProofFamilies:
    def __init__(self) -> None:
        v = "validation"
        self.gpus = GaugeMetricFamily(
            "gpuval_validation_gpus_proven_within_age_ratio",
            "Fraction of the selected nodes' GPUs whose node was proven within "
            "spec.maxProofAgeSeconds (1 when none is selected).",
            labels=[v],
        )
        self.nodes = GaugeMetricFamily(
            "gpuval_validation_nodes_proven_within_age_ratio",
            "Fraction of the selected nodes proven within spec.maxProofAgeSeconds.",
            labels=[v],
        )
        self.stale = GaugeMetricFamily(
            "gpuval_validation_proof_stale_nodes",
            "Selected nodes whose proof is older than spec.maxProofAgeSeconds, absent or void.",
            labels=[v],
        )
        self.max_age = GaugeMetricFamily(
            "gpuval_validation_proof_max_age_seconds", "spec.maxProofAgeSeconds.", labels=[v]
        )
        self.oldest = GaugeMetricFamily(
            "gpuval_validation_proof_oldest_age_seconds",
            "Age of the oldest proof among the selected nodes (absent when none has one).",
            labels=[v],
        )

    def add(self, name: str, summary: ProofSummary | None, now: float) -> None:
        if summary is None:
            return
        self.gpus.add_metric([name], summary.within_gpus / summary.gpus if summary.gpus else 1.0)
        self.nodes.add_metric(
            [name], summary.within_nodes / summary.nodes if summary.nodes else 1.0
        )
        self.stale.add_metric([name], float(summary.stale))
        self.max_age.add_metric([name], summary.max_age)
        if summary.oldest is not None:
            self.oldest.add_metric([name], max(0.0, now - summary.oldest))

    def all(self) -> Iterator[Metric]:
        yield from (self.gpus, self.nodes, self.stale, self.max_age, self.oldest)
