"""The units the simulated backend tests: its GPUs, or on a GPU with MIG mode on (the config's
`mig`) each MIG device of it, as the agent tests them on a real MIG node. A TEST DOUBLE's part.

A unit's figures are its share of its GPU's (gpuval_api.mig.share_of), so a healthy 1g.18gb
instance measures what a healthy seventh of an H200 would and passes the same scaled
expectations the checks apply (gpuval_agent.parts.expected_for).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuval_agent.backends.simulated.config import SimulationConfig
from gpuval_api.mig import MODELS, MigShare, known_profile, share_of
from gpuval_api.result import MigInstance

WHOLE = MigShare(compute=1.0, memory=1.0)


@dataclass(frozen=True, slots=True)
class SimUnit:
    """One tested unit: a whole GPU, or a MIG device of the physical GPU `parent`."""

    index: int
    parent: int
    uuid: str
    memory_bytes: int
    share: MigShare = WHOLE
    mig: MigInstance | None = None


def gpu_uuid(config: SimulationConfig, node: str, gpu: int) -> str:
    """The GPU's UUID: the config's, else one of the node's (another for each gpuSet: its GPUs
    replaced)."""
    if config.uuids is not None:
        return config.uuids[gpu]
    replaced = f"-set{config.gpu_set}" if config.gpu_set else ""
    return f"GPU-sim-{node}-{gpu}{replaced}"


def build_units(
    config: SimulationConfig, visible: int, node: str, memory_total: int
) -> list[SimUnit]:
    """The units of the `visible` physical GPUs, indexed in order: whole GPUs, and each MIG
    device of a GPU with MIG mode on in place of its GPU."""
    layouts = {entry.gpu: entry for entry in config.mig}
    model = MODELS.get(config.product)
    units: list[SimUnit] = []
    for gpu in range(visible):
        parent_uuid = gpu_uuid(config, node, gpu)
        layout = layouts.get(gpu)
        if layout is None:
            units.append(SimUnit(len(units), gpu, parent_uuid, memory_total))
            continue
        for k, profile in enumerate(layout.profiles):
            known = known_profile(config.product, profile)
            sms = known.sms if known is not None else None
            parent_sms = model.sms if model is not None else None
            share = share_of(config.product, profile, sms=sms, parent_sms=parent_sms)
            uuid = layout.uuids[k] if layout.uuids else f"MIG-sim-{node}-{gpu}-{k}"
            units.append(
                SimUnit(
                    index=len(units),
                    parent=gpu,
                    uuid=uuid,
                    memory_bytes=int(memory_total * share.memory),
                    share=share,
                    mig=MigInstance(
                        profile=profile,
                        parent_index=gpu,
                        parent_uuid=parent_uuid,
                        sm_count=sms,
                        parent_sm_count=parent_sms,
                        parent_memory_total_bytes=memory_total,
                        gpu_instance_id=k + 1,
                        compute_instance_id=0,
                    ),
                )
            )
    return units
