"""Dynamic Resource Allocation (resource.k8s.io/v1) as NVIDIA's DRA driver speaks it: the names
gpuval reads from its ResourceSlices and ResourceClaims, spelled once, and what a slice or a claim
says about a node's devices. Pure.

The names are the driver's contract (NVIDIA/k8s-dra-driver-gpu, now kubernetes-sigs/dra-driver-
nvidia-gpu: `cmd/gpu-kubelet-plugin/deviceinfo.go` for a whole GPU, `mig.go` for a MIG device, the
chart's `deviceclass-gpu.yaml` and `deviceclass-mig.yaml`): the driver `gpu.nvidia.com` publishes
one pool per node (named after the node); a whole GPU is a device `gpu-<minor>` with attributes
`type` "gpu", `uuid`, `productName`, `brand`, `architecture`, `cudaComputeCapability`,
`driverVersion`, `cudaDriverVersion` and the capacity `memory`; a MIG device is
`gpu-<minor>-mig-<profile>-<profile id>-<placement>` with `type` "mig", its own `uuid`,
`parentUUID`, `profile` (e.g. "1g.18gb") and its parent's product and versions, with the
capacities `multiprocessors` and `memory`. The DeviceClass `gpu.nvidia.com` selects `type ==
'gpu'`, `mig.nvidia.com` selects `type == 'mig'`.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

RESOURCE_GROUP: Final = "resource.k8s.io"
RESOURCE_API: Final = f"{RESOURCE_GROUP}/v1"
RESOURCE_SLICES_PATH: Final = f"/apis/{RESOURCE_API}/resourceslices"
RESOURCE_CLAIMS_PATH: Final = f"/apis/{RESOURCE_API}/resourceclaims"
DEVICE_CLASSES_PATH: Final = f"/apis/{RESOURCE_API}/deviceclasses"
RESOURCE_CLAIM_TEMPLATE_KIND: Final = "ResourceClaimTemplate"

# The NVIDIA driver's name, and its DeviceClasses for whole GPUs and for MIG devices.
DRIVER: Final = "gpu.nvidia.com"
GPU_DEVICE_CLASS: Final = "gpu.nvidia.com"
MIG_DEVICE_CLASS: Final = "mig.nvidia.com"
# A claim's requests allocate every matching device of the node's pool (resource.k8s.io/v1
# ExactDeviceRequest.allocationMode); allocation fails while another claim holds one of them.
ALLOCATE_ALL: Final = "All"


class DeviceType(StrEnum):
    """Values of the driver's `type` attribute."""

    GPU = "gpu"
    MIG = "mig"


class Attribute(StrEnum):
    """The driver's device attributes gpuval reads (unqualified: the driver's own domain)."""

    TYPE = "type"
    UUID = "uuid"
    PRODUCT_NAME = "productName"
    BRAND = "brand"
    ARCHITECTURE = "architecture"
    CUDA_COMPUTE_CAPABILITY = "cudaComputeCapability"
    DRIVER_VERSION = "driverVersion"
    CUDA_DRIVER_VERSION = "cudaDriverVersion"
    PROFILE = "profile"
    PARENT_UUID = "parentUUID"


class Capacity(StrEnum):
    """The driver's device capacities gpuval reads."""

    MEMORY = "memory"
    MULTIPROCESSORS = "multiprocessors"


# The value keys of a resource.k8s.io/v1 DeviceAttribute (exactly one is set).
_VALUE_KEYS = ("string", "version", "int", "bool")


def attribute(device: Mapping[str, Any], name: str) -> str | None:
    """A device attribute's value as text, unqualified or qualified with the driver's domain."""
    attributes = device.get("attributes") or {}
    found = attributes.get(name) or attributes.get(f"{DRIVER}/{name}")
    if not isinstance(found, Mapping):
        return None
    for key in _VALUE_KEYS:
        if key in found and found[key] is not None:
            value = found[key]
            return str(value).lower() if isinstance(value, bool) else str(value)
    return None


@dataclass(frozen=True, slots=True)
class PublishedDevice:
    """One device of a node as the driver publishes it: a whole GPU, or a MIG device (with its
    profile and its parent GPU's UUID)."""

    name: str
    type: str
    uuid: str
    product: str = ""
    profile: str = ""
    parent_uuid: str = ""

    @property
    def mig(self) -> bool:
        return self.type == DeviceType.MIG


@dataclass(frozen=True, slots=True)
class PublishedSlice:
    """What one ResourceSlice of the NVIDIA driver says: its node, its pool (name, generation and
    how many slices that generation of the pool has) and its devices."""

    name: str
    node: str
    pool: str
    devices: tuple[PublishedDevice, ...]
    generation: int = 0
    slice_count: int = 1


@dataclass(frozen=True, slots=True)
class Pool:
    """A pool as the scheduler sees it (resource.k8s.io/v1 ResourceSlice spec.pool): only the
    slices of its highest generation count, and it is complete only once as many slices of that
    generation are seen as their resourceSliceCount says; an incomplete pool is not allocated
    from (k8s.io/dynamic-resource-allocation, structured: GatherPools and the allocator, which
    refuses `allocationMode: All` on it)."""

    name: str
    generation: int
    slice_count: int
    slices: tuple[PublishedSlice, ...]

    @property
    def complete(self) -> bool:
        return len(self.slices) == self.slice_count

    @property
    def devices(self) -> tuple[PublishedDevice, ...]:
        return tuple(d for s in self.slices for d in s.devices)

    def describe(self) -> str:
        """e.g. 'pool node-a generation 2: 1 of 2 ResourceSlices seen (node-a-gpu.nvidia.com)'."""
        names = ", ".join(s.name for s in self.slices)
        return (
            f"pool {self.name} generation {self.generation}: {len(self.slices)} of "
            f"{self.slice_count} ResourceSlices seen ({names})"
        )


def pools_of(slices: Iterable[PublishedSlice]) -> tuple[Pool, ...]:
    """The pools of `slices` by name, each cut to its highest generation (older generations are
    a driver's republishing in progress: the scheduler ignores them)."""
    by_pool: dict[str, list[PublishedSlice]] = {}
    for published in slices:
        by_pool.setdefault(published.pool, []).append(published)
    pools = []
    for name, found in sorted(by_pool.items()):
        generation = max(s.generation for s in found)
        current = sorted((s for s in found if s.generation == generation), key=lambda s: s.name)
        pools.append(Pool(name, generation, current[0].slice_count, tuple(current)))
    return tuple(pools)


def _interned(text: str | None) -> str:
    return sys.intern(text or "")


def parse_slice(obj: Mapping[str, Any]) -> PublishedSlice | None:
    """A ResourceSlice's node, pool and GPU or MIG devices; None when it is not the NVIDIA
    driver's or names no node. Devices of other types, or without a UUID, are left out: nothing
    can map them to what the agent sees."""
    spec = obj.get("spec") or {}
    meta = obj.get("metadata") or {}
    node = spec.get("nodeName")
    if spec.get("driver") != DRIVER or not isinstance(node, str) or not node:
        return None
    devices = []
    for device in spec.get("devices") or []:
        kind = attribute(device, Attribute.TYPE)
        uuid = attribute(device, Attribute.UUID)
        if kind not in (DeviceType.GPU, DeviceType.MIG) or not uuid:
            continue
        devices.append(
            PublishedDevice(
                name=_interned(str(device.get("name") or "")),
                type=_interned(kind),
                uuid=sys.intern(uuid),
                product=_interned(attribute(device, Attribute.PRODUCT_NAME)),
                profile=_interned(attribute(device, Attribute.PROFILE)),
                parent_uuid=_interned(attribute(device, Attribute.PARENT_UUID)),
            )
        )
    pool = spec.get("pool") or {}
    return PublishedSlice(
        name=str(meta.get("name") or ""),
        node=sys.intern(node),
        pool=sys.intern(str(pool.get("name") or node)),
        devices=tuple(devices),
        generation=_count(pool.get("generation"), 0),
        slice_count=_count(pool.get("resourceSliceCount"), 1),
    )


def _count(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


@dataclass(frozen=True, slots=True)
class ClaimHold:
    """A ResourceClaim allocated devices of some pool: which claim, for whom, which devices."""

    namespace: str
    name: str
    pools: frozenset[tuple[str, str]]  # (driver, pool)
    devices: tuple[str, ...]
    reserved_for: tuple[str, ...]

    def describe(self) -> str:
        """e.g. 'default/train-0 (gpu-0, gpu-1; reserved for pod train)'."""
        users = f"; reserved for pod {', '.join(self.reserved_for)}" if self.reserved_for else ""
        return f"{self.namespace}/{self.name} ({', '.join(self.devices)}{users})"


def claim_hold(obj: Mapping[str, Any], driver: str = DRIVER) -> ClaimHold | None:
    """The devices of `driver` a ResourceClaim holds (its status.allocation), None when it holds
    none of them."""
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
    mine = [r for r in results if r.get("driver") == driver]
    if not mine:
        return None
    return ClaimHold(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        pools=frozenset((driver, str(r.get("pool") or "")) for r in mine),
        devices=tuple(str(r.get("device") or "") for r in mine),
        reserved_for=tuple(
            str(r.get("name") or "") for r in status.get("reservedFor") or [] if r.get("name")
        ),
    )
