"""Driving a run's fabric phase (spec.fabric), one tick at a time: plan the groups once every node
has its local verdict, open groups within the concurrency limit (every pod of a group at once; with
spec.fabric.queue as one Kueue pod group), record what agents could not, and hand the groups'
results to control.fabric.settling, which gives each node awaiting the fabric its final verdict:
early where no later group can change it, else once every group has its results. The decisions are
fabric.plan's and fabric.lifecycle's; the calls are gpuval_operator.run.effects'.
docs/operator/fabric.md, "The fabric phase".
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Coroutine, Mapping
from datetime import UTC, datetime
from typing import Any

from gpuval_api import EventReason, Reason, Verdict, keys
from gpuval_api.crd import GpuValidationSpec
from gpuval_api.fabric import (
    FABRIC_CHECK,
    FabricKey,
    FabricSpec,
    build_planned_fabric_status,
)
from gpuval_api.report import StatusKey, build_operator_failure_status
from gpuval_operator import names
from gpuval_operator.control.devices import device_request
from gpuval_operator.control.fabric.settling import FabricSettling
from gpuval_operator.fabric import lifecycle
from gpuval_operator.fabric.facts import FabricFacts
from gpuval_operator.fabric.plan import (
    GroupPlan,
    cross_groups,
    domain_groups,
    pod_deadline,
    rebuilt_groups,
    representatives,
)
from gpuval_operator.fabric.pods import build_fabric_pod, fabric_config
from gpuval_operator.fabric.ports import PortPool
from gpuval_operator.fabric.rollup import group_waits
from gpuval_operator.fabric.state import FabricState, Group, Member
from gpuval_operator.fabric.verdicts import (
    Classification,
)
from gpuval_operator.nodes.watch import NodeWatch
from gpuval_operator.planning import concurrency_limit
from gpuval_operator.run.effects import Effects
from gpuval_operator.run.state import RunState

log = logging.getLogger(__name__)


def _planned_mark(run: RunState, annotations: Mapping[str, str]) -> str | None:
    mark = annotations.get(keys.ANNOTATION_FABRIC_PLANNED, "")
    return mark if mark in (run.run_id, run.run_id + keys.FABRIC_CROSS_SUFFIX) else None


async def written_meanwhile(effects: Effects, run: RunState, group: str, member: Member) -> bool:
    """Whether the member's agent did write its result in `group`: the report and the pod's end
    come on two watches, and under load the report's lagged the pod's by more than the grace.
    Written over unread, an agent's result became PodFailed ("ended without a fabric verdict"):
    64 passing nodes at 10,000, 19 of them after their verdict had been settled from that very
    result as it came in behind the operator's write. Read from the API server before an
    outcome is written; True when the report had the result (applied to the run)."""
    facts = await effects.read_report(run.nodes[member.node], run.run_id)
    if facts is None:
        return False
    mine = facts.fabric
    if mine is None or mine.verdict is None or not mine.by_agent:
        return False
    if (mine.group, mine.rank) != (group, member.rank):
        return False
    log.info(
        "%s: %s's fabric result in %s came after its pod ended", run.validation, member.node, group
    )
    run.apply_report(facts)
    return True


class FabricDriver:
    def __init__(
        self,
        *,
        effects: Effects,
        node_watch: NodeWatch,
        ports: PortPool,
        annotations: Callable[[], Mapping[str, str]],
        settled: Callable[[str, str, FabricFacts], None],
        judge: Callable[[RunState, Classification], None] | None = None,
    ) -> None:
        self.effects, self.node_watch, self.ports = effects, node_watch, ports
        self.annotations = annotations
        self.settling = FabricSettling(
            effects=effects, node_watch=node_watch, settled=settled, judge=judge
        )

    async def tick(self, run: RunState, spec: GpuValidationSpec) -> None:
        fabric, wanted = run.fabric, spec.fabric
        if fabric is None or wanted is None:
            return
        if not fabric.planned and not await self._plan(run, fabric, wanted):
            return
        if not fabric.cross_planned:
            await self._plan_cross(run, fabric, wanted)
        for group in fabric.groups.values():
            if group.port is not None:
                (self.ports.release if fabric.done(group) else self.ports.claim)(group.port)
        await self._record(run, fabric, spec)
        await self._open(run, fabric, spec)
        await self._launch(run, fabric, spec)
        waits = group_waits(fabric, fabric_config(spec))
        if waits != fabric.waits:
            fabric.waits, run.dirty = waits, True
        if not fabric.classified:
            await self.settling.early(run, fabric, wanted)
        if not fabric.classified and fabric.all_done() and not self.settling.stopping(fabric):
            await self.settling.classify(run, fabric, wanted)
        for record in run.nodes.values():
            if record.awaiting_fabric and record.node not in fabric.groups_of:
                # Passed after the groups were planned (gating, a retry): local checks only.
                run.settle_fabric(record.node, Verdict.PASSED, None, record.message)

    # -- planning --

    def _namer(self, run: RunState) -> Callable[[str, int], str]:
        return lambda group, rank: names.fabric_pod_name(run.validation, run.run_id, group, rank)

    def _rebuild(self, run: RunState, fabric: FabricState, wanted: FabricSpec, mark: str) -> None:
        """After a restart: the groups as the reports' status.fabric name them."""
        found = fabric.planned_groups()
        keyed = wanted.topology_key is not None
        domains = self.node_watch.domains(sorted({n for nodes in found.values() for n in nodes}))
        plans = rebuilt_groups(found, domains if keyed else None)
        fabric.add_groups(plans, self._namer(run), time.monotonic(), time.time())
        fabric.planned = True
        fabric.cross_planned = not keyed or mark.endswith(keys.FABRIC_CROSS_SUFFIX)
        fabric.started_at = fabric.started_at or time.time()
        log.info("%s: fabric of run %s resumed: %d groups", run.validation, run.run_id, len(plans))

    async def _write_plans(self, run: RunState, plans: list[GroupPlan]) -> bool:
        """Each member's group into its report (status.fabric) before any pod: the plan a
        restarted operator reads back. False when a write was refused (tried again next tick)."""
        written: list[bool] = []

        async def one(plan: GroupPlan, node: str) -> None:
            body = build_planned_fabric_status(plan.name, plan.nodes, node)
            record = run.nodes[node]
            written.append(await self.effects.write_report_status(record, {StatusKey.FABRIC: body}))

        await self.effects.bounded(one(p, n) for p in plans for n in p.nodes)
        return all(written)

    async def _plan(self, run: RunState, fabric: FabricState, wanted: FabricSpec) -> bool:
        mark = _planned_mark(run, self.annotations())
        if mark is not None:
            self._rebuild(run, fabric, wanted, mark)
            return True
        keyed = wanted.topology_key is not None
        if not run.local_verdicts_in() or (keyed and not self.node_watch.synced.is_set()):
            return False
        members = sorted(r.node for r in run.nodes.values() if r.awaiting_fabric)
        domains = self.node_watch.domains(members) if keyed else None
        plans = domain_groups(members, wanted.group_size, domains)
        mark = run.run_id if keyed else run.run_id + keys.FABRIC_CROSS_SUFFIX
        if not await self._write_plans(run, plans):
            return False
        if not await self.effects.annotate(keys.ANNOTATION_FABRIC_PLANNED, mark):
            return False
        fabric.add_groups(plans, self._namer(run), time.monotonic(), time.time())
        fabric.planned, fabric.cross_planned = True, not keyed
        fabric.started_at = time.time()
        run.dirty = True
        text = (
            f"fabric of run {run.run_id}: {len([p for p in plans if len(p.nodes) > 1])} groups "
            f"of up to {wanted.group_size} among {len(members)} nodes that passed locally"
        )
        await self.effects.event(EventReason.FABRIC_STARTED, text)
        log.info("%s: %s", run.validation, text)
        return True

    async def _plan_cross(self, run: RunState, fabric: FabricState, wanted: FabricSpec) -> None:
        inside = [g for g in fabric.groups.values() if not g.plan.cross]
        if not all(fabric.done(g) for g in inside):
            return
        passed = {
            m.node
            for g in inside
            for m in g.members
            if (found := fabric.result(g, m)) is not None and found.verdict is Verdict.PASSED
        }
        reps = representatives([g.plan for g in inside], passed)
        plans = cross_groups(reps, wanted.group_size)
        if not await self._write_plans(run, plans):
            return
        mark = run.run_id + keys.FABRIC_CROSS_SUFFIX
        if not await self.effects.annotate(keys.ANNOTATION_FABRIC_PLANNED, mark):
            return
        fabric.add_groups(plans, self._namer(run), time.monotonic(), time.time())
        fabric.cross_planned = True
        run.dirty = True
        log.info("%s: %d cross-domain fabric groups of %s", run.validation, len(plans), reps)

    # -- groups --

    async def _record(self, run: RunState, fabric: FabricState, spec: GpuValidationSpec) -> None:
        """Results the agents could not write: into the reports first, then pods deleted. Each
        member's at once with the others' (at the effects' width): one after the other, the
        hundreds that came due together under load (a report read each, as `written_meanwhile`
        says) kept a tick of a 10,000-node run busy for minutes, and no group opened meanwhile."""
        gone = self.node_watch.unavailable(
            fabric.groups_of, time.time(), self.effects.config.node_not_ready_seconds
        )
        outcomes = lifecycle.due_outcomes(
            fabric,
            fabric_config(spec),
            now=time.time(),
            monotonic=time.monotonic(),
            grace=self.effects.config.pod_grace_seconds,
            gone=gone,
        )
        if outcomes:
            await self.effects.bounded(self._record_one(run, fabric, o) for o in outcomes)
            run.dirty = True

    async def _record_one(
        self, run: RunState, fabric: FabricState, outcome: lifecycle.MemberOutcome
    ) -> None:
        member = fabric.groups[outcome.group].members[outcome.rank]
        if await written_meanwhile(self.effects, run, outcome.group, member):
            return
        member.recorded = outcome.result
        member.never_started = member.never_started or outcome.never_started
        status: dict[str, Any] = {StatusKey.FABRIC: outcome.status}
        if outcome.never_started:
            message = str(outcome.status.get(FabricKey.MESSAGE) or "")
            status |= build_operator_failure_status(
                Reason.FABRIC_GANG_NOT_FORMED, message, None, datetime.now(UTC), FABRIC_CHECK
            )
        await self.effects.write_report_status(run.nodes[member.node], status)
        if outcome.delete_pod:
            member.deleted_at = time.monotonic()
            await self.effects.delete_pod_named(member.pod)

    async def _pod(
        self, run: RunState, spec: GpuValidationSpec, group: Group, rank: int
    ) -> dict[str, Any]:
        assert group.port is not None and group.opened_at is not None
        node = group.plan.nodes[rank]
        request = await device_request(self.effects, self.node_watch, run, node, spec)
        return build_fabric_pod(
            validation=self.effects.name,
            uid=self.effects.uid,
            run=run.run_id,
            group=group.name,
            nodes=group.plan.nodes,
            rank=rank,
            gpus=run.nodes[node].gpus,
            port=group.port,
            request=request,
            spec=spec,
            config=self.effects.config,
            deadline=pod_deadline(fabric_config(spec), group.opened_at, group.size),
        )

    async def _create(
        self, run: RunState, spec: GpuValidationSpec, group: Group, member: Member
    ) -> None:
        member.requested = True
        refused = await self.effects.create_fabric_pod(
            await self._pod(run, spec, group, member.rank)
        )
        if refused is not None:
            member.refused = refused
            log.warning("%s: %s", run.validation, refused)

    async def _open(self, run: RunState, fabric: FabricState, spec: GpuValidationSpec) -> None:
        limit = concurrency_limit(spec.max_concurrent, len(run.nodes))
        made: list[Coroutine[Any, Any, None]] = []
        for group in lifecycle.groups_to_open(fabric, limit):
            if group.plan.cross and not fabric.cross_planned:
                # Read back from a plan a restart interrupted: it opens once it is marked whole.
                continue
            group.port = group.port or self.ports.take()
            group.opened_at = time.time()
            # Every pod at once (the others read rank 0's IP themselves): one scheduling to wait
            # for, not two; a Kueue pod group must be submitted whole, or Kueue never admits it.
            made += [self._create(run, spec, group, m) for m in group.members]
            run.dirty = True
        # Every opening group's pods at once (bounded): a round at 10,000 nodes opens hundreds.
        await self.effects.bounded(made)

    async def _launch(self, run: RunState, fabric: FabricState, spec: GpuValidationSpec) -> None:
        """The pods of opened groups that are still to make: those a crash left out."""
        made: list[Coroutine[Any, Any, None]] = []
        for group in lifecycle.groups_to_launch(fabric):
            if group.port is None:
                continue
            waiting = [m for m in group.members if not fabric.created(m) and not m.refused]
            made += [self._create(run, spec, group, m) for m in waiting]
            run.dirty = True
        await self.effects.bounded(made)
