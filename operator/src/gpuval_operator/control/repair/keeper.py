"""`RepairKeeper`: one validation's repair loop (spec.remediation) carried out each pass.

It reads each selected node's record from the node watch (the validation's entry on the node),
asks `remediation.machine.decide` for the node's next step and carries it out: a request (the
operator-wide breaker admits the node first; in mode Template the object is made from the template,
labelled and owned, before the node's record says Requested, so a restart finds it and a repeated
create gets 409), the end of a repair (the record first, then the object deleted), NeedsRepair,
a person's repair, a withdrawal; and it hands the nodes to validate again to the run
(`RunDriver.join`, with the checks that failed). Every node write goes through the node actions
(`NodeActor.rewrite`: the node's resourceVersion as precondition); the node as written is kept
in the watch's facts at once, so the next pass decides on it. It keeps status.remediation and the
loop's metrics. The decisions are `remediation.machine`'s, what it reads of the nodes and the run
`control.repair.reading`'s (pure); the calls on the engine's objects `remediation.effects`'.
"""

from __future__ import annotations

import dataclasses
import logging
import time

from gpuval_api import EventReason, keys, label_value
from gpuval_api.checks import CheckName
from gpuval_api.crd import GpuValidationSpec, NodeTrigger, RemediationMode
from gpuval_api.remediation import RepairOutcome, RepairState
from gpuval_operator import names, planning
from gpuval_operator.control.repair import reading
from gpuval_operator.control.repair.objects import RepairObjects, template_kind
from gpuval_operator.control.repair.withdraw import RepairWithdrawals
from gpuval_operator.kube import events
from gpuval_operator.kube.client import ApiError
from gpuval_operator.nodes.actor import NodeActor
from gpuval_operator.nodes.breaker.operatorwide import OperatorBreaker
from gpuval_operator.nodes.entries import NodeEntry
from gpuval_operator.nodes.watch import NodeWatch
from gpuval_operator.readmodel.validation import ValidationState
from gpuval_operator.remediation import machine
from gpuval_operator.remediation.machine import Do, RepairFacts, Settings, Step
from gpuval_operator.remediation.objects import failing_gpus
from gpuval_operator.remediation.record import RepairRecord
from gpuval_operator.remediation.refusals import Refusal, RequestBackoff, refused_condition
from gpuval_operator.remediation.rollup import remediation_status
from gpuval_operator.run.effects import Effects
from gpuval_operator.run.state import RunState

log = logging.getLogger(__name__)

# A request the breaker held is tried again after this (seconds).
HELD_RETRY = 10.0


class RepairKeeper:
    def __init__(
        self,
        *,
        effects: Effects,
        actor: NodeActor,
        node_watch: NodeWatch,
        state: ValidationState,
        operator_breaker: OperatorBreaker | None,
    ) -> None:
        self.effects, self.actor, self.node_watch = effects, actor, node_watch
        self.state, self.operator_breaker = state, operator_breaker
        self.validation = effects.name
        self.objects = RepairObjects(effects.client, effects.name, effects.uid, self._refused)
        # When each node was last handed to a run for its re-validation (epoch seconds).
        self.joined: dict[str, float] = {}
        # Each node's record as last seen, to count the outcomes once (the metrics).
        self.seen: dict[str, RepairRecord | None] = {}
        # Events already posted: (node, request number, what).
        self.said: set[tuple[str, str, str]] = set()
        # Nodes the breaker held at their request: not tried again before this (epoch seconds).
        self.held_until: dict[str, float] = {}
        self.node_uids: dict[str, str] = {}
        # Nodes back in service after a repair, to announce (NodeRepaired).
        self.back_in_service: list[tuple[str, RepairRecord]] = []
        # Requests whose object the API server refused: not tried again before their pause.
        self.backoff = RequestBackoff()
        # Requests withdrawn because the node passed by another path: their objects deleted
        # before the node actions return the node to service.
        self.withdrawals = RepairWithdrawals(self.objects, self.validation, self._say)
        actor.before_withdraw = self.withdrawals.before_pass

    # -- a pass --

    async def reconcile(
        self, run: RunState, spec: GpuValidationSpec
    ) -> tuple[dict[str, NodeTrigger], dict[str, tuple[str, ...]]]:
        """One pass over the loop; the nodes to validate again now and their checks."""
        if spec.node_actions.dry_run or not self.node_watch.synced.is_set():
            return {}, {}
        settings = Settings.of(spec.remediation) if spec.remediation is not None else None
        now = time.time()
        self._observe(reading.records(self.node_watch.nodes))
        candidates = reading.candidates(self.node_watch.nodes)
        if settings is None and not any(
            f.entry is not None and f.entry.repairing for f in candidates.values()
        ):
            self._publish(run, None, now)
            return {}, {}
        asked = any(
            f.entry is not None
            and f.entry.repair is not None
            and f.entry.repair.state == RepairState.REQUESTED
            for f in candidates.values()
        )
        await self.objects.list(spec, asked, now)
        kind = template_kind(spec)
        if self.objects.listed is not None and kind is not None:
            self.backoff.served(kind)
        # A release lets a systemic failure's taint and cordon through, not its repairs.
        systemic = run.breaker.no_repair_reasons()
        batch: dict[str, NodeTrigger] = {}
        checks: dict[str, tuple[str, ...]] = {}
        wanting: set[str] = set()  # the nodes whose step is a request, made or not
        for name in sorted(candidates):
            for _ in range(2):  # a repair that ended is validated again in the same pass
                facts = self.node_watch.nodes.get(name)
                node = reading.repair_facts(facts, run) if facts is not None else None
                if node is None:
                    break
                step = machine.decide(
                    node,
                    settings,
                    now=now,
                    object_end=self.objects.end_of(node.repair),
                    systemic=systemic,
                    joined_at=self.joined.get(name),
                )
                if step.do is Do.REVALIDATE and node.repair is not None:
                    batch[name] = NodeTrigger.REPAIRED
                    checks[name] = node.repair.checks
                    self.joined[name] = now
                    break
                if step.do is Do.NOTHING or (settings is None and step.do is not Do.WITHDRAW):
                    break
                if step.do is Do.REQUEST:
                    wanting.add(name)
                    if self._waits(name, spec, now):
                        break
                if not await self._carry_out(step, node, run, spec, settings=settings, now=now):
                    break
        await self.objects.clean(spec, self.node_watch.nodes)
        self.backoff.keep(wanting, kind)
        self._publish(run, settings, now)
        return batch, checks

    def due(self, spec: GpuValidationSpec) -> bool:
        """Whether a pass has something to do now (the idle wait of a finished run): a step
        decided from the nodes as the watch keeps them, or a request whose object to look at."""
        if spec.remediation is None or spec.node_actions.dry_run:
            return False
        if not self.node_watch.synced.is_set():
            return False
        settings, now = Settings.of(spec.remediation), time.time()
        # What a pass would refuse to ask (a released systemic failure) is not due either.
        run = self.state.run
        systemic = run.breaker.no_repair_reasons() if run is not None else set()
        for facts in reading.candidates(self.node_watch.nodes).values():
            record = facts.entry.repair if facts.entry is not None else None
            if (
                record is not None
                and record.state == RepairState.REQUESTED
                and self.objects.due(spec, now)
            ):
                return True
            node = reading.repair_facts(facts, None)
            if node is not None:
                step = machine.decide(
                    node,
                    settings,
                    now=now,
                    systemic=systemic,
                    joined_at=self.joined.get(facts.name),
                )
                held = step.do is Do.REQUEST and self._waits(facts.name, spec, now)
                if step.do is not Do.NOTHING and not held:
                    return True
        return False

    def _waits(self, node: str, spec: GpuValidationSpec, now: float) -> bool:
        """The node's request waits: held by the breaker, or refused by the API server and its
        pause not over (remediation.refusals)."""
        if self.held_until.get(node, 0.0) > now:
            return True
        kind = template_kind(spec)
        return kind is not None and self.backoff.blocked(node, kind, now)

    # -- the steps --

    async def _carry_out(
        self,
        step: Step,
        node: RepairFacts,
        run: RunState,
        spec: GpuValidationSpec,
        *,
        settings: Settings | None,
        now: float,
    ) -> bool:
        """Carry `step` out; True when the node's record changed (decide again)."""
        record = node.repair
        if step.do is Do.WITHDRAW and record is not None:
            log.info("%s: %s: repair withdrawn (no spec.remediation)", self.validation, node.name)
            written = await self._write(node.name, None)
            if written and record.obj:
                await self.objects.delete(spec, record.obj)
            return False
        if settings is None:
            return False
        if step.do is Do.REQUEST and step.action is not None:
            return await self._request(step, node, run, spec, settings=settings, now=now)
        if step.do is Do.NEEDS_REPAIR and step.action is not None:
            new = machine.needs_repair(node, step.action, settings, now)
            if await self._write(node.name, new):
                await self._say(
                    node.name,
                    new,
                    "needs-repair",
                    EventReason.NODE_NEEDS_REPAIR,
                    reading.needs_repair_text(new, settings, self.validation),
                    warning=True,
                )
            return False
        if step.do is Do.END and record is not None and step.end is not None:
            new = machine.ended(record, step.end, now)
            if not await self._write(node.name, new):
                return False
            if record.obj:
                await self.objects.delete(spec, record.obj)
            self.joined.pop(node.name, None)
            await self._say(
                node.name,
                new,
                "ended",
                EventReason.REPAIR_ENDED,
                f"repair {new.count} ({new.action}) of {node.name} ended "
                f"({step.end}): validated again under load",
            )
            return True
        if step.do is Do.CANCEL and record is not None:
            await self._cancel(node, record, now)
            return False
        if step.do is Do.BY_PERSON and record is not None:
            new = machine.by_person(record, now)
            self.joined.pop(node.name, None)
            if await self._write(node.name, new):
                await self._say(
                    node.name,
                    new,
                    "person",
                    EventReason.REPAIR_ENDED,
                    f"{keys.NODE_LABEL_NEEDS_REPAIR} was removed from {node.name}: "
                    "repaired by hand, validated again under load",
                )
                return True
        return False

    async def _request(
        self,
        step: Step,
        node: RepairFacts,
        run: RunState,
        spec: GpuValidationSpec,
        *,
        settings: Settings,
        now: float,
    ) -> bool:
        """Ask the engine for a repair of `node` (False: nothing more to decide now)."""
        assert step.action is not None
        count = machine.next_count(node.repair)
        entry = self._entry(node.name)
        report = (
            await self.objects.report(names.report_name(self.validation, entry.run, node.name))
            if entry is not None
            else None
        )
        gpus = failing_gpus(report)
        checks = machine.repair_checks(gpus.checks, reading.LOAD_CHECKS, CheckName.STATE.value)
        key = label_value(self.validation)
        if self.operator_breaker is not None:
            limit = planning.concurrency_limit(spec.node_actions.max_nodes, len(run.nodes))
            cause = await self.operator_breaker.admit(
                node.name, key, run.breaker.approved_at, limit
            )
            if cause is not None:
                # Held by the breaker (a node that never entered service: an admitted failure's
                # slot is its taint's): asked once a slot is free.
                self.held_until[node.name] = now + HELD_RETRY
                return False
        obj = ""
        try:
            if settings.mode is RemediationMode.TEMPLATE:
                found = await self.objects.make(
                    spec,
                    node=node.name,
                    repair_id=str(count),
                    reason=str(node.reason),
                    action=str(step.action),
                    gpus=gpus,
                )
                if isinstance(found, Refusal):
                    waiting = self.backoff.refused(node.name, found, now)
                    log.warning(
                        "%s: %s: repair request refused (%d times), tried again in %.0fs: %s",
                        self.validation,
                        node.name,
                        waiting.tries,
                        waiting.pause,
                        found.said(),
                    )
                if not isinstance(found, str):
                    self._unreserve(node.name)
                    return False
                if self.backoff.accepted(node.name, template_kind(spec) or ""):
                    log.info(
                        "%s: %s: repair request made after refusals", self.validation, node.name
                    )
                obj = found
            new = machine.requested(
                node,
                step.action,
                settings,
                now=now,
                checks=checks,
                obj=obj,
                failed_at=gpus.failed_at,
            )
            patched = await self._write(node.name, new, unreserve=True)
        except BaseException:
            self._unreserve(node.name)
            raise
        if not patched:
            return False
        where = f" ({obj})" if obj else f" (condition {keys.NODE_CONDITION_REPAIR_REQUESTED})"
        await self._say(
            node.name,
            new,
            "requested",
            EventReason.REPAIR_REQUESTED,
            f"{node.name}: {node.reason} asks for {step.action}: repair {count} asked{where}",
        )
        return False

    async def _cancel(self, node: RepairFacts, record: RepairRecord, now: float) -> None:
        """Its object was deleted before the repair ended: cancelled, not counted, not validated
        again, not asked again until the node fails anew."""
        new = machine.cancelled(record, now)
        if not await self._write(node.name, new):
            return
        self.joined.pop(node.name, None)
        await self._say(
            node.name,
            new,
            "cancelled",
            EventReason.REPAIR_CANCELLED,
            f"repair {new.count} ({new.action}) of {node.name} was cancelled: its object "
            f"{record.obj} was deleted before it ended. Not counted against maxRepairs and not "
            "asked again until the node fails anew; the node stays out of service",
        )

    # -- writes --

    def _entry(self, node: str) -> NodeEntry | None:
        facts = self.node_watch.nodes.get(node)
        return facts.entry if facts is not None else None

    async def _write(
        self, node: str, record: RepairRecord | None, *, unreserve: bool = False
    ) -> bool:
        """The node's record written into its entry; the node as written kept in the facts."""

        def change(entry: NodeEntry) -> NodeEntry:
            return dataclasses.replace(entry, repair=record)

        try:
            patched = await self.actor.rewrite(self.validation, node, change)
        except ApiError as exc:
            await self._write_refused(node, record, exc)
            return False
        finally:
            if unreserve:
                self._unreserve(node)
        if patched is None:
            return False
        self.node_watch.refresh(patched)
        self.node_uids[node] = str((patched.get("metadata") or {}).get("uid", ""))
        return True

    async def _write_refused(self, node: str, record: RepairRecord | None, exc: ApiError) -> None:
        """The API server refused the node's record (its rights, an admission policy): said on
        the validation and the node, once per request and state; the next pass tries again."""
        state = record.state if record is not None else "none"
        log.warning("%s: %s: repair record (%s) not written: %s", self.validation, node, state, exc)
        message = (
            f"could not write {node}'s repair record ({state}) for {self.validation}: {exc}; the "
            "repair loop tries again each pass (check the operator's rights on nodes and any "
            "admission policy or webhook on node updates)"
        )
        reason = EventReason.REPAIR_RECORD_REFUSED
        await self._say(node, record, f"record-refused:{state}", reason, message, warning=True)

    async def _refused(self, node: str, what: str, message: str) -> None:
        await self._say(node, None, what, EventReason.REPAIR_NOT_REQUESTED, message, warning=True)

    def _unreserve(self, node: str) -> None:
        """End a reservation of the operator-wide breaker: the node now counts as it was written."""
        if self.operator_breaker is not None:
            self.operator_breaker.unreserve(node, label_value(self.validation))

    async def _say(
        self,
        node: str,
        record: RepairRecord | None,
        what: str,
        reason: EventReason,
        message: str,
        *,
        warning: bool = False,
    ) -> None:
        """An Event on the validation and the node, once per node, request and step."""
        key = (node, record.repair_id if record is not None else "", what)
        if key in self.said:
            return
        self.said.add(key)
        await self.effects.event(reason, message, warning=warning)
        involved = {"apiVersion": "v1", "kind": "Node", "name": node}
        uid = self.node_uids.get(node)
        if uid:
            involved["uid"] = uid
        await events.post(self.effects.client, involved, reason, message, warning=warning)

    # -- what the status and the metrics say --

    def _observe(self, records: dict[str, RepairRecord]) -> None:
        """Count each request's outcome once, as the records move (at the start of a pass, on
        what its decisions see, and at its end, on what it wrote)."""
        figures = self.state.repairs
        for name, record in records.items():
            if name in self.seen:
                outcome = machine.outcome_of(self.seen[name], record)
                if outcome is not None:
                    figures.outcomes[outcome.action, outcome.outcome] += 1
                    if outcome.seconds is not None:
                        figures.observe_back(outcome.seconds)
                    if outcome.outcome is RepairOutcome.PASSED and record.back is not None:
                        self._announce_back(name, record)
                if machine.withdraws(self.seen[name], record):
                    entry = self._entry(name)
                    self.withdrawals.seen(name, record, entry.run if entry is not None else "")
            self.seen[name] = record

    def _publish(self, run: RunState, settings: Settings | None, now: float) -> None:
        records = reading.records(self.node_watch.nodes)
        self._observe(records)
        figures = self.state.repairs
        figures.in_progress.clear()
        figures.in_progress.update(r.action for r in records.values() if r.active)
        figures.needs_repair = {
            n: str(r.reason) for n, r in records.items() if r.state == RepairState.NEEDS_REPAIR
        }
        figures.refused = self.backoff.refused_total.copy()
        figures.refused_nodes = self.backoff.nodes_by_kind()
        status = remediation_status(records, now, settings.window) if settings is not None else None
        if status != run.remediation:
            run.remediation, run.dirty = status, True
        refused = refused_condition(self.backoff) if settings is not None else None
        if refused != run.repair_requests:
            run.repair_requests, run.dirty = refused, True

    def _announce_back(self, node: str, record: RepairRecord) -> None:
        key = (node, record.repair_id, "back")
        if key not in self.said:
            self.said.add(key)
            self.back_in_service.append((node, record))

    async def announce(self, spec: GpuValidationSpec) -> None:
        """Events for nodes back in service after a repair (seen by `_publish`), and for the
        requests withdrawn."""
        await self.withdrawals.announce(spec)
        pending, self.back_in_service = self.back_in_service, []
        for node, record in pending:
            seconds = (record.back or 0) - record.failed
            ended = f", ended: {record.ended_by}" if record.ended_by else ""
            message = (
                f"{node} passed its validation under load after repair {record.count} "
                f"({record.action}{ended}) and is back in service, {seconds}s after it failed"
            )
            await self.effects.event(EventReason.NODE_REPAIRED, message)
            involved = {"apiVersion": "v1", "kind": "Node", "name": node}
            await events.post(self.effects.client, involved, EventReason.NODE_REPAIRED, message)
