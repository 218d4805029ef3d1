"""Pure: a registry figure's values in an agent's result document (gpuval_api.figures says where
each figure sits; this is the one place that reads it there).

`values` gives every value a check measured of the figure, each with where it was measured (a
GPU, an ordered GPU pair, a burn precision, an all-reduce size): the node's summary value, a
machine page's per-GPU values and the baselines' samples are each taken from these. A GPU the
check did not test (GpuInUse) gives none, except for a figure that is the GPU's whoever loaded it.

It stands beside the figures folder, not in it: it reads the result document, which stands above
gpuval_api.figures (docs/development.md, "Naming a module").
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpuval_api.figures import (
    FabricPairs,
    Figure,
    GpuPairs,
    NodeMetric,
    PerGpu,
    PerPrecision,
    PerSize,
)
from gpuval_api.result import AgentResult, CheckResult, untested_gpus


@dataclass(frozen=True, slots=True)
class Value:
    """One measured value of a figure."""

    value: float
    gpu: int | None = None  # the GPU, or a pair's source GPU
    peer: int | None = None  # a pair's destination GPU
    precision: str | None = None  # a burn precision (None: the first configured one)
    nbytes: int | None = None  # an all-reduce's message size


def values(figure: Figure, result: AgentResult) -> list[Value]:
    """Every value of `figure` in `result` (see the module docstring)."""
    check = result.check(figure.check)
    if check is None:
        return []
    read = figure.read
    if isinstance(read, PerGpu):
        return _per_gpu(check, figure.metric, read.tested_only)
    if isinstance(read, PerPrecision):
        return _per_precision(check, read.metric)
    if isinstance(read, GpuPairs):
        untested = untested_gpus(check)
        return [
            Value(p.gbps, gpu=p.src, peer=p.dst)
            for p in check.pairs
            if p.gbps is not None and not {p.src, p.dst} & untested
        ]
    if isinstance(read, PerSize):
        if untested_gpus(check):
            return []  # a collective over a GPU another process used measured that process too
        return [Value(s.busbw_gbps, nbytes=s.bytes) for s in check.nccl_sizes]
    if isinstance(read, NodeMetric):
        found = check.metrics.get(figure.metric)
        return [] if found is None or untested_gpus(check) else [Value(found)]
    assert isinstance(read, FabricPairs)
    return []  # the fabric's pairs are in status.fabric, not in the agent's result


def _per_gpu(check: CheckResult, metric: str, tested_only: bool) -> list[Value]:
    untested = untested_gpus(check) if tested_only else set()
    return [
        Value(g.metrics[metric], gpu=g.index)
        for g in check.gpus
        if metric in g.metrics and g.index not in untested
    ]


def _per_precision(check: CheckResult, metric: str) -> list[Value]:
    untested = untested_gpus(check)
    found: list[Value] = []
    for gpu in check.gpus:
        if gpu.index in untested:
            continue
        for key, value in gpu.metrics.items():
            if key == metric:
                found.append(Value(value, gpu=gpu.index))
            elif key.startswith(f"{metric}."):
                found.append(Value(value, gpu=gpu.index, precision=key.removeprefix(f"{metric}.")))
    return found


def headline(figure: Figure, found: Iterable[Value]) -> list[Value]:
    """The values the node's summary and the pages read: the burn's first precision, the
    all-reduce's largest size, every value of any other figure."""
    found = list(found)
    if isinstance(figure.read, PerPrecision):
        return [v for v in found if v.precision is None]
    if isinstance(figure.read, PerSize):
        largest = max((v.nbytes or 0 for v in found), default=None)
        return [v for v in found if v.nbytes == largest]
    return found


def worst(figure: Figure, found: Iterable[Value]) -> float | None:
    """The node's value: the worst of its headline values (None: none measured)."""
    numbers = [v.value for v in headline(figure, found)]
    if not numbers:
        return None
    return figure.worst_of(numbers)


def node_value(figure: Figure, result: AgentResult) -> float | None:
    """The figure's value for the node (its report summary's), rounded as the summary keeps it."""
    found = worst(figure, values(figure, result))
    return None if found is None else round(found, figure.digits)


def gpu_values(figure: Figure, result: AgentResult) -> dict[int, float]:
    """The figure's worst value per GPU (a pair counts for its source GPU); {} for a figure of
    the node as a whole."""
    per_gpu: dict[int, list[float]] = {}
    for value in headline(figure, values(figure, result)):
        if value.gpu is not None:
            per_gpu.setdefault(value.gpu, []).append(value.value)
    return {gpu: figure.worst_of(vs) for gpu, vs in per_gpu.items()}
