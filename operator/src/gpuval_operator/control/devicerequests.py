"""How a run's agent and fabric pods ask for their node's devices (spec.agent.devices): the
device plugin's resources the node advertises, or, with DRA, a ResourceClaim from the run's
ResourceClaimTemplate of the node's shape of devices (made here the first time a pod needs it)
and the UUIDs its ResourceSlices publish (gpuval_operator.devices)."""

from __future__ import annotations

from gpuval_api.crd import DeviceSource, GpuValidationSpec
from gpuval_operator.devices import DeviceRequest
from gpuval_operator.nodes.watch import NodeWatch
from gpuval_operator.run.effects import Effects
from gpuval_operator.run.state import RunState

# With no device of the node in view (its slices deleted since it was selected, or not yet seen),
# its pod still asks for whole GPUs, all of them: it never shares one.
_FALLBACK_SHAPE = "gpu"


async def device_request(
    effects: Effects, node_watch: NodeWatch, run: RunState, node: str, spec: GpuValidationSpec
) -> DeviceRequest:
    """How `node`'s pod in `run` asks for the node's devices."""
    gpus = run.nodes[node].gpus
    if spec.agent.devices is DeviceSource.DRA:
        devices = node_watch.slices.devices(node)
        template = await effects.ensure_claim_template(
            run.run_id, devices.shape or _FALLBACK_SHAPE, spec.agent.dra
        )
        request = DeviceRequest.claim(template, devices)
        # Its devices out of view (a node listed before the slice watch had synced): the count
        # it was selected with, and no UUIDs (the agent then tests every GPU it sees).
        return request if request.count else DeviceRequest(count=gpus, template=template)
    facts = node_watch.nodes.get(node)
    resources = dict(facts.resources) if facts is not None and facts.resources else None
    return DeviceRequest.device_plugin(gpus, resources)
