"""Fleets for the baseline tests, measured by the real agent code with its simulated backend (a
test double of a GPU node): a slow node is a `slow-gpu` fault, a driver regression the same fault
on every GPU of every node."""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from typing import Any

from gpuval_agent.backends.simulated import SimulatedBackend, SimulationConfig
from gpuval_agent.display import Display
from gpuval_agent.runner import run_checks
from gpuval_api.baseline import figures
from gpuval_api.baseline.learn import NodeFigures
from gpuval_api.checks import ChecksConfig
from gpuval_api.result import AgentResult, Verdict

GPUS = 4


def measured(
    node: str,
    faults: Sequence[Mapping[str, Any]] = (),
    gpus: int = GPUS,
    config: ChecksConfig | None = None,
) -> AgentResult:
    """The real agent's checks on a simulated H200 node of `gpus` GPUs."""
    simulation = {"gpus": gpus, "timeScale": 0, "faults": [dict(f) for f in faults]}
    backend = SimulatedBackend(SimulationConfig.parse(json.dumps(simulation)))
    display = Display(stream=io.StringIO(), quiet=True)
    try:
        return run_checks(config or ChecksConfig(), backend, display, node=node)
    finally:
        display.close()
        backend.close()


def slowed(factor: float, gpus: Sequence[int] = range(GPUS)) -> list[dict[str, Any]]:
    """A slow-gpu fault at `factor` on each of `gpus`."""
    return [{"kind": "slow-gpu", "gpu": gpu, "factor": factor} for gpu in gpus]


def node_figures(result: AgentResult) -> NodeFigures:
    """What learning reads of a result: its key, its verdict, its samples."""
    key, _ = figures.node_key(result.environment)
    return NodeFigures(
        result.node or "node",
        key,
        result.verdict is Verdict.PASSED,
        tuple(figures.result_samples(result)),
    )
