"""A run's devices (spec.agent.devices), carried out: how its agent and fabric pods ask for their
node's devices (the device plugin's resources the node advertises, or, with DRA, a ResourceClaim
from the run's ResourceClaimTemplate of the node's shape of devices, made here the first time a
pod needs it, and the UUIDs its ResourceSlices publish: gpuval_operator.devices); the claims that
hold a node's devices, named when its pod was never scheduled; and the kubelet's word on the
claimed devices, written into the reports."""

from __future__ import annotations

import asyncio
from typing import Any

from gpuval_api import Reason
from gpuval_api.crd import DeviceSource, GpuValidationSpec
from gpuval_api.dra import DRIVER, ClaimHold
from gpuval_api.report import StatusKey
from gpuval_operator.devices import DeviceRequest, pool_incomplete
from gpuval_operator.kube.client import ApiError
from gpuval_operator.nodes.watch import NodeWatch
from gpuval_operator.run.effects import Effects
from gpuval_operator.run.state import NodeRecord, RunState

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


class ClaimsSeen:
    """The cluster's ResourceClaims, listed once for every node of one tick's outcomes whose DRA
    pod was never scheduled (`DevicesClaimed`), each cut to what it holds."""

    def __init__(self, effects: Effects, node_watch: NodeWatch) -> None:
        self.effects, self.node_watch = effects, node_watch
        self._listed: asyncio.Task[list[ClaimHold]] | None = None

    def forget(self) -> None:
        """A new tick: the next node lists the claims again."""
        self._listed = None

    async def explain(self, node: str, message: str) -> tuple[Reason, str]:
        """Why the node's DRA pod was never scheduled: its pool incomplete (the scheduler
        allocates nothing from it: DevicePoolIncomplete), else the claims that hold its devices
        (DevicesClaimed)."""
        incomplete = pool_incomplete(node, self.node_watch.slices.devices(node), message)
        if incomplete is not None:
            return Reason.DEVICE_POOL_INCOMPLETE, incomplete
        return Reason.DEVICES_CLAIMED, await self.named_in(node, message)

    async def named_in(self, node: str, message: str) -> str:
        """`message` with the ResourceClaims that hold the node's devices, where they can be
        found (a claim the operator may not list, or one since released, is not named)."""
        pools = self.node_watch.slices.devices(node).pools or (node,)
        if self._listed is None:
            self._listed = asyncio.ensure_future(self.effects.claims_holding(None))
        try:
            listed = await asyncio.shield(self._listed)
        except ApiError as exc:
            return f"{message}; the claims that hold its devices could not be listed: {exc}"
        claims = [c for c in listed if c.pools & {(DRIVER, pool) for pool in pools}]
        if not claims:
            return f"{message}; no claim holds its devices now"
        return f"{message}; held by ResourceClaim {', '.join(c.describe() for c in claims[:5])}"


async def write_device_health(effects: Effects, run: RunState) -> None:
    """The kubelet's word on the devices of each changed pod's claims, into its report
    (status.deviceHealth): evidence beside the agent's own."""
    due, run.health_due = run.health_due, set()

    async def write(record: NodeRecord) -> None:
        health = record.device_health
        if health == record.device_health_written:
            return
        status: dict[str, Any] = {StatusKey.DEVICE_HEALTH: [h.as_status() for h in health]}
        if await effects.write_report_status(record, status):
            record.device_health_written = health

    await effects.bounded(write(run.nodes[n]) for n in sorted(due) if n in run.nodes)
