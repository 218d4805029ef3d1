"""Driving an active run, one tick at a time: nodes gone, arrivals joining (spec.gating), outcomes
of pods that ended without a report, retries of nodes gpuval could not test (spec.retry), the next
wave of agent pods (gpuval_operator.control.launch), the fabric phase (spec.fabric:
gpuval_operator.control.fabric.driver), node actions for new verdicts (each first against the node's
own history, then within the circuit breaker: gpuval_operator.control.runbreaker), and, once every
node has one, the run's end: burn fingerprints and uniformity compared across the run, the run
against its baselines (spec.baseline: gpuval_operator.control.baseline.driver). While the fabric
phase is under way its node actions run behind the ticks, so neither opening groups nor reading
results waits for them. The decisions are gpuval_operator.run.lifecycle's, the calls
gpuval_operator.run.effects', gpuval_operator.nodes.actor's and
gpuval_operator.control.baseline.driver's; this module sequences them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping

from gpuval_api import EventReason, Reason
from gpuval_api.checks import CheckName
from gpuval_api.crd import GpuValidationSpec, NodeTrigger
from gpuval_api.report import StatusKey
from gpuval_api.training import TrainingRunStatus
from gpuval_operator import cron, names, planning
from gpuval_operator.control.baseline.driver import BaselineDriver
from gpuval_operator.control.devices import ClaimsSeen, write_device_health
from gpuval_operator.control.fabric.driver import FabricDriver
from gpuval_operator.control.launch import WaveLauncher
from gpuval_operator.control.reports import ReportPlanner
from gpuval_operator.control.runbreaker import RunBreaker
from gpuval_operator.fabric.ports import PortPool
from gpuval_operator.nodes.actor import NodeActor
from gpuval_operator.nodes.breaker.operatorwide import OperatorBreaker
from gpuval_operator.nodes.gating import queued_events
from gpuval_operator.nodes.watch import NodeWatch
from gpuval_operator.readmodel.validation import ValidationState
from gpuval_operator.run import lifecycle
from gpuval_operator.run.effects import Effects
from gpuval_operator.run.fingerprints import fingerprint_outliers, training_comparison
from gpuval_operator.run.state import NodeRecord, Phase, RunState
from gpuval_operator.run.uniformity import Outlier, run_outliers

log = logging.getLogger(__name__)

# Node actions for more verdicts than this at once go in slices, the status written before the
# first and, when its interval is due, between them: about 7 s of API calls a slice on the 2-core
# benchmark machine.
ACT_SLICE = 500


async def written_meanwhile(effects: Effects, run: RunState, record: NodeRecord) -> bool:
    """Whether the agent of a pod that ended without a report in sight did write its verdict:
    the report and the pod's end come on two watches, and under load the report's can lag
    the pod's by more than the grace (3,088 of 10,000 stand-ins in the baseline benchmark,
    which leave no termination message). Read from the API server before a verdict is
    written over the agent's; True when the report gave the node its verdict."""
    facts = await effects.read_report(record, run.run_id)
    if facts is None or not facts.completed:  # completed: a verdict is in
        return False
    log.info("%s: %s's report came after its pod ended", run.validation, record.node)
    return run.apply_report(facts)


class RunDriver:
    def __init__(
        self,
        *,
        state: ValidationState,
        effects: Effects,
        node_watch: NodeWatch,
        reports: ReportPlanner,
        ports: PortPool,
        annotations: Callable[[], Mapping[str, str]],
        operator_breaker: OperatorBreaker | None = None,
        baseline: BaselineDriver,
        progress: Callable[[bool], Awaitable[None]],
    ) -> None:
        # Writes the run's status: at once when True, else if due (the status interval).
        self.progress = progress
        self.state, self.effects, self.reports = state, effects, reports
        self.node_watch = node_watch
        self.actor = NodeActor(effects, operator_breaker)
        self.baseline = baseline
        self.breaker = RunBreaker(
            effects=effects,
            actor=self.actor,
            operator_breaker=operator_breaker,
            node_watch=node_watch,
            annotations=annotations,
        )
        self.fabric = FabricDriver(
            effects=effects,
            node_watch=node_watch,
            ports=ports,
            annotations=annotations,
            settled=state.settle_fabric,
            judge=baseline.judge_fabric,
        )
        self.waves = WaveLauncher(effects=effects, node_watch=node_watch, baseline=baseline)
        self.config = effects.config
        # Node actions running behind the ticks while the fabric phase is under way (act_behind).
        self.acting: asyncio.Task[None] | None = None
        # The claims that hold nodes' devices (DevicesClaimed), listed once a tick.
        self.claims = ClaimsSeen(effects, node_watch)

    async def tick(self, run: RunState, spec: GpuValidationSpec) -> bool:
        """One pass over an active run; True once every node has its final verdict."""
        self.node_watch.mark_gone(run)
        if spec.gating is not None:
            await self.join(run, spec, self.node_watch.due_batch(spec.gating, time.time()))
        outcomes = lifecycle.due_outcomes(
            run,
            now=time.time(),
            monotonic=time.monotonic(),
            timeout=spec.node_timeout_seconds,
            grace=self.config.pod_grace_seconds,
            not_ready_grace=self.config.node_not_ready_seconds,
        )
        if outcomes:
            self.claims.forget()
            await self.effects.bounded(self._record(run, o) for o in outcomes)
        if run.health_due:
            await write_device_health(self.effects, run)
        self._retry(run, spec)
        await self.waves.launch(run, spec)
        await self.fabric.tick(run, spec)
        if run.fabric is not None and run.fabric.under_way():
            self.act_behind(run, spec)
        else:
            if self.acting is not None and run.finished:
                await self.progress(True)  # the verdicts in the status before the wait
            await self.acted()
            await self.after_verdicts(run, spec)
        return run.all_done()

    async def join(
        self,
        run: RunState,
        spec: GpuValidationSpec,
        batch: dict[str, NodeTrigger],
        checks: Mapping[str, tuple[str, ...]] | None = None,
    ) -> None:
        """Nodes that joined, rebooted or changed their stack enter the run (reopening it); a
        node repaired (spec.remediation) with only the `checks` given for it."""
        if not batch:
            return
        fresh: list[planning.Candidate] = []
        joined: list[tuple[str, NodeTrigger]] = []
        for name, trigger in sorted(batch.items()):
            node = self.node_watch.nodes.get(name)
            record = run.nodes.get(name)
            if node is None or (record is not None and not record.settled):
                continue
            if record is None:
                gpus = self.node_watch.slices.devices(name).count if self.node_watch.dra else 0
                gpus = gpus or node.gpus
                fresh.append(planning.Candidate(name, gpus, node.resources))
                run.add(
                    name,
                    gpus,
                    names.report_name(run.validation, run.run_id, name),
                    names.pod_name(run.validation, run.run_id, name),
                ).trigger = trigger
            else:
                pod = names.pod_name(run.validation, run.run_id, name, record.attempt + 1)
                record.next_attempt(pod, 0.0, trigger)
            run.nodes[name].checks = (checks or {}).get(name) or None
            joined.append((name, trigger))
        if not joined:
            return
        if run.without_devices:
            run.without_devices = tuple(n for n in run.without_devices if n not in run.nodes)
        run.reopen()
        each, summary = queued_events(joined, run.queued_events, self.config.events_per_run)
        run.queued_events += len(each)
        for message in each:
            await self.effects.event(EventReason.NODE_QUEUED, message)
        if summary is not None:
            await self.effects.event(EventReason.NODES_QUEUED, summary)
        await self.reports.create(run, fresh)
        run.dirty = True

    def _retry(self, run: RunState, spec: GpuValidationSpec) -> None:
        """Nodes gpuval could not test wait for their next attempt; their verdict is not final,
        so no node action follows it. Nodes whose agent pod the API server refused go back to
        their wave, attempt unspent, once no refusal stands (a pod was admitted; or after a
        restart, which knows of none)."""
        retried = set()
        if run.refused is None:
            for record in run.refused_nodes():
                record.readmit()
                retried.add(record.node)
        for record in run.in_phase(Phase.NOT_RUN):
            gone = record.reason is Reason.NODE_GONE_UNTESTED or (
                self.node_watch.synced.is_set() and record.node not in self.node_watch.nodes
            )
            if not gone and lifecycle.retry_wanted(record, spec.retry):
                pod = names.pod_name(run.validation, run.run_id, record.node, record.attempt + 1)
                log.info(
                    "%s: %s not tested (%s); attempt %d in %ds",
                    run.validation,
                    record.node,
                    record.reason,
                    record.attempt + 1,
                    spec.retry.backoff_seconds,
                )
                record.next_attempt(
                    pod, time.time() + spec.retry.backoff_seconds, NodeTrigger.RETRY
                )
                retried.add(record.node)
        if retried:
            run.finished = [n for n in run.finished if n not in retried]
            run.dirty = True

    async def _record(self, run: RunState, outcome: lifecycle.Outcome) -> None:
        """A verdict the agent did not write: record it on the run and in the node's report."""
        reason, message = outcome.reason, outcome.message
        record = run.nodes[outcome.node]
        ended = outcome.status is None and record.terminal_since is not None
        if ended and await written_meanwhile(self.effects, run, record):
            return
        if outcome.check_node and not await self.effects.node_exists(outcome.node):
            gone = lifecycle.node_gone(record, f"was deleted during the run ({message})")
            reason, message = gone.reason, gone.message
        elif reason is Reason.DEVICES_CLAIMED:
            reason, message = await self.claims.explain(outcome.node, message)
        if outcome.delete_pod:
            await self.effects.delete_pod(record)
        if reason is not None and outcome.status is None:
            finished = run.finish_for(outcome.node, reason, message)
        else:
            finished = run.finish_node(outcome.node, outcome.verdict, reason, message)
        if not finished:
            return
        if outcome.status is not None:
            status = {**outcome.status, StatusKey.MESSAGE: message}
            await self.effects.settle_report(record, status)
        elif reason is not None:
            await self.effects.write_report_failure(record, reason, message)

    async def after_verdicts(self, run: RunState, spec: GpuValidationSpec) -> None:
        """Node actions and Events for nodes that got a final verdict since the last step, within
        the circuit breaker and the systemic hold (control.runbreaker)."""
        # Verdicts that arrive while the nodes are being patched are picked up by the next pass,
        # each pass under the systemic counts that include them: a failure that came in while
        # the last pass's patches were in flight must not be gated by counts that never saw it
        # (revisit takes the counts itself).
        while run.finished:
            await self.baseline.on_verdicts(run)  # DriftFromHistory may fail a node first
            self.breaker.prepare(run, spec)
            finished, run.finished = list(dict.fromkeys(run.finished)), []
            run.dirty = True
            try:
                await self._act(run, spec, finished)
            except BaseException:
                # Not all acted on (the API server out of reach past the client's retries, the
                # loop stopped): the next pass takes them again, before what came meanwhile. A
                # node acted on twice has its entry written again, no Event posted again
                # (entries.already_said) and no second slot of the breaker (an action in force).
                run.finished[:0] = finished
                raise
        await self.breaker.revisit(run, spec)

    def act_behind(self, run: RunState, spec: GpuValidationSpec) -> None:
        """Node actions for new verdicts in a task of their own, the tick going on meanwhile (a
        failure of theirs is raised by the next `acted`). While the fabric is under way its
        verdicts settle in thousands (fabric.early): acted on inside a tick, 4,964 of them kept
        the tick busy 50 s at 10,000 nodes, and no group opened meanwhile; in slices of 500 a tick,
        groups opened, but the last results waited 10 to 13 s for the tick acting on the
        backlog once the last groups were open (docs/operator/fabric.md, "How the fabric
        scales")."""
        task = self.acting
        if task is not None and task.done():
            self.acting = None
            task.result()
        if self.acting is None and run.finished:
            self.acting = asyncio.create_task(
                self.after_verdicts(run, spec), name=f"{run.validation}: node actions"
            )

    async def acted(self) -> None:
        """Wait for the node actions running behind the ticks, raising their failure."""
        task, self.acting = self.acting, None
        if task is not None:
            await task

    async def stop_acting(self) -> None:
        """The run's loop ends (superseded, stopped): node actions behind it stop too."""
        task, self.acting = self.acting, None
        if task is None:
            return
        task.cancel()  # nothing, when it is done already
        try:
            await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # this loop is cancelled itself, not only the task it cancelled
        except Exception as exc:  # the run is over for this loop; say what was lost
            log.warning("%s: node actions stopped with the run: %r", task.get_name(), exc)

    async def _act(self, run: RunState, spec: GpuValidationSpec, finished: list[str]) -> None:
        """Node actions for `finished`. Many at once (a fabric settles every node at its end:
        10,000 nodes, a read and a write each when they pass) go in slices: the status shows the
        verdicts before the first slice, then how far it got at most once per status interval."""
        many = len(finished) > ACT_SLICE
        try:
            for start in range(0, len(finished), ACT_SLICE):
                if many:
                    run.acting = (start, len(finished))
                    await self.progress(start == 0)
                await self.effects.bounded(
                    self.actor.act(run, run.nodes[node], spec)
                    for node in finished[start : start + ACT_SLICE]
                )
        finally:
            run.acting, run.dirty = None, True

    async def complete(self, run: RunState, spec: GpuValidationSpec) -> None:
        """Every node has its final verdict: compare the run's burn fingerprints (failing the odd
        ones out) and environments, act on what that changed, and close the run."""
        prints = await self._blame_fingerprints(run, spec.checks.train.loss_tolerance)
        await self.acted()
        await self.after_verdicts(run, spec)
        run.completed_at = time.time()
        run.refused = None  # every node has its verdict: none waits for the cluster
        environments = {
            node: result.environment
            for node, result in self.state.latest.items()
            if node in run.nodes and result.run == run.run_id and result.environment
        }
        run.outliers = run_outliers(environments, spec.expected, prints)
        if spec.schedule is not None:
            run.next_run_at = cron.next_tick(spec.schedule, run.completed_at)
        state = self.state
        state.uniform = None if run.outliers is None else not run.outliers
        state.outliers = len(run.outliers or [])
        state.last_run_completed = run.completed_at
        if not run.failed():
            state.last_success = run.completed_at
        await self.baseline.complete(run)

    async def _blame_fingerprints(self, run: RunState, tolerance: float) -> list[Outlier]:
        """Fail each node whose burn reference differs from its peers' (silent corruption), and
        each whose training losses differ from its stack's majority (or, across stacks, leave
        `tolerance`)."""
        results = {
            node: result
            for node, result in self.state.latest.items()
            if node in run.nodes and result.run == run.run_id
        }
        found = fingerprint_outliers({n: r.fingerprints for n, r in results.items()})
        compared = training_comparison({n: r.training for n, r in results.items()}, tolerance)
        mismatches = compared.mismatches
        before = run.training.undecided if run.training is not None else []
        run.training = TrainingRunStatus.of(compared)
        for undecided in compared.undecided:
            if undecided.message()[:1024] not in before:
                await self.effects.event(
                    EventReason.TRAINING_UNDECIDED, undecided.message(), warning=True
                )
        blamed = [
            (o.node, Reason.BURN_FINGERPRINT_MISMATCH, o.message(), CheckName.BURN) for o in found
        ] + [(m.node, Reason.TRAINING_MISMATCH, m.message(), CheckName.TRAIN) for m in mismatches]
        for node, reason, message, check in blamed:
            if run.overturn(node, reason, message):
                await self.effects.write_report_failure(
                    run.nodes[node], reason, message, check=check
                )
        outliers = [Outlier(o.field, o.node, o.value, o.majority, "majority") for o in found]
        return outliers + [
            Outlier(m.field, m.node, m.digest, m.reference, "majority") for m in mismatches
        ]
