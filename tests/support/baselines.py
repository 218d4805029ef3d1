"""Fleets for the baseline tests, measured by the real agent code with its simulated backend (a
test double of a GPU node): a slow node is a `slow-gpu` fault, a driver regression the same fault
on every GPU of every node."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpuval_api.baseline import samples
from gpuval_api.baseline.learn import NodeFigures
from gpuval_api.checks import ChecksConfig
from gpuval_api.result import AgentResult, Verdict

GPUS = 4


def measured(
    node: str,
    faults: Sequence[Mapping[str, Any]] = (),
    gpus: int = GPUS,
    config: ChecksConfig | None = None,
    **simulation: Any,
) -> AgentResult:
    """The real agent's checks on a simulated H200 node of `gpus` GPUs, no simulated waits (and
    `simulation`'s further settings, e.g. gpuSet)."""
    from tests.support.fleets import simulated_result  # noqa: PLC0415 - fleets imports this module

    return simulated_result(node, faults, config, gpus=gpus, time_scale=0, **simulation)


def slowed(factor: float, gpus: Sequence[int] = range(GPUS)) -> list[dict[str, Any]]:
    """A slow-gpu fault at `factor` on each of `gpus`."""
    return [{"kind": "slow-gpu", "gpu": gpu, "factor": factor} for gpu in gpus]


def node_figures(result: AgentResult) -> NodeFigures:
    """What learning reads of a result: its key, its verdict, its samples."""
    key, _ = samples.node_key(result.environment)
    return NodeFigures(
        result.node or "node",
        key,
        result.verdict is Verdict.PASSED,
        tuple(samples.result_samples(result)),
    )
