"""The devices the agent was given, by UUID: the units it tests are the ones NVML shows whose UUID
the node published and the pod was given (GPUVAL_DEVICE_UUIDS: whole GPUs, or MIG devices), and a
given UUID NVML does not show is named (GpuMissing). Pure."""

from __future__ import annotations

from collections.abc import Sequence

from gpuval_api.result import Environment


def parse_uuids(text: str | None) -> list[str]:
    """'GPU-a,GPU-b' -> ['GPU-a', 'GPU-b'] (blanks and repeats dropped, order kept)."""
    seen: dict[str, None] = {}
    for part in (text or "").split(","):
        if part.strip():
            seen.setdefault(part.strip(), None)
    return list(seen)


def keep_given(environment: Environment, given: Sequence[str]) -> list[str]:
    """Keep the environment's units whose UUID is among `given` (a MIG device's own UUID, or its
    parent's, which gives every instance of that GPU); the given UUIDs NVML shows no unit of, in
    the order given. Nothing changes when nothing was given."""
    if not given:
        return []
    wanted = set(given)
    seen: set[str] = set()
    kept = []
    for gpu in environment.gpus:
        parent = gpu.mig.parent_uuid if gpu.mig is not None else None
        hit = {u for u in (gpu.uuid, parent) if u is not None and u in wanted}
        if hit:
            kept.append(gpu)
            seen |= hit
    environment.gpus = kept
    environment.gpu_count = len(kept)
    return [uuid for uuid in given if uuid not in seen]
