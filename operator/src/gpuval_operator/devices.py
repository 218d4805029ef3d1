"""Pure: a node's GPU devices and how an agent pod asks for them (spec.agent.devices).

With the device plugin a pod asks for every `nvidia.com/gpu` the node advertises, and under the
mixed MIG strategy for every `nvidia.com/mig-<profile>` too (gpuval_api.gfd.device_resources).
With DRA the node's devices are what the NVIDIA driver's ResourceSlices publish for it
(gpuval_api.dra), and a pod asks through one ResourceClaim, made by kube-controller-manager from a
ResourceClaimTemplate, with one request per DeviceClass the node has devices of (whole GPUs:
spec.agent.dra.deviceClassName; MIG devices: migDeviceClassName), each `allocationMode: All`: the
scheduler allocates every such device of the node, as it does a workload's claim, and while a
workload's claim holds one the pod stays Pending (never sharing a device). The requests follow
the node's devices because All fails on a node that has no device of a class. The pod is told the
UUIDs the node published (GPUVAL_DEVICE_UUIDS), which the agent tests by UUID.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from gpuval_api.crd import DraSettings
from gpuval_api.dra import (
    ALLOCATE_ALL,
    DRIVER,
    RESOURCE_API,
    RESOURCE_CLAIM_TEMPLATE_KIND,
    PublishedDevice,
    PublishedSlice,
    pools_of,
)
from gpuval_api.gfd import GPU_RESOURCE

# The pod's claim and the container's reference to it.
CLAIM_NAME: Final = "devices"
# The claim's requests, one per kind of device the node publishes.
GPU_REQUEST: Final = "gpus"
MIG_REQUEST: Final = "mig"


@dataclass(frozen=True, slots=True)
class NodeDevices:
    """A node's devices as the NVIDIA driver's ResourceSlices publish them: whole GPUs and MIG
    devices (a few hundred bytes: their UUIDs, interned strings)."""

    devices: tuple[PublishedDevice, ...] = ()
    pools: tuple[str, ...] = ()
    # Its pools the scheduler does not allocate from yet (fewer slices of their generation seen
    # than it has), as gpuval_api.dra.Pool.describe says them.
    incomplete: tuple[str, ...] = ()

    @classmethod
    def of(cls, slices: Iterable[PublishedSlice]) -> NodeDevices:
        """The devices of each pool's highest generation only, as the scheduler counts them (a
        driver republishing a pool leaves the older generation's slices behind for a while)."""
        pools = pools_of(slices)
        return cls(
            devices=tuple(d for p in pools for d in p.devices),
            pools=tuple(p.name for p in pools),
            incomplete=tuple(p.describe() for p in pools if not p.complete),
        )

    @property
    def count(self) -> int:
        return len(self.devices)

    @property
    def uuids(self) -> tuple[str, ...]:
        return tuple(d.uuid for d in self.devices)

    @property
    def shape(self) -> str:
        """Which requests its claim needs: 'gpu', 'mig' or 'gpu-mig' ('' without devices)."""
        kinds = [k for k, present in (("gpu", self.gpus), ("mig", self.migs)) if present]
        return "-".join(kinds)

    @property
    def gpus(self) -> int:
        return sum(1 for d in self.devices if not d.mig)

    @property
    def migs(self) -> int:
        return sum(1 for d in self.devices if d.mig)

    @property
    def product(self) -> str:
        return next((d.product for d in self.devices if d.product), "")


def published_twice(node: str, plugin_gpus: int, devices: NodeDevices) -> str | None:
    """Why `node` cannot be tested through a claim when its device plugin also advertises GPUs
    (`plugin_gpus`, its allocatable nvidia.com/gpu and MIG resources) beside the devices a DRA
    driver publishes for it; None when only one of the two hands them out."""
    if plugin_gpus <= 0 or devices.count <= 0:
        return None
    return (
        f"node {node}'s GPUs are handed out twice: its device plugin advertises {plugin_gpus} "
        f"(nvidia.com/gpu allocatable) and DRA driver {DRIVER} publishes {devices.count} devices "
        f"(pool {', '.join(devices.pools)}); a ResourceClaim does not keep device-plugin pods off "
        "them, so no agent pod was made: run one of the two on the node"
    )


def pool_incomplete(node: str, devices: NodeDevices, message: str) -> str | None:
    """`message` (its pod never scheduled) with why: the node's pool incomplete, which the
    scheduler allocates nothing from; None when its pools are complete."""
    if not devices.incomplete:
        return None
    return (
        f"{message}; node {node}'s {'; '.join(devices.incomplete)}: the scheduler allocates "
        "nothing from an incomplete pool"
    )


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    """How one pod asks for its node's devices: device-plugin resources (name, count), or the
    ResourceClaimTemplate its claim is made from and the UUIDs the node published."""

    count: int
    resources: tuple[tuple[str, int], ...] = ()
    template: str | None = None
    uuids: tuple[str, ...] = ()

    @classmethod
    def device_plugin(cls, gpus: int, resources: Mapping[str, int] | None = None) -> DeviceRequest:
        """Every resource the node advertises; plain `nvidia.com/gpu` x `gpus` without them."""
        found = tuple(sorted((resources or {}).items())) or ((GPU_RESOURCE, gpus),)
        return cls(count=sum(n for _, n in found), resources=found)

    @classmethod
    def claim(cls, template: str, devices: NodeDevices) -> DeviceRequest:
        return cls(count=devices.count, template=template, uuids=devices.uuids)

    def limits(self) -> dict[str, str]:
        """The container's device-plugin requests and limits (none with a claim)."""
        return {name: str(count) for name, count in self.resources}

    def pod_claims(self) -> list[dict[str, str]]:
        """The pod's `spec.resourceClaims`."""
        if self.template is None:
            return []
        return [{"name": CLAIM_NAME, "resourceClaimTemplateName": self.template}]

    def container_claims(self) -> list[dict[str, str]]:
        """The container's `resources.claims`."""
        return [{"name": CLAIM_NAME}] if self.template is not None else []


def claim_template(
    *,
    name: str,
    namespace: str,
    labels: Mapping[str, str],
    owner: Mapping[str, Any],
    shape: str,
    settings: DraSettings,
) -> dict[str, Any]:
    """The ResourceClaimTemplate of `shape`: one request per kind of device, each for all of
    them on the node; owned by the GpuValidation, as the agent pods are, and deleted with its
    run's pods (by label)."""
    classes = {"gpu": (GPU_REQUEST, settings.device_class_name)}
    classes["mig"] = (MIG_REQUEST, settings.mig_device_class_name)
    requests = [
        {
            "name": request,
            "exactly": {"deviceClassName": device_class, "allocationMode": ALLOCATE_ALL},
        }
        for kind in shape.split("-")
        for request, device_class in [classes[kind]]
    ]
    return {
        "apiVersion": RESOURCE_API,
        "kind": RESOURCE_CLAIM_TEMPLATE_KIND,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": dict(labels),
            "ownerReferences": [dict(owner)],
        },
        "spec": {"spec": {"devices": {"requests": requests}}},
    }
