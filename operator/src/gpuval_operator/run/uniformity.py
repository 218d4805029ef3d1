"""Uniformity: the nodes' environment records compared with the spec's expected values and with
each other.

A field with an expected value in the spec is compared with it; any other field with the majority
value of the nodes that report it. Every differing node is named with its value and the value it
should have had. A tie has no majority, so every node of the tied field is named: guessing which
half is right would hide the problem.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from gpuval_api.crd import OUTLIER_VALUE_LENGTH, ExpectedEnvironment
from gpuval_operator.run.facts import UNIFORMITY_FIELDS


@dataclass(frozen=True, slots=True)
class Outlier:
    field: str
    node: str
    value: str
    expected: str
    source: str  # "spec" or "majority"

    def as_status(self) -> dict[str, str]:
        # Values from agents are capped when read (run.facts.environment_fingerprint); an expected
        # value from the spec is bounded by the CRD; a tie's description is cut here.
        return {
            "field": self.field,
            "node": self.node,
            "value": self.value[:OUTLIER_VALUE_LENGTH],
            "expected": self.expected[:OUTLIER_VALUE_LENGTH],
            "source": self.source,
        }


def expected_values(expected: ExpectedEnvironment | None) -> dict[str, str]:
    """The spec's expected values keyed like the environment fingerprint."""
    if expected is None:
        return {}
    pairs = {
        "driverVersion": expected.driver_version,
        "cudaDriverVersion": expected.cuda_driver_version,
        "ncclVersion": expected.nccl_version,
        "gpuProduct": expected.gpu_product,
        "gpuCount": None if expected.gpu_count is None else str(expected.gpu_count),
    }
    return {k: v for k, v in pairs.items() if v is not None}


def find_outliers(
    environments: Mapping[str, Mapping[str, str]], expected: Mapping[str, str]
) -> list[Outlier]:
    """Outliers in field order, then node order."""
    outliers: list[Outlier] = []
    for field in UNIFORMITY_FIELDS:
        values = {node: env[field] for node, env in environments.items() if field in env}
        if not values:
            continue
        if field in expected:
            want = expected[field]
            outliers.extend(
                Outlier(field, node, value, want, "spec")
                for node, value in sorted(values.items())
                if value != want
            )
            continue
        counts = Counter(values.values()).most_common()
        if len(counts) == 1:
            continue
        top, top_count = counts[0]
        if counts[1][1] == top_count:
            tied = ", ".join(f"{v} on {n} nodes" for v, n in counts if n == top_count)
            outliers.extend(
                Outlier(field, node, value, f"no majority ({tied})", "majority")
                for node, value in sorted(values.items())
            )
            continue
        outliers.extend(
            Outlier(field, node, value, top, "majority")
            for node, value in sorted(values.items())
            if value != top
        )
    return outliers


def run_outliers(
    environments: Mapping[str, Mapping[str, str]],
    expected: ExpectedEnvironment | None,
    fingerprints: list[Outlier],
) -> list[Outlier] | None:
    """A completed run's outliers: environments against spec.expected (or the majority), then
    the burn fingerprints' minority; None when no node of the run recorded an environment."""
    if not environments:
        return None
    return find_outliers(environments, expected_values(expected)) + fingerprints
