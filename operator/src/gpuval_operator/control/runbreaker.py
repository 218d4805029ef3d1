"""`RunBreaker`: one validation's circuit breaker and systemic hold, carried out around the node
actions of its run.

Each pass it reads the limits (nodeActions.maxNodes as a count of the run's nodes, the
operator-wide limit), a person's release (annotation gpuval.dev/release) and the run's systemic
reasons. A failure's taint and cordon wait while the rest of the run could still make its reason
systemic (`breaker.undecided`), and follow once it cannot; held nodes are tried again while
slots are free or their systemic reason is gone or released; and the hold is said once per run
and cause (Events NodeActionsHeld, SystemicFailure, NodeActionsReleased), each saying the time
and the figures it was posted with. The decisions are gpuval_operator.nodes.breaker.rules's, the
operator-wide count gpuval_operator.nodes.breaker.operatorwide's, the node patches
gpuval_operator.nodes.actor's.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping

from gpuval_api import ConditionReason, ConditionType, EventReason, keys, label_value
from gpuval_api.crd import GpuValidationSpec
from gpuval_api.release import Release
from gpuval_api.remediation import RepairState
from gpuval_operator import planning
from gpuval_operator.nodes.actor import NodeActor
from gpuval_operator.nodes.breaker import rules as breaker
from gpuval_operator.nodes.breaker.operatorwide import OperatorBreaker
from gpuval_operator.nodes.watch import NodeWatch
from gpuval_operator.run.breakerstate import (
    BreakerState,
    as_of,
    held_condition,
    systemic_event,
)
from gpuval_operator.run.effects import Effects
from gpuval_operator.run.state import Phase, RunState

log = logging.getLogger(__name__)


def _acts(spec: GpuValidationSpec) -> bool:
    """The spec takes failing nodes out of service (a taint or a cordon, not a dry run)."""
    actions = spec.node_actions
    return not actions.dry_run and (actions.taint is not None or actions.cordon)


class RunBreaker:
    def __init__(
        self,
        *,
        effects: Effects,
        actor: NodeActor,
        operator_breaker: OperatorBreaker | None,
        node_watch: NodeWatch,
        annotations: Callable[[], Mapping[str, str]],
    ) -> None:
        self.effects, self.actor, self.operator_breaker = effects, actor, operator_breaker
        self.node_watch = node_watch
        self.annotations = annotations

    def _release_text(self) -> str:
        return self.annotations().get(keys.ANNOTATION_RELEASE) or ""

    def prepare(self, run: RunState, spec: GpuValidationSpec) -> None:
        """The limits, the release and the systemic reasons as they stand now."""
        state, actions = run.breaker, spec.node_actions
        state.limit = planning.concurrency_limit(actions.max_nodes, len(run.nodes))
        release = Release.parse(self._release_text())
        state.approved_at = release.at if release is not None else 0.0
        state.released = release is not None and release.covers(run.run_id, run.started_at)
        state.release_repairs = state.released and release is not None and release.repair
        state.repairs = spec.remediation is not None
        failed = [str(r.reason) for r in run.failed()]
        tested = len(failed) + len(run.in_phase(Phase.PASSED))
        untested = sum(1 for r in run.nodes.values() if not r.done)
        fraction, least = actions.systemic_fraction, actions.systemic_min_nodes
        found = breaker.systemic(failed, tested, fraction, least)
        if found != state.systemic:
            state.systemic, run.dirty = found, True
        state.undecided = breaker.undecided(failed, tested, untested, fraction, least)
        if self.operator_breaker is not None:
            counts = self.operator_breaker.counts
            state.operator_limit, state.operator_out_of_service = counts.limit, counts.total
            key = label_value(run.validation)
            state.out_of_service = counts.by_validation.get(key, 0)
            state.counted = self.operator_breaker.counted(key, state.approved_at)
        watched = self.node_watch.nodes if self.node_watch is not None else {}
        state.needs_repair = sum(
            1
            for f in watched.values()
            if f.entry is not None
            and f.entry.repair is not None
            and f.entry.repair.state == RepairState.NEEDS_REPAIR
        )

    async def revisit(self, run: RunState, spec: GpuValidationSpec) -> None:
        """Act on the failures that waited for the run once it can tell, try the held nodes
        again where the hold may have lifted, and say what is held."""
        if self.operator_breaker is not None:
            await self.operator_breaker.recount()
        self.prepare(run, spec)  # the counts as they stand, every verdict so far included
        state = run.breaker
        ready = sorted(
            n
            for n in state.waiting
            if n in run.nodes
            and (state.released or str(run.nodes[n].reason) not in state.undecided)
        )
        if ready and _acts(spec):
            run.dirty = True
            jobs = (self.actor.act(run, run.nodes[n], spec, announce=False) for n in ready)
            await self.effects.bounded(jobs)
        await self._retry(run, spec)
        self.prepare(run, spec)
        await self._announce(run)

    async def _retry(self, run: RunState, spec: GpuValidationSpec) -> None:
        """Held nodes tried again while the limits have room, until they are used or no held
        node is left: a pass's plan counts the slots as last seen, and what its admissions found
        (a node out of service through another validation takes no operator-wide slot; a slot
        taken meanwhile) shapes the next pass. A pass that lets no node go ends it."""
        state = run.breaker
        for _ in range(len(state.held) + 1):  # each pass but the last lets one node go at least
            held = {n: c for n, c in state.held.items() if n in run.nodes}
            if not held or not _acts(spec):
                return
            free, out = breaker.Limits(state.limit, 1 << 30), set[str]()
            if self.operator_breaker is not None:
                key = label_value(run.validation)
                free = breaker.Limits(
                    *self.operator_breaker.free(key, state.approved_at, state.limit)
                )
                out = self.operator_breaker.out(held)
            reasons = {n: str(run.nodes[n].reason) for n in held}
            retry, causes = breaker.to_retry(held, reasons, state.systemic_reasons(), free, out)
            if causes != {n: c for n, c in held.items() if n not in retry}:
                run.dirty = True
            state.held.update(causes)
            if not retry:
                return
            run.dirty = True
            jobs = (self.actor.act(run, run.nodes[n], spec, announce=False) for n in retry)
            await self.effects.bounded(jobs)
            if all(n in state.held for n in retry):
                return  # held again, every one: the limits are used as far as the nodes show

    async def _announce(self, run: RunState) -> None:
        """Events: a release once, each hold cause and systemic reason once per run."""
        state = run.breaker
        release = self._release_text()
        if release and release != state.release_seen:
            state.release_seen = release
            message = (
                f"node actions released ({keys.ANNOTATION_RELEASE}={release}): nodes out of "
                "service through this validation before it no longer count against "
                f"nodeActions.maxNodes, and run {run.run_id}'s systemic hold is "
                f"{'lifted' if state.released else 'not covered (another run)'}"
                + _release_repairs(state)
            )
            await self.effects.event(EventReason.NODE_ACTIONS_RELEASED, message)
            run.dirty = True
        now, total = time.time(), len(run.nodes)
        untested = sum(1 for r in run.nodes.values() if not r.done)
        for found in state.systemic:
            if f"systemic:{found.reason}" not in state.posted:
                state.posted.add(f"systemic:{found.reason}")
                message = systemic_event(found, run.run_id, now, untested, total)
                await self.effects.event(EventReason.SYSTEMIC_FAILURE, message, warning=True)
        new = set(state.causes()) - state.posted
        if new:
            state.posted |= new
            failures = Counter(str(r.reason) for r in run.failed())
            _, _, _, message = held_condition(state, failures, run.validation)
            message += as_of(now, untested, total, ConditionType.NODE_ACTIONS_HELD)
            await self.effects.event(EventReason.NODE_ACTIONS_HELD, message, warning=True)
            log.warning("%s: %s", run.validation, message)

    def poll(self, run: RunState) -> bool:
        """For a validation between runs: read the held nodes back from the nodes once they are
        listed (after a restart), and whether a release waits to be carried out."""
        state = run.breaker
        if not state.restored and self.node_watch.synced.is_set():
            state.restored = True
            for name, facts in self.node_watch.nodes.items():
                entry, record = facts.entry, run.nodes.get(name)
                if (
                    entry is not None
                    and entry.hold is not None
                    and entry.run == run.run_id
                    and record is not None
                    and record.phase is Phase.FAILED
                ):
                    if entry.hold == ConditionReason.AWAITING_RUN:
                        state.waiting.add(name)
                    else:
                        state.held.setdefault(name, entry.hold)
        release = self._release_text()
        return bool(release) and release != state.release_seen


def _release_repairs(state: BreakerState) -> str:
    """What a release says of the repairs of a systemic failure (spec.remediation)."""
    if not state.released or not state.systemic or not state.repairs:
        return ""
    if state.release_repairs:
        return "; repairs of its systemic failure are asked as a person said (--repair)"
    return (
        "; no repair is asked for its systemic failure (the cause is not the nodes; "
        "`kubectl gpuval release --repair` asks for them)"
    )
