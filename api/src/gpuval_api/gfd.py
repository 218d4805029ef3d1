"""The node labels NVIDIA GPU feature discovery (GFD) sets that gpuval reads, spelled once, and
what they say about a node whose device plugin shares its GPUs. Pure.

They are NVIDIA's contract (k8s-device-plugin's GFD; the GPU operator's "Time-Slicing GPUs" and
"Multi-Process Service" pages): with GPU sharing configured, `nvidia.com/gpu.count` stays the
number of physical GPUs, `nvidia.com/gpu.replicas` is how many replicas the device plugin makes
of each, the node's `nvidia.com/gpu` capacity is count x replicas, `nvidia.com/gpu.sharing-
strategy` says how they are shared (none, time-slicing, mps), and (renameByDefault false, the
default) the product label gets a `-SHARED` suffix. With renameByDefault true the replicas are
advertised as `nvidia.com/gpu.shared` instead, and `nvidia.com/gpu` is 0: gpuval does not select
such a node (docs/operator/devices.md, "Shared GPUs").
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from gpuval_api.mig import parent_product

GPU_RESOURCE: Final = "nvidia.com/gpu"
# The device plugin's MIG strategies (GFD label nvidia.com/mig.strategy): `single` advertises a
# node's MIG devices (all of one profile) as nvidia.com/gpu; `mixed` as one resource per profile,
# nvidia.com/mig-<profile> (e.g. nvidia.com/mig-1g.18gb), beside nvidia.com/gpu for GPUs without
# MIG.
MIG_RESOURCE_PREFIX: Final = "nvidia.com/mig-"
MIG_STRATEGY_LABEL: Final = "nvidia.com/mig.strategy"
GPU_COUNT_LABEL: Final = "nvidia.com/gpu.count"
GPU_PRODUCT_LABEL: Final = "nvidia.com/gpu.product"
GPU_REPLICAS_LABEL: Final = "nvidia.com/gpu.replicas"
GPU_SHARING_LABEL: Final = "nvidia.com/gpu.sharing-strategy"
# What GFD appends to the product label of a node with GPU replicas.
SHARED_PRODUCT_SUFFIX: Final = "-SHARED"
# After the model in the product label: a MIG profile (GFD's MIG strategy single, e.g.
# NVIDIA-A100-SXM4-40GB-MIG-1g.5gb), then the shared suffix.
_LABEL_TAIL = re.compile(r"(-mig-[0-9a-z.+]+)?(-shared)?")


def product_label(product: str) -> str:
    """NVML's product name as GFD writes it into GPU_PRODUCT_LABEL: spaces as dashes."""
    return product.replace(" ", "-")


def label_names_product(label: str, product: str) -> bool:
    """Whether a node's GPU_PRODUCT_LABEL names the GPU model `product` (NVML's name, or a
    baseline key's 'NVIDIA H200 MIG 1g.18gb'): its label form, then maybe a MIG profile and
    -SHARED, case aside. 'NVIDIA-H200-NVL' (a PCIe card) does not name 'NVIDIA H200'. A MIG
    instance's product is named by its parent's label: under the mixed strategy GFD labels the
    parent alone ('NVIDIA-H200'); under the single strategy with the profile, which must be its."""
    model, profile = parent_product(product)
    mine, label = product_label(model).lower(), label.lower()
    tail = _LABEL_TAIL.fullmatch(label[len(mine) :]) if label.startswith(mine) else None
    if tail is None:
        return False
    labelled = (tail.group(1) or "").removeprefix("-mig-")
    return not profile or not labelled or labelled == profile.lower()


class SharingStrategy(StrEnum):
    """Values of GPU_SHARING_LABEL."""

    NONE = "none"
    TIME_SLICING = "time-slicing"
    MPS = "mps"


@dataclass(frozen=True, slots=True)
class GpuSharing:
    """How a node's GPUs are shared: GFD's strategy, replicas per GPU, physical GPUs (0 where
    unknown)."""

    strategy: str
    replicas: int
    physical: int = 0

    @property
    def exclusive_possible(self) -> bool:
        """One pod can hold every replica of a GPU (not under MPS, which gives a container one)."""
        return self.strategy != SharingStrategy.MPS

    def annotation(self) -> str:
        """As an agent pod's annotation carries it: '<strategy>/<replicas per GPU>'."""
        return f"{self.strategy}/{self.replicas}"

    def describe(self) -> str:
        """E.g. '8 GPUs as 32 time-slicing replicas'."""
        return f"{self.physical} GPUs as {self.physical * self.replicas} {self.strategy} replicas"


def _positive(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() and int(text) > 0 else None


def sharing_of(labels: Mapping[str, str], advertised: int) -> GpuSharing | None:
    """The node's GPU sharing from its GFD labels and its advertised `nvidia.com/gpu`; None when
    its GPUs are not shared (no sharing label, or strategy none, and one replica)."""
    strategy = labels.get(GPU_SHARING_LABEL, "")
    replicas = _positive(labels.get(GPU_REPLICAS_LABEL)) or 1
    unnamed = strategy in ("", SharingStrategy.NONE)
    if unnamed and replicas == 1:
        return None
    if unnamed:
        strategy = SharingStrategy.TIME_SLICING  # replicas without a strategy: an older GFD
    physical = _positive(labels.get(GPU_COUNT_LABEL)) or max(1, advertised // replicas)
    return GpuSharing(strategy, replicas, physical)


class MigStrategy(StrEnum):
    """Values of MIG_STRATEGY_LABEL."""

    NONE = "none"
    SINGLE = "single"
    MIXED = "mixed"


def _count(text: object) -> int:
    try:
        return max(int(str(text)), 0)
    except ValueError:
        return 0


def device_resources(resources: Mapping[str, object]) -> dict[str, int]:
    """The device plugin's GPU resources a node advertises (nvidia.com/gpu, and one
    nvidia.com/mig-<profile> per MIG profile under the mixed strategy) with a count above 0, in
    name order: what an agent pod asks for, all of it."""
    found = {
        name: _count(value)
        for name, value in resources.items()
        if name == GPU_RESOURCE or name.startswith(MIG_RESOURCE_PREFIX)
    }
    return {name: count for name, count in sorted(found.items()) if count > 0}


def mig_profile_of(resource: str) -> str | None:
    """'nvidia.com/mig-1g.18gb' -> '1g.18gb'; None for another resource."""
    if resource.startswith(MIG_RESOURCE_PREFIX):
        return resource[len(MIG_RESOURCE_PREFIX) :]
    return None


def shared_labels(
    strategy: SharingStrategy, replicas: int, gpus: int, product: str
) -> dict[str, str]:
    """The labels GFD sets on a node of `gpus` physical GPUs shared as `replicas` each (what a
    test node or a demo node carries)."""
    return {
        GPU_COUNT_LABEL: str(gpus),
        GPU_REPLICAS_LABEL: str(replicas),
        GPU_SHARING_LABEL: str(strategy),
        GPU_PRODUCT_LABEL: product + SHARED_PRODUCT_SUFFIX,
    }
