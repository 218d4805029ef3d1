"""The controller of one GpuValidation: runs, waves of agent pods, verdicts, status.

kopf starts one `ValidationController.run` per GpuValidation (a daemon). It follows the
validation's reports and pods with one list+watch each (`kube.follower.Follower` into
`control.ingest.ChildIngest`) and its nodes with a third (`nodes.watch.NodeWatch`), keeps the run's
state in one `RunState`, and loops about once a second (or at once when something changes):
`control.runstart.RunStarter` starts a run, `control.driver.RunDriver.tick` drives an active
one, `control.fleetstatus.FleetStatus` keeps the proofs' age and the capacity, and the status is
written at most once a second and at once when the run completes (with spec.baseline, once more
after the run learned its baselines: `control.baseline.driver`). What to do is decided by the
pure functions of `run.lifecycle` (and `baseline.judge`); every API call is in `run.effects`,
`nodes.actor` and `control.baseline.driver`.

Restart safety: the run id is written to the status before any child is created, children have
deterministic names (a repeated create gets 409), the annotation gpuval.dev/planned-run records that
every report of the run exists, and on start the controller rebuilds the run from the status, the
reports and the pods.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuval_api import EventReason
from gpuval_api.crd import DeviceSource, GpuValidationSpec, RunTrigger
from gpuval_api.labels import children_selector
from gpuval_operator import cron
from gpuval_operator.config import OperatorConfig
from gpuval_operator.control.baseline.driver import BaselineDriver
from gpuval_operator.control.driver import RunDriver
from gpuval_operator.control.fleetstatus import FleetStatus
from gpuval_operator.control.ingest import ChildIngest
from gpuval_operator.control.repair.keeper import RepairKeeper
from gpuval_operator.control.reports import ReportPlanner
from gpuval_operator.control.runstart import RunStarter
from gpuval_operator.control.statuswriter import StatusWriter
from gpuval_operator.fabric.ports import PortPool
from gpuval_operator.kube.client import ApiError, KubeClient
from gpuval_operator.kube.follower import Follower
from gpuval_operator.nodes.breaker.operatorwide import OperatorBreaker
from gpuval_operator.nodes.watch import NodeWatch
from gpuval_operator.readmodel.registry import Registry
from gpuval_operator.readmodel.validation import ValidationState
from gpuval_operator.run import lifecycle, rollup
from gpuval_operator.run.effects import REPORTS_PATH, Effects
from gpuval_operator.run.lifecycle import Decision, RunFacts, Step
from gpuval_operator.run.state import RunState
from gpuval_operator.spec import parse_spec

log = logging.getLogger(__name__)
# A run's loop rests this many times a tick's own time before the next (until_next_tick):
# it ticks at most a quarter of the time.
TICK_REST = 3.0


async def until_next_tick(
    wake: asyncio.Event,
    busy: float,
    interval: float,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> None:
    """After a tick that took `busy` seconds: a rest of TICK_REST times that (at most
    `interval`), then until `wake` is set (by a child that changed since the tick began: the
    loop clears it before each tick) or `interval` is over. A tick walks every node and group
    of the run; at 10,000 nodes a busy fabric changes children many times a second, and ticking
    on each change kept this process busy on cores the cluster needs. The rest bounds the loop's
    share of the time whatever the fleet size; a small fleet's ticks (milliseconds) rest for
    milliseconds."""
    rest = min(interval, busy * TICK_REST)
    await sleep(rest)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(wake.wait(), timeout=max(0.0, interval - rest))


@dataclass(slots=True)
class Context:
    client: KubeClient
    config: OperatorConfig
    registry: Registry
    # The fabric groups' rendezvous ports, unique across this operator's validations.
    ports: PortPool = field(default_factory=PortPool)
    # The nodes gpuval holds out of service, against the operator-wide limit (None: no limit).
    operator_breaker: OperatorBreaker | None = None
    # The validations whose loop runs now: a stopping leader gives its Lease up only once none
    # does (main.cleanup).
    running: set[str] = field(default_factory=set)


class SupersededError(Exception):
    """The spec changed (or the object went away) while a run was going on."""


class ValidationController:
    def __init__(
        self,
        ctx: Context,
        *,
        name: str,
        uid: str,
        body: Mapping[str, Any],
        stopped: Callable[[], bool],
    ) -> None:
        self.config = ctx.config
        self.name = name
        self.body = body  # kopf's live view: metadata.generation and spec follow the object
        self.stopped = stopped
        self.state = ctx.registry.setdefault(name, ValidationState(name))
        self.ingest = ChildIngest(self.state, per_gpu=ctx.config.metrics_per_gpu)
        self.effects = Effects(ctx.client, ctx.config, name=name, uid=uid)
        self.status = StatusWriter(
            self.effects, ctx.config.status_interval_seconds, self._status().get("conditions") or []
        )
        self._followers: list[asyncio.Task[None]] = []
        self.node_watch = NodeWatch(ctx.client, name, self.ingest.wake.set)
        self.fleet = FleetStatus(state=self.state, status=self.status, node_watch=self.node_watch)
        self.baseline = BaselineDriver(
            state=self.state, effects=self.effects, node_watch=self.node_watch
        )
        self.reports = ReportPlanner(self.effects, self.ingest.wake.set, self.baseline.history_of)
        self.ports = ctx.ports
        self.running = ctx.running
        self.driver = RunDriver(
            state=self.state,
            effects=self.effects,
            node_watch=self.node_watch,
            reports=self.reports,
            ports=ctx.ports,
            annotations=self._annotations,
            operator_breaker=ctx.operator_breaker,
            baseline=self.baseline,
            progress=self._write_status,
        )
        self.repairs = RepairKeeper(
            effects=self.effects,
            actor=self.driver.actor,
            node_watch=self.node_watch,
            state=self.state,
            operator_breaker=ctx.operator_breaker,
        )
        self.starter = RunStarter(
            name=name,
            state=self.state,
            effects=self.effects,
            node_watch=self.node_watch,
            baseline=self.baseline,
            reports=self.reports,
            fleet=self.fleet,
            status=self._status,
            generation=self.generation,
            write_status=self._write_status,
            mark_invalid=self._mark_invalid,
        )

    def _status(self) -> dict[str, Any]:
        return dict(self.body.get("status") or {})

    def _annotations(self) -> dict[str, str]:
        return dict((self.body.get("metadata") or {}).get("annotations") or {})

    def generation(self) -> int:
        return int((self.body.get("metadata") or {}).get("generation") or 1)

    # -- waiting --

    def wake(self) -> None:
        """Ends the current wait at once: the daemon was told to stop (its loops then end)."""
        self.ingest.wake.set()

    async def _sleep(self, seconds: float) -> None:
        """Sleep until `seconds` pass, a child changes, or the daemon is told to stop."""
        self.ingest.wake.clear()
        if self.stopped():
            return  # told to stop just before: its wake is the one cleared above
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.ingest.wake.wait(), timeout=max(0.0, seconds))

    async def _wait(self, until: Callable[[], bool], poll: float = 1.0) -> None:
        while not self.stopped() and not until():
            await self._sleep(poll)

    # -- main loop --

    def _start_followers(self) -> tuple[Follower, Follower]:
        client, sel, ing = self.effects.client, self.effects.selector, self.ingest
        reports = Follower(
            client,
            REPORTS_PATH,
            sel,
            ing.on_reports_page,
            ing.on_report_event,
            name=f"{self.name}/reports",
        )
        pods = Follower(
            client,
            self.effects.pods_path,
            sel,
            ing.on_pods_page,
            ing.on_pod_event,
            name=f"{self.name}/pods",
        )
        self._followers = [
            asyncio.create_task(reports.run(), name=f"{self.name}-reports"),
            asyncio.create_task(pods.run(), name=f"{self.name}-pods"),
        ]
        return reports, pods

    async def run(self) -> None:
        self.running.add(self.name)
        try:
            await self._run()
        finally:
            self.running.discard(self.name)

    async def _run(self) -> None:
        spec, _ = parse_spec(self.body.get("spec"))
        # The reports listed at start carry each node's history: keep it from the first page.
        self.state.keeps_history = spec is not None and spec.baseline is not None
        reports, pods = self._start_followers()
        try:
            await self._wait(reports.synced.is_set, 0.2)
            run = self._resume()
            if run is not None:
                await self._catch_up(run, pods)
            while not self.stopped():
                try:
                    await self._step()
                except SupersededError:
                    continue
                except ApiError as exc:
                    log.warning("%s: API error: %s; retrying", self.name, exc)
                    await self._sleep(5)
                except Exception:
                    # Whatever one object does, the others' daemons and this one's next try go on.
                    log.exception("%s: unexpected error; retrying in 10s", self.name)
                    await self._sleep(10)
        finally:
            self.reports.cancel()
            self.node_watch.stop()
            for task in self._followers:
                task.cancel()
            await asyncio.gather(*self._followers, return_exceptions=True)

    async def _catch_up(self, run: RunState, pods: Follower) -> None:
        """The followers listed before the run existed: apply its reports, then its pods, again."""
        selector = children_selector(self.name, run.run_id)
        async for items, _, _ in self.effects.client.pages(REPORTS_PATH, selector):
            for obj in items:
                self.ingest.on_report(obj)
        if run.completed_at is not None:
            recorded = self._status().get("nodes") or {}
            if run.all_done() and run.counts() != recorded:
                # A verdict was written over while no operator ran: close the run again on the
                # reports as they are, its node actions included (they change only what differs).
                log.info("%s: run %s's reports differ from its status", self.name, run.run_id)
                run.reopen()
            else:
                run.finished.clear()
            return
        await self._wait(pods.synced.is_set, 0.2)
        first = True
        async for items, _, last in self.effects.client.pages(
            self.effects.pods_path, self.effects.selector
        ):
            self.ingest.on_pods_page(items, first, last)
            first = False

    def _resume(self) -> RunState | None:
        """The run recorded in the status, rebuilt (its nodes come from its reports; its fabric
        phase, when going on, from its reports and pods)."""
        if self.state.run is None:
            spec, _ = parse_spec(self.body.get("spec"))
            fabric = spec is not None and spec.fabric is not None
            run = self.state.run = rollup.read_run(self.name, self._status(), fabric=fabric)
            if run is not None:
                run.gating = spec is not None and spec.gating is not None
                if spec is not None:
                    run.note_checks(spec.checks)
                self.state.restore(self._status())
                log.info("%s: resuming run %s", self.name, run.run_id)
        return self.state.run

    def _decide(self, spec: GpuValidationSpec | None) -> Decision:
        run = self.state.run
        facts = None if run is None else RunFacts(run.generation, run.completed_at is not None)
        arrivals = False
        if spec is not None and spec.gating is not None:
            self.node_watch.look_for_arrivals(run, spec.gating, time.time())
            due = self.node_watch.next_batch_at(spec.gating)
            arrivals = due is not None and due <= time.time()
        if spec is not None:
            self.fleet.count_capacity(spec)
        return lifecycle.decide(
            valid=spec is not None,
            generation=self.generation(),
            run=facts,
            scheduled=spec is not None and spec.schedule is not None,
            next_run_at=None if run is None else run.next_run_at,
            now=time.time(),
            arrivals=arrivals,
            proof_due_at=None if spec is None else self.fleet.proof_due_at(spec),
        )

    def _follow_nodes(self, spec: GpuValidationSpec) -> None:
        self.node_watch.follow(
            spec.node_selector.to_query() if spec.node_selector else "",
            spec.fabric.topology_key if spec.fabric is not None else None,
            dra=spec.agent.devices is DeviceSource.DRA,
        )

    async def _step(self) -> None:
        generation = self.generation()
        spec, errors = parse_spec(self.body.get("spec"))
        decision = self._decide(None if errors else spec)

        def changed() -> bool:
            return self.generation() != generation

        if decision.supersede and self.state.run is not None:
            await self._supersede(self.state.run)
        if decision.step is Step.INVALID or spec is None:
            await self._mark_invalid(errors, generation)
            await self._wait(changed)
            return
        self.state.invalid = False
        self._follow_nodes(spec)
        run = self.state.run
        if run is not None and run.completed_at is not None and self.driver.breaker.poll(run):
            # A person released the held node actions of a finished run: act on them now.
            await self.driver.after_verdicts(run, spec)
            await self._write_status(force=True)
        if run is not None and run.baseline is None and spec.baseline is not None:
            # Resumed after a restart: what it judges against, and its recorded status.baseline.
            await self.baseline.prepare(run, spec.baseline, self._status().get("baseline"))
        if run is not None and run.completed_at is not None and decision.step is Step.WAIT:
            await self._repair_pass(run, spec)
            if run.completed_at is None:
                return  # repaired nodes joined the finished run: it executes from the next step
            await self.status.soon(run)  # status.remediation, once per status interval at most
        match decision.step:
            case Step.EXECUTE if run is not None:
                await self._execute(run, spec)
            case Step.RESTART if run is not None:
                await self._supersede(run)
                await self.starter.start(spec, decision.trigger or RunTrigger.SPEC_CHANGED)
            case Step.START:
                await self.starter.start(spec, decision.trigger or RunTrigger.CREATED)
            case Step.EXTEND if run is not None and spec.gating is not None:
                batch = self.node_watch.due_batch(spec.gating, time.time())
                await self.driver.join(run, spec, batch)
            case Step.PLAN_TICK if run is not None:
                completed = run.completed_at or time.time()
                run.next_run_at = cron.next_tick(spec.schedule or "", completed)
                await self._write_status(force=True)
            case _:
                until = decision.until
                gating = spec.gating

                def arrived() -> bool:
                    if gating is None:
                        return False
                    self.node_watch.look_for_arrivals(self.state.run, gating, time.time())
                    due = self.node_watch.next_batch_at(gating)
                    return due is not None and due <= time.time()

                def reopened() -> bool:
                    # A report's verdict written over reopens a completed run (RunState.revise).
                    current = self.state.run
                    return current is not None and current.completed_at is None

                def released() -> bool:
                    current = self.state.run
                    return current is not None and self.driver.breaker.poll(current)

                def proof_sooner() -> bool:
                    # A node joined without a proof, or another validation's failure voided one.
                    due = self.fleet.proof_due_at(spec)
                    return due is not None and (until is None or due < until)

                await self._wait(
                    lambda: (
                        changed()
                        or arrived()
                        or reopened()
                        or released()
                        or self.repairs.due(spec)
                        or (until is not None and time.time() >= until)
                        or proof_sooner()
                        or self.fleet.count_capacity(spec)
                    )
                )

    # -- invalid spec --

    async def _mark_invalid(self, errors: list[str], generation: int) -> None:
        self.state.invalid = True
        if self.state.invalid_generation == generation:
            return
        self.state.invalid_generation = generation
        await self.status.invalid(errors, generation)
        await self.effects.event(EventReason.INVALID_SPEC, "; ".join(errors), warning=True)
        log.warning("%s: invalid spec: %s", self.name, "; ".join(errors))

    # -- runs --

    async def _supersede(self, run: RunState) -> None:
        log.info("%s: run %s superseded by a spec change", self.name, run.run_id)
        self.reports.cancel()
        for group in run.fabric.groups.values() if run.fabric is not None else ():
            self.ports.release(group.port)
        await self.effects.delete_run(run)
        self.state.run_ids.discard(run.run_id)
        self.state.run = None

    async def _execute(self, run: RunState, spec: GpuValidationSpec) -> None:
        try:
            await self._ticks(run, spec)
        finally:
            await self.driver.stop_acting()  # node actions behind the ticks end with them

    async def _ticks(self, run: RunState, spec: GpuValidationSpec) -> None:
        await self.reports.ensure(run, spec, self._annotations())
        while not self.stopped():
            if self.generation() != run.generation:
                raise SupersededError
            began = time.monotonic()
            self.ingest.wake.clear()  # what changes from here on wakes the next tick
            if spec.gating is not None:
                self.node_watch.look_for_arrivals(run, spec.gating, time.time())
            await self._repair_pass(run, spec)
            if await self.driver.tick(run, spec):
                await self.driver.complete(run, spec)
                await self._completed(run)
                return
            await self._write_status()
            busy = time.monotonic() - began
            await until_next_tick(self.ingest.wake, busy, self.config.status_interval_seconds)

    async def _completed(self, run: RunState) -> None:
        await self._write_status(force=True)
        summary = rollup.run_summary(run, run.outliers)
        log.info("%s: %s", self.name, summary)
        # Learning reads every report of the run again: after the final status, not before it.
        if await self.baseline.learn(run):
            await self._write_status(force=True)
        budget = self.config.events_per_run
        if not rollup.announce_completion(run, budget):
            return
        run.announced, run.announcements = True, run.announcements + 1
        if run.announcements == budget:
            summary += "; later ends of this run are not announced (GPUVAL_EVENTS_PER_RUN)"
        await self.effects.event(
            EventReason.RUN_COMPLETED, summary, warning=bool(run.failed() or run.outliers)
        )

    # -- the repair loop --

    async def _repair_pass(self, run: RunState, spec: GpuValidationSpec) -> None:
        """spec.remediation: one pass of the repair loop; the nodes whose repair ended join the
        run at once, to be validated again under load with the checks that failed."""
        if spec.remediation is not None:
            # The systemic reasons as they stand (after a restart they are known only once the
            # breaker has looked at the run): a systemic failure asks for no repair.
            self.driver.breaker.prepare(run, spec)
        batch, checks = await self.repairs.reconcile(run, spec)
        if batch:
            await self.driver.join(run, spec, batch, checks)
        await self.repairs.announce(spec)

    # -- status --

    async def _write_status(self, force: bool = False) -> None:
        """Throttled to one write per status interval unless `force` (run start and end)."""
        if self.state.run is not None:
            await self.status.run(self.state.run, force=force)
