"""What the operator keeps of each node a validation selects (one list+watch per validation, cut
down to a few hundred bytes per node), and the gating decision: which nodes join the current run
because they are new, rebooted or run another GPU stack than they were tested on.

Pure and synchronous; the controller feeds it the watch's events.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuval_api import Verdict, gfd, keys
from gpuval_api.gfd import GpuSharing, sharing_of
from gpuval_api.kubernetes import READY
from gpuval_operator.capacity import NodeCapacity
from gpuval_operator.nodes.entries import NodeEntry, entry_key
from gpuval_operator.planning import (
    cordoned_by_us,
    mig_resources,
    node_gpus,
    node_ready,
    node_resources,
)
from gpuval_operator.proofage import NodeProof
from gpuval_operator.timestamps import parse_time

# Node labels of NVIDIA GPU feature discovery that name the GPU stack, and the capacity: a change
# in any of them is a changed stack (driver upgrade, CUDA, a GPU gone).
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
STACK_LABELS = (
    "nvidia.com/cuda.driver-version.full",
    "nvidia.com/cuda.driver.major",
    "nvidia.com/cuda.driver.minor",
    "nvidia.com/cuda.driver.rev",
    "nvidia.com/cuda.runtime-version.full",
    "nvidia.com/cuda.runtime.major",
    "nvidia.com/cuda.runtime.minor",
    gfd.GPU_COUNT_LABEL,
    gfd.GPU_PRODUCT_LABEL,
)


def not_ready_of(node: Mapping[str, Any]) -> tuple[float, str] | None:
    """Since when (its Ready condition's lastTransitionTime, epoch seconds) and why a node is not
    Ready; None when it is Ready."""
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == READY:
            if cond.get("status") == "True":
                return None
            why = ": ".join(p for p in (cond.get("reason"), cond.get("message")) if p)
            return parse_time(cond.get("lastTransitionTime")) or 0.0, sys.intern(why[:160])
    return 0.0, "no Ready condition"


def stack_of(node: Mapping[str, Any]) -> str:
    """The node's GPU stack as one string: its GPU feature discovery labels and GPU capacity."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    parts = [f"{k.rsplit('/', 1)[1]}={labels[k]}" for k in STACK_LABELS if k in labels]
    parts.append(f"gpus={node_gpus(node)}")
    return sys.intern(",".join(parts))


@dataclass(slots=True)
class NodeFacts:
    name: str
    gpus: int
    ready: bool
    schedulable: bool  # not cordoned, or cordoned by gpuval (validated again to be uncordoned)
    boot_id: str
    stack: str
    entry: NodeEntry | None  # this validation's annotation on the node
    # Its value of spec.fabric.topologyKey ("" without it); None when the spec names no key.
    domain: str | None = None
    # Its GPUs shared by the device plugin (time-slicing, MPS); None: not shared.
    sharing: GpuSharing | None = None
    # Not Ready: since when (epoch seconds) and the Ready condition's reason and message.
    not_ready: tuple[float, str] | None = None
    # Its GPU model as GPU feature discovery labels it ("" without the label): which
    # GpuBaselines its agent is given.
    product: str = ""
    # The device plugin's resources by name where it advertises MIG devices (mixed strategy);
    # empty: `gpus` nvidia.com/gpu.
    resources: tuple[tuple[str, int], ...] = ()
    # It carries gpuval.dev/needs-repair (spec.remediation: a person removes it once repaired).
    needs_repair_label: bool = False
    # Its gpuval.dev/proven-at (epoch seconds): the last pass of any validation; None: no proof.
    proven_at: float | None = None

    @classmethod
    def parse(
        cls, node: Mapping[str, Any], validation: str, topology_key: str | None = None
    ) -> NodeFacts:
        meta = node.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        labels = meta.get("labels") or {}
        info = (node.get("status") or {}).get("nodeInfo") or {}
        unschedulable = bool((node.get("spec") or {}).get("unschedulable"))
        resources = node_resources(node)
        gpus = sum(resources.values())
        return cls(
            name=sys.intern(meta.get("name", "")),
            gpus=gpus,
            ready=node_ready(node),
            schedulable=not unschedulable or cordoned_by_us(node),
            boot_id=str(info.get("bootID") or ""),
            stack=stack_of(node),
            entry=NodeEntry.decode(annotations.get(entry_key(validation))),
            domain=None if topology_key is None else sys.intern(labels.get(topology_key, "")),
            sharing=sharing_of(labels, gpus),
            not_ready=not_ready_of(node),
            product=sys.intern(str(labels.get(GPU_PRODUCT_LABEL, ""))[:128]),
            resources=mig_resources(resources),
            needs_repair_label=keys.NODE_LABEL_NEEDS_REPAIR in labels,
            proven_at=parse_time(annotations.get(keys.NODE_ANNOTATION_PROVEN_AT)),
        )

    def proof(self, tested_at: float | None = None) -> NodeProof:
        """What spec.maxProofAgeSeconds decides on: its proof, and when this validation last
        tested it without a pass (a failure or a NotRun since: tried again once per age);
        `tested_at`: a test its entry does not show yet."""
        entry = self.entry
        since = entry.at if entry is not None and entry.verdict != Verdict.PASSED else None
        last = max((t for t in (since, tested_at) if t is not None), default=None)
        return NodeProof(self.name, self.gpus, self.proven_at, last)

    def capacity(self, gpus: int, failed_gpus: int = 0) -> NodeCapacity:
        """What healthy capacity counts of it (`gpus`: its GPUs as the caller counts them, the
        DRA driver's devices or the device plugin's; `failed_gpus`: those its latest failed
        report names)."""
        entry = self.entry
        return NodeCapacity(
            name=self.name,
            gpus=gpus,
            tested=entry.tested if entry is not None else None,
            repair=entry.repair.state if entry is not None and entry.repair is not None else None,
            needs_repair_label=self.needs_repair_label,
            proven_at=self.proven_at,
            failed_gpus=failed_gpus,
        )

    @property
    def available(self) -> bool:
        """Ready and taking work (or cordoned by gpuval), whatever its GPUs."""
        return self.ready and self.schedulable

    @property
    def selectable(self) -> bool:
        """Available with GPUs the device plugin offers (with DRA: the node's slices say)."""
        return self.gpus > 0 and self.available
