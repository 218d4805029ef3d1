"""A run's next wave of agent pods, launched: the nodes due within spec.maxConcurrent, each pod
given its baselines and its devices (the device plugin's resources or a ResourceClaim); a node
whose GPU sharing lets no pod hold a GPU alone (GpuSharingUnsupported), or whose GPUs both DRA and
the device plugin publish (DevicesPublishedTwice), stays untested, no pod made; a pod the API server
refuses leaves its node waiting (AgentPodRefused) and the creates paced to what the quota admits
(`run.refusals`). `RunDriver.tick` launches a wave once a tick; the decisions are
`run.lifecycle`'s and `run.refusals`', the calls `run.effects`' and `control.devices`'."""

from __future__ import annotations

import itertools
import logging
import time

from gpuval_api import EventReason, Reason
from gpuval_api.crd import GpuValidationSpec
from gpuval_api.gfd import GpuSharing
from gpuval_operator import planning
from gpuval_operator.control.baseline.driver import BaselineDriver
from gpuval_operator.control.devices import device_request
from gpuval_operator.devices import published_twice
from gpuval_operator.kube.client import ApiError
from gpuval_operator.nodes.watch import NodeWatch
from gpuval_operator.run import lifecycle
from gpuval_operator.run.effects import Effects
from gpuval_operator.run.refusals import QUOTA_LAG, Refusal, Refused, refused_event
from gpuval_operator.run.state import NodeRecord, Phase, RunState

log = logging.getLogger(__name__)


class WaveLauncher:
    def __init__(
        self, *, effects: Effects, node_watch: NodeWatch, baseline: BaselineDriver
    ) -> None:
        self.effects, self.node_watch, self.baseline = effects, node_watch, baseline
        self.config = effects.config

    async def launch(self, run: RunState, spec: GpuValidationSpec) -> None:
        """The next wave's agent pods: the nodes due within spec.maxConcurrent, or while the API
        server refuses agent pods, the creates its quota admits (`_paced`)."""
        now = time.time()
        limit = planning.concurrency_limit(spec.max_concurrent, len(run.nodes))
        if run.refused is not None:
            wave = self._paced(
                run, min(limit - run.running(), run.refused.slots(run.live_pods(), now))
            )
        else:
            wave = lifecycle.next_wave(run, limit, now)
        if not wave:
            return
        for record in wave:
            record.phase, record.pod_created = Phase.RUNNING, now
        run.dirty = True
        refused: list[bool] = []

        async def create(record: NodeRecord) -> None:
            if record.reset_due:
                # The previous attempt's verdict must not be read as this one's, and a verdict
                # the operator settled must not keep this attempt's agent from writing.
                record.reset_due = not await self.effects.reset_report(record)
            facts = self.node_watch.nodes.get(record.node)
            # The device plugin's sharing (GFD's labels) says nothing of a claim's devices.
            sharing = facts.sharing if facts is not None and not self.node_watch.dra else None
            if sharing is not None and not sharing.exclusive_possible:
                await self._untestable(run, record, sharing)
                return
            twice = self._published_twice(record.node)
            if twice is not None:
                if run.finish_for(record.node, Reason.DEVICES_PUBLISHED_TWICE, twice):
                    await self.effects.write_report_failure(
                        record, Reason.DEVICES_PUBLISHED_TWICE, twice
                    )
                return
            env = self.baseline.pod_env(run, record.node)
            try:
                request = await device_request(
                    self.effects, self.node_watch, run, record.node, spec
                )
            except ApiError as exc:
                # The claim template refused (RBAC, no DRA API): the cluster's, as a pod's refusal.
                words = exc.body.get("message") if isinstance(exc.body, dict) else None
                refusal: Refusal | None = Refusal.of(
                    exc.status, f"the agent pods' ResourceClaimTemplate: {words or exc}"
                )
            else:
                refusal = await self.effects.create_pod(
                    run, record, spec, sharing, env, request=request
                )
            if refusal is None:
                record.admitted = True
            else:
                refused.append(True)
                await self._refused(run, record, refusal)

        await self.effects.bounded(create(r) for r in wave)
        await self._after_wave(run, refused=bool(refused), now=time.time())

    def _published_twice(self, node: str) -> str | None:
        """With DRA, why the node's device plugin handing out its GPUs too keeps it untested."""
        facts = self.node_watch.nodes.get(node)
        if not self.node_watch.dra or facts is None:
            return None
        return published_twice(node, facts.gpus, self.node_watch.slices.devices(node))

    def _paced(self, run: RunState, slots: int) -> list[NodeRecord]:
        """While the API server refuses agent pods, the creates due (Refused.slots): pending
        nodes' first, then waiting nodes' (each report reset first)."""
        if slots <= 0:
            return []
        wave = list(itertools.islice(run.pending(time.time()), slots))
        for record in run.refused_nodes()[: slots - len(wave)]:
            record.readmit()
            wave.append(record)
        return wave

    async def _after_wave(self, run: RunState, *, refused: bool, now: float) -> None:
        """After a wave of creates while refusals stand: pace to a quota that admits some of
        the run's pods; end the refusal once a create is admitted and none is refused (a quota
        that paces: once no node waits any more); say it once per cause and policy."""
        found = run.refused
        if found is None:
            return
        ended = run.ended_since(time.monotonic() - QUOTA_LAG)
        found.paced(run.live_pods(), refused, now, ended)
        waiting = run.refused_nodes()
        if not refused and (found.admits is None or not (waiting or any(run.pending()))):
            log.info("%s: the API server admits agent pods again", run.validation)
            run.refused, run.dirty = None, True
            return
        run.dirty = True
        key = found.key()
        if refused and key not in run.refusals_said:
            run.refusals_said.add(key)
            counts = run.counts()
            tested = counts["passed"] + counts["failed"] + counts["notRun"]
            text = refused_event(run.run_id, found, len(waiting), run.live_pods(), tested)
            log.warning("%s: %s", run.validation, text)
            await self.effects.event(EventReason.AGENT_PODS_REFUSED, text, warning=True)

    async def _refused(self, run: RunState, record: NodeRecord, refusal: Refusal) -> None:
        """The API server refused the node's agent pod: the cluster's configuration, not the
        node. Waiting (AgentPodRefused), no verdict and no node action, the run's
        AgentPodsRefused condition, and the pod created again later (_paced)."""
        now, namespace = time.time(), self.config.agent_namespace
        if run.refused is None:
            run.refused = Refused.first(refusal, namespace, now)
        else:
            run.refused.again(refusal, now)
        message = refusal.node_message(record.pod, namespace)
        if run.refuse(record.node, message):
            await self.effects.write_report_waiting(record, Reason.AGENT_POD_REFUSED, message)

    async def _untestable(self, run: RunState, record: NodeRecord, sharing: GpuSharing) -> None:
        """A node whose GPU sharing lets no pod hold a GPU alone: NotRun, no pod made."""
        message = (
            f"node {record.node} shares its GPUs with {sharing.strategy} "
            f"({sharing.describe()}), which gives a pod one replica at most: the agent cannot "
            "hold a GPU alone, so no agent pod was made"
        )
        reason = Reason.GPU_SHARING_UNSUPPORTED
        if run.finish_for(record.node, reason, message):
            await self.effects.write_report_failure(record, reason, message)
