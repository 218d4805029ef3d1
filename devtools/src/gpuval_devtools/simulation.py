"""Simulated GPU nodes: kwok nodes whose agent pods the pod runner runs with the agent's simulated
backend (a test double; docs/contracts.md, "Simulated backend").

The node annotation that carries the simulation config is devtools' own: the operator never reads
it, only the pod runner does.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

from gpuval_api.gfd import GPU_PRODUCT_LABEL, MIG_RESOURCE_PREFIX, MIG_STRATEGY_LABEL, MigStrategy
from gpuval_devtools import dra
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
    devices: str = "devicePlugin",
    mig_strategy: MigStrategy = MigStrategy.MIXED,
    **overrides: Any,
) -> GpuNode:
    """A kwok node whose agent pods the pod runner runs with this simulation config, its pod IPs
    on loopback: a fabric rank the pod runner runs here dials the IP it read from rank 0's pod.

    Its GPUs reach the agent pods as `devices` says: "devicePlugin" advertises them as
    nvidia.com/gpu (a GPU with MIG mode on, `mig` in the config, as its MIG devices: under the
    `mig_strategy` mixed one nvidia.com/mig-<profile> per profile, under single as nvidia.com/gpu);
    "dra" advertises none and publishes them in a ResourceSlice as NVIDIA's DRA driver does
    (gpuval_devtools.dra), with the UUIDs the node's double then shows."""
    config = {**HEALTHY, **overrides, "faults": list(faults)}
    gpus = int(config["gpus"])
    mig = [dict(entry) for entry in config.get("mig") or []]
    slices: list[dict[str, Any]] = []
    if devices == "dra":
        uuids = [dra.gpu_uuid(name, i) for i in range(gpus)]
        published: list[dra.MigDevice] = []
        for entry in mig:
            gpu = int(entry["gpu"])
            entry["uuids"] = [dra.mig_uuid(name, gpu, k) for k in range(len(entry["profiles"]))]
            published += [
                dra.MigDevice(gpu, profile, uuid, placement)
                for placement, (profile, uuid) in enumerate(
                    zip(entry["profiles"], entry["uuids"], strict=True)
                )
            ]
        config |= {"uuids": uuids, "mig": mig}
        slices.append(dra.resource_slice(name, uuids, str(config["product"]), published))
    annotations = {SIMULATE_ANNOTATION: json.dumps(config, separators=(",", ":"))}
    if api_outage_seconds is not None:
        annotations[API_OUTAGE_ANNOTATION] = str(api_outage_seconds)
    advertised, resources, labels = _device_plugin(gpus, mig, mig_strategy, str(config["product"]))
    return GpuNode(
        name=name,
        gpus=0 if devices == "dra" else advertised,
        annotations=annotations,
        pod_cidr=LOOPBACK_POD_CIDR,
        resources={} if devices == "dra" else resources,
        labels=labels,
        slices=tuple(slices),
    )


def _device_plugin(
    gpus: int, mig: Sequence[dict[str, Any]], strategy: MigStrategy, product: str
) -> tuple[int, dict[str, str], dict[str, str]]:
    """What NVIDIA's device plugin and GFD advertise for `gpus` GPUs with the MIG layouts `mig`:
    the nvidia.com/gpu count, other resources, and GFD's MIG labels."""
    if not mig:
        return gpus, {}, {}
    profiles = [p for entry in mig for p in entry["profiles"]]
    whole = gpus - len(mig)
    labels = {MIG_STRATEGY_LABEL: str(strategy)}
    if strategy == MigStrategy.SINGLE:
        # Every GPU of the node carries the one profile; GFD names it in the product label.
        labels[GPU_PRODUCT_LABEL] = f"{product.replace(' ', '-')}-MIG-{profiles[0]}"
        return len(profiles), {}, labels
    counts = Counter(profiles)
    resources = {f"{MIG_RESOURCE_PREFIX}{p}": str(n) for p, n in sorted(counts.items())}
    return whole, resources, labels
