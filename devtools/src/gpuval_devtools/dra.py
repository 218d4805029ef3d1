"""A simulated node's GPUs published as NVIDIA's DRA driver publishes them: its DeviceClasses and
one ResourceSlice per node (driver gpu.nvidia.com, pool named after the node), with the driver's
device names and attribute names (gpuval_api.dra says where they come from). Nobody runs the
driver's kubelet plugin here: the local kube-scheduler allocates claims against these slices as it
would against the driver's, and the pod runner runs the agent of a pod bound to the node (kwok
calls no NodePrepareResources, and needs none: the agent's double reads its GPUs from the node's
simulation config, whose UUIDs are these).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuval_api.dra import (
    DRIVER,
    GPU_DEVICE_CLASS,
    MIG_DEVICE_CLASS,
    RESOURCE_API,
    Attribute,
    Capacity,
    DeviceType,
)
from gpuval_api.mig import known_profile

# An H200's memory as NVML and the driver report it, and its versions (the double's defaults).
H200_MEMORY_BYTES = 143771 << 20
_STRINGS = {
    Attribute.BRAND: "Nvidia",
    Attribute.ARCHITECTURE: "Hopper",
}
_VERSIONS = {
    Attribute.CUDA_COMPUTE_CAPABILITY: "9.0.0",
    Attribute.DRIVER_VERSION: "580.159.4",
    Attribute.CUDA_DRIVER_VERSION: "13.0.0",
}
# NVML's GPU instance profile ids of the H200's profiles (nvidia-smi mig -lgip's ID column),
# which the driver puts into a MIG device's name.
_PROFILE_IDS = {"1g.18gb": 19, "1g.35gb": 15, "2g.35gb": 14, "3g.71gb": 9, "4g.71gb": 5}
_PROFILE_IDS["7g.141gb"] = 0


def device_classes() -> list[dict[str, Any]]:
    """The driver's DeviceClasses for whole GPUs and MIG devices (its chart's)."""
    return [
        {
            "apiVersion": RESOURCE_API,
            "kind": "DeviceClass",
            "metadata": {"name": name},
            "spec": {
                "selectors": [
                    {
                        "cel": {
                            "expression": f"device.driver == '{DRIVER}' && "
                            f"device.attributes['{DRIVER}'].type == '{kind}'"
                        }
                    }
                ]
            },
        }
        for name, kind in ((GPU_DEVICE_CLASS, DeviceType.GPU), (MIG_DEVICE_CLASS, DeviceType.MIG))
    ]


def gpu_uuid(node: str, gpu: int) -> str:
    """A stable, real-looking GPU UUID for a simulated node's GPU."""
    return f"GPU-{uuid.uuid5(uuid.NAMESPACE_URL, f'gpuval-sim/{node}/{gpu}')}"


def mig_uuid(node: str, gpu: int, k: int) -> str:
    return f"MIG-{uuid.uuid5(uuid.NAMESPACE_URL, f'gpuval-sim/{node}/{gpu}/mig/{k}')}"


@dataclass(frozen=True, slots=True)
class MigDevice:
    gpu: int
    profile: str
    uuid: str
    placement: int


def _attributes(
    values: Mapping[Attribute, str], versions: Mapping[Attribute, str]
) -> dict[str, Any]:
    # Plain strings: the enums' own types do not survive a YAML dump (kubectl apply's input).
    out: dict[str, Any] = {str(name): {"string": str(value)} for name, value in values.items()}
    out.update({str(name): {"version": str(value)} for name, value in versions.items()})
    return out


def resource_slice(
    node: str,
    gpus: Sequence[str],
    product: str = "NVIDIA H200",
    mig: Sequence[MigDevice] = (),
    *,
    generation: int = 1,
    slice_count: int = 1,
    name: str | None = None,
    first: int = 0,
) -> dict[str, Any]:
    """The node's ResourceSlice: a `gpu-<minor>` device per whole GPU (`gpus`: their UUIDs, by
    index from `first`; a GPU with MIG devices is published as them instead, as the driver does
    for a GPU with MIG mode on). The pool is named after the node; `generation` and
    `slice_count` are its spec.pool's (a driver republishing its pool writes the next
    generation; a pool in several slices gives each a `name` of its own)."""
    split = {m.gpu for m in mig}
    devices: list[dict[str, Any]] = []
    for index, gpu in enumerate(gpus, start=first):
        if index in split:
            continue
        values = {Attribute.TYPE: DeviceType.GPU, Attribute.UUID: gpu} | _STRINGS
        values[Attribute.PRODUCT_NAME] = product
        devices.append(
            {
                "name": f"gpu-{index}",
                "attributes": _attributes(values, _VERSIONS),
                "capacity": {str(Capacity.MEMORY): {"value": str(H200_MEMORY_BYTES)}},
            }
        )
    for device in mig:
        known = known_profile(product, device.profile)
        values = {
            Attribute.TYPE: DeviceType.MIG,
            Attribute.UUID: device.uuid,
            Attribute.PARENT_UUID: gpus[device.gpu],
            Attribute.PROFILE: device.profile,
            Attribute.PRODUCT_NAME: product,
        } | _STRINGS
        capacity: dict[str, Any] = {}
        if known is not None:
            capacity[str(Capacity.MULTIPROCESSORS)] = {"value": str(known.sms)}
            memory = H200_MEMORY_BYTES * known.memory_slices // 8
            capacity[str(Capacity.MEMORY)] = {"value": str(memory)}
        profile_id = _PROFILE_IDS.get(device.profile, 0)
        name = f"gpu-{device.gpu}-mig-{device.profile.replace('.', '')}-{profile_id}"
        devices.append(
            {
                "name": f"{name}-{device.placement}",
                "attributes": _attributes(values, _VERSIONS),
                "capacity": capacity,
            }
        )
    return {
        "apiVersion": RESOURCE_API,
        "kind": "ResourceSlice",
        "metadata": {"name": name or f"{node}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": slice_count},
            "devices": devices,
        },
    }
