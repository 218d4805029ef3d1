"""Simulated GPU nodes: kwok nodes whose agent pods the pod runner runs with the agent's simulated
backend (a test double; docs/contracts.md, "Simulated backend").

The node annotation that carries the simulation config is devtools' own: the operator never reads
it, only the pod runner does.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from gpuval_devtools.controlplane import GpuNode
from gpuval_devtools.kwoknodes import LOOPBACK_POD_CIDR

SIMULATE_ANNOTATION = "gpuval.dev/simulate"
# The API server "goes away" for this node's agents: the pod runner points them at a closed port
# and gives them this many seconds as their deadline, as if the outage outlasted it.
API_OUTAGE_ANNOTATION = "gpuval.dev/simulate-api-outage-seconds"

HEALTHY: dict[str, Any] = {
    "gpus": 8,
    "product": "NVIDIA H200",
    "driver": "580.159.04",
    "cuda": "13.0",
    "nccl": "2.28.9",
    "timeScale": 0.01,
}


def simulated_node(
    name: str,
    faults: Sequence[dict[str, Any]] = (),
    *,
    api_outage_seconds: float | None = None,
    **overrides: Any,
) -> GpuNode:
    """A kwok node whose agent pods the pod runner runs with this simulation config, its pod IPs
    on loopback: a fabric rank the pod runner runs here dials the IP it read from rank 0's pod."""
    config = {**HEALTHY, **overrides, "faults": list(faults)}
    annotations = {SIMULATE_ANNOTATION: json.dumps(config, separators=(",", ":"))}
    if api_outage_seconds is not None:
        annotations[API_OUTAGE_ANNOTATION] = str(api_outage_seconds)
    return GpuNode(
        name=name, gpus=int(config["gpus"]), annotations=annotations, pod_cidr=LOOPBACK_POD_CIDR
    )
