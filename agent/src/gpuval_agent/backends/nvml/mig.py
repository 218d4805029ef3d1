"""MIG devices as NVML shows them: on a GPU with MIG mode on, each MIG device (a GPU instance and
its compute instance) is a unit the agent tests, with its UUID, profile, SMs and memory.

NVML's calls (nvml.h, "Multi Instance GPU Management"): nvmlDeviceGetMigMode (current, pending),
nvmlDeviceGetMaxMigDeviceCount, nvmlDeviceGetMigDeviceHandleByIndex (NOT_FOUND where no device sits
at an index), and per MIG device nvmlDeviceGetUUID, nvmlDeviceGetName ("NVIDIA H200 MIG 1g.18gb"),
nvmlDeviceGetMemoryInfo, nvmlDeviceGetAttributes (its multiprocessorCount and slice counts: MIG
handles only), nvmlDeviceGetGpuInstanceId and nvmlDeviceGetComputeInstanceId; the whole GPU's SMs
are the multiprocessorCount of its full profile (nvmlDeviceGetGpuInstanceProfileInfo with
NVML_GPU_INSTANCE_PROFILE_7_SLICE). The module is passed in (`nv`), so the unit tests replay
recorded answers through a fake of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuval_api.mig import compute_slices_of

# nvml.h's NVML_DEVICE_MIG_ENABLE, and the MIG device name's separator before the profile.
_MIG_ENABLE = 1
_NAME_MARK = " MIG "


@dataclass(frozen=True, slots=True)
class MigDevice:
    """One MIG device of a GPU, as NVML describes it."""

    handle: Any
    parent_index: int
    uuid: str
    profile: str
    sm_count: int | None
    memory_total_bytes: int | None
    gpu_instance_id: int | None
    compute_instance_id: int | None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _ask(nv: Any, name: str, *args: Any) -> Any:
    """NVML's answer to `name(*args)`; None where it has none (not supported, not found)."""
    try:
        return getattr(nv, name)(*args)
    except nv.NVMLError:
        return None


def mig_enabled(nv: Any, handle: Any) -> bool:
    """Whether the GPU's current MIG mode is on (False where the GPU has no MIG)."""
    mode = _ask(nv, "nvmlDeviceGetMigMode", handle)
    if not mode:
        return False
    return int(mode[0]) == int(getattr(nv, "NVML_DEVICE_MIG_ENABLE", _MIG_ENABLE))


def parent_sm_count(nv: Any, handle: Any) -> int | None:
    """The whole GPU's SMs: the multiprocessorCount of its full (7-slice) instance profile."""
    profile = getattr(nv, "NVML_GPU_INSTANCE_PROFILE_7_SLICE", 4)
    info = _ask(nv, "nvmlDeviceGetGpuInstanceProfileInfo", handle, profile)
    count = getattr(info, "multiprocessorCount", None)
    return int(count) if count else None


def profile_of(name: str, attributes: Any) -> str:
    """The MIG profile: from the device's name ('NVIDIA H200 MIG 1g.18gb' -> '1g.18gb'), else
    from its slice counts and memory ('1g.16gb' where the name says nothing)."""
    if _NAME_MARK in name:
        candidate = name.rsplit(_NAME_MARK, 1)[1].strip()
        if compute_slices_of(candidate) is not None:
            return candidate
    slices = getattr(attributes, "gpuInstanceSliceCount", None)
    memory = getattr(attributes, "memorySizeMB", None)
    if slices and memory:
        return f"{int(slices)}g.{round(int(memory) / 1024)}gb"
    return "unknown"


def mig_devices(nv: Any, parent_index: int, handle: Any) -> list[MigDevice]:
    """The MIG devices of the GPU at `parent_index` (none where its MIG mode is off), in the
    order of their NVML index."""
    if not mig_enabled(nv, handle):
        return []
    most = _ask(nv, "nvmlDeviceGetMaxMigDeviceCount", handle) or 0
    found = []
    for index in range(int(most)):
        mig = _ask(nv, "nvmlDeviceGetMigDeviceHandleByIndex", handle, index)
        if mig is None:
            continue  # no MIG device at this index (NVML_ERROR_NOT_FOUND)
        uuid = _ask(nv, "nvmlDeviceGetUUID", mig)
        if uuid is None:
            continue
        name = _text(_ask(nv, "nvmlDeviceGetName", mig) or "")
        attributes = _ask(nv, "nvmlDeviceGetAttributes", mig)
        memory = _ask(nv, "nvmlDeviceGetMemoryInfo", mig)
        sms = getattr(attributes, "multiprocessorCount", None)
        gi = _ask(nv, "nvmlDeviceGetGpuInstanceId", mig)
        ci = _ask(nv, "nvmlDeviceGetComputeInstanceId", mig)
        found.append(
            MigDevice(
                handle=mig,
                parent_index=parent_index,
                uuid=_text(uuid),
                profile=profile_of(name, attributes),
                sm_count=int(sms) if sms else None,
                memory_total_bytes=int(memory.total) if memory is not None else None,
                gpu_instance_id=None if gi is None else int(gi),
                compute_instance_id=None if ci is None else int(ci),
            )
        )
    return found
