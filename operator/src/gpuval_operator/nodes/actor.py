"""Node actions: a validation's verdict on a node, written into its entry on the node (one per
validation: gpuval_operator.nodes.entries), and what follows for its labels, taint, cordon and
GpuValidated condition; with nodeActions.dryRun, nothing is written and the changes are kept in
the run (RunState.dry_run) for the status and Events. Also forgetting a deleted
validation's entries.

Before a failing node's taint or cordon, the circuit breaker (gpuval_operator.nodes.breaker.rules)
says whether it may be taken out of service: the operator-wide breaker admits and reserves it, or
the entry is written with the cause it is held for (its label and condition still are).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from gpuval_api import ConditionReason, EventReason, Verdict, label_value
from gpuval_api.crd import GpuValidationSpec
from gpuval_operator.kube import events
from gpuval_operator.kube.client import ApiError, ResourceExpiredError, q
from gpuval_operator.nodes.breaker.operatorwide import OperatorBreaker
from gpuval_operator.nodes.breaker.rules import never_in_service
from gpuval_operator.nodes.entries import (
    NodeEntry,
    NodePlan,
    already_said,
    entries,
    entry_key,
    next_entry,
    plan_node,
)
from gpuval_operator.nodes.facts import stack_of
from gpuval_operator.remediation.machine import after_verdict, withdraws_on
from gpuval_operator.remediation.record import RepairRecord
from gpuval_operator.run.effects import NODES_PATH, Effects
from gpuval_operator.run.state import NodeRecord, Phase, RunState
from gpuval_operator.timestamps import rfc3339

log = logging.getLogger(__name__)

STRATEGIC_MERGE = "application/strategic-merge-patch+json"

# Called before a pass returns a node whose repair is still asked (the repair loop withdraws it).
BeforeWithdraw = Callable[[str, RepairRecord, GpuValidationSpec], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Gate:
    """The breaker's word on one node action: the cause its taint and cordon are held for, since
    when they are in force, and whether the operator-wide breaker reserved a slot for them."""

    hold: str | None = None
    since: int | None = None
    reserved: bool = False


class NodeActor:
    def __init__(self, effects: Effects, operator_breaker: OperatorBreaker | None = None) -> None:
        self.effects = effects
        self.client = effects.client
        self.operator_breaker = operator_breaker
        # Set by the repair loop (control.repair.withdraw): its request's object deleted before
        # the node that passed returns to service.
        self.before_withdraw: BeforeWithdraw | None = None

    async def act(
        self, run: RunState, record: NodeRecord, spec: GpuValidationSpec, *, announce: bool = True
    ) -> None:
        """Bring the node to its verdict (or say what would be done); post Events unless
        `announce` is off (a held node acted on later: its verdict was announced)."""
        gate = Gate()
        for _ in range(3):
            node = await self.client.get_or_none(f"{NODES_PATH}/{q(record.node)}")
            if node is None:
                return
            info = (node.get("status") or {}).get("nodeInfo") or {}
            record.tested_boot, record.tested_stack = str(info.get("bootID") or ""), stack_of(node)
            annotations = (node.get("metadata") or {}).get("annotations") or {}
            previous = NodeEntry.decode(annotations.get(entry_key(run.validation)))
            gate = await self._gate(node, previous, run, record, spec)
            plan, said = self._plan(node, previous, run, record, spec, gate=gate)
            if spec.node_actions.dry_run:
                run.dry_run[record.node] = "; ".join(plan.changes) or "nothing to change"
                break
            await self._withdraw(record, previous, spec)
            if await self._apply_reserved(run, record.node, plan, node, gate):
                break
        else:
            return
        held, waiting = run.breaker.held, run.breaker.waiting
        held.pop(record.node, None)
        waiting.discard(record.node)
        if record.phase is Phase.FAILED and gate.hold == ConditionReason.AWAITING_RUN:
            waiting.add(record.node)
        elif record.phase is Phase.FAILED and gate.hold is not None:
            held[record.node] = gate.hold
        if announce and not said:
            await self._events(run, record, node["metadata"]["uid"], spec, gate)

    async def _withdraw(
        self, record: NodeRecord, previous: NodeEntry | None, spec: GpuValidationSpec
    ) -> None:
        """A pass of a node whose repair is still asked: the repair loop withdraws it first."""
        repair = previous.repair if previous is not None else None
        verdict = Verdict.PASSED if record.phase is Phase.PASSED else Verdict.FAILED
        if (
            repair is not None
            and self.before_withdraw is not None
            and withdraws_on(repair, verdict)
        ):
            await self.before_withdraw(record.node, repair, spec)

    async def _apply_reserved(
        self, run: RunState, name: str, plan: NodePlan, node: dict[str, Any], gate: Gate
    ) -> bool:
        """Apply `plan`; True when done (or not to be tried again), False on 409. The breaker
        learns how the node was left, and a reservation ends with it."""
        key = label_value(run.validation)
        try:
            patched = await self._apply(name, plan)
        except ApiError as exc:
            if self.operator_breaker is not None and gate.reserved:
                self.operator_breaker.unreserve(name, key)  # refused: nothing changed
            if exc.status == 409:
                return False  # the node changed under us: plan again on its new state
            log.warning("%s: could not update node %s: %s", run.validation, name, exc)
            return True
        except BaseException:
            if self.operator_breaker is not None and gate.reserved:
                self.operator_breaker.patch_ended(name, key, None)  # the outcome is unknown
            raise
        if self.operator_breaker is not None:
            self.operator_breaker.patch_ended(name, key, patched or node)
        return True

    async def _gate(
        self,
        node: dict[str, Any],
        previous: NodeEntry | None,
        run: RunState,
        record: NodeRecord,
        spec: GpuValidationSpec,
    ) -> Gate:
        """Whether a failing node's taint and cordon may be applied now, reserving a slot;
        `previous` is the validation's entry on the node as it was read."""
        if record.phase is Phase.NOT_RUN:  # no evidence either way: the entry stays as it was
            return Gate(previous.hold, previous.since) if previous is not None else Gate()
        actions = spec.node_actions
        if (
            record.phase is not Phase.FAILED
            or actions.dry_run
            or (actions.taint is None and not actions.cordon)
        ):
            return Gate()
        now = int(time.time())
        if previous is not None and previous.in_force:
            return Gate(since=previous.since or previous.at)  # holding never undoes an action
        annotations = (node.get("metadata") or {}).get("annotations") or {}
        startup = {e.startup_taint for e in entries(annotations).values() if e.startup_taint}
        if spec.gating is not None and spec.gating.startup_taint is not None:
            startup.add(spec.gating.startup_taint.key)
        if never_in_service(node, startup):
            return Gate(since=now)
        breaker, reason = run.breaker, str(record.reason)
        if reason in breaker.systemic_reasons():
            return Gate(hold=ConditionReason.SYSTEMIC)
        if reason in breaker.undecided and not breaker.released:
            return Gate(hold=ConditionReason.AWAITING_RUN)
        if self.operator_breaker is None:
            return Gate(since=now)
        key = label_value(run.validation)
        cause = await self.operator_breaker.admit(
            record.node, key, breaker.approved_at, breaker.limit
        )
        return Gate(hold=cause) if cause is not None else Gate(since=now, reserved=True)

    def _plan(
        self,
        node: dict[str, Any],
        previous: NodeEntry | None,
        run: RunState,
        record: NodeRecord,
        spec: GpuValidationSpec,
        *,
        gate: Gate,
    ) -> tuple[NodePlan, bool]:
        """The node's plan, and whether its entry already said this verdict (no new Events)."""
        actions, gating = spec.node_actions, spec.gating
        verdict = {Phase.PASSED: Verdict.PASSED, Phase.NOT_RUN: Verdict.NOT_RUN}.get(
            record.phase, Verdict.FAILED
        )
        now = time.time()
        repair = after_verdict(previous.repair if previous else None, verdict, now)
        entry = next_entry(
            previous,
            verdict,
            reason=None if record.reason is None else str(record.reason),
            at=int(now),
            run=run.run_id,
            boot=record.tested_boot or "",
            stack=record.tested_stack,
            label=actions.label,
            taint=str(actions.taint.effect) if actions.taint else None,
            cordon=actions.cordon,
            startup_taint=gating.startup_taint.key if gating and gating.startup_taint else None,
            hold=gate.hold,
            since=gate.since,
            repair=repair,
        )
        proof = f"{run.validation}/{run.run_id} {record.trigger or run.trigger}"
        plan = plan_node(node, run.validation, entry, rfc3339(now), proof=proof)
        return plan, already_said(previous, entry)

    async def _apply(self, name: str, plan: NodePlan) -> dict[str, Any] | None:
        """Apply the plan; the node as the API server returned it (None: not patched).

        A plan that changes only the node's metadata and its condition (every passing node,
        a held failure) is one write: the status subresource of a node takes metadata changes
        too (its strategy resets only the spec; the kubelet updates its own labels that way), and
        the patch still carries the resourceVersion it was planned on. A fabric settles every
        node at once, so this halves the writes, and the watch events each write sends to every
        node watcher, at its end. Taints and cordon are spec: the node itself, then the status."""
        patch, conditions = plan.patch, plan.conditions
        if patch is not None and conditions and set(patch) == {"metadata"}:
            return await self._patch_status(name, {**patch, "status": {"conditions": conditions}})
        patched: dict[str, Any] | None = None
        if patch is not None:
            patched = await self.client.merge_patch(f"{NODES_PATH}/{q(name)}", patch)
        if conditions:
            status = await self._patch_status(name, {"status": {"conditions": conditions}})
            patched = status if patched is not None else patched
        return patched

    async def _patch_status(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """A strategic merge patch of the node's status subresource: conditions merge by type,
        so the kubelet's stay as they are."""
        patched: dict[str, Any] = await self.client.request(
            "PATCH", f"{NODES_PATH}/{q(name)}/status", body=body, content_type=STRATEGIC_MERGE
        )
        return patched

    async def _events(
        self, run: RunState, record: NodeRecord, node_uid: str, spec: GpuValidationSpec, gate: Gate
    ) -> None:
        effects = self.effects
        if run.events_posted >= effects.config.events_per_run:
            return
        dry_run = spec.node_actions.dry_run
        involved = {"apiVersion": "v1", "kind": "Node", "name": record.node, "uid": node_uid}
        message = f"{record.reason}: {record.message} (GpuNodeReport {record.report})"
        if gate.hold is not None:
            message += f"; taint and cordon held ({gate.hold})"
        if dry_run:
            run.events_posted += 1
            text = f"dry run, would: {run.dry_run.get(record.node, '')}"
            await events.post(self.client, involved, EventReason.DRY_RUN, text)
        if record.phase is Phase.FAILED:
            run.events_posted += 1
            await events.post(
                self.client, involved, EventReason.VALIDATION_FAILED, message, warning=True
            )
            await effects.event(EventReason.NODE_FAILED, f"{record.node}: {message}", warning=True)
        elif record.phase is Phase.NOT_RUN:
            run.events_posted += 1
            await events.post(self.client, involved, EventReason.NODE_NOT_RUN, message)
            await effects.event(EventReason.NODE_NOT_RUN, f"{record.node}: {message}")

    async def rewrite(
        self, validation: str, name: str, change: Callable[[NodeEntry], NodeEntry | None]
    ) -> dict[str, Any] | None:
        """Write `change` of the validation's entry on node `name` (the repair loop moving a
        node on), planned on the node as read and again on 409; the node as written (None: it
        has no entry, is gone, or nothing changed)."""
        for _ in range(3):
            node: dict[str, Any] | None = await self.client.get_or_none(f"{NODES_PATH}/{q(name)}")
            if node is None:
                return None
            annotations = (node.get("metadata") or {}).get("annotations") or {}
            previous = NodeEntry.decode(annotations.get(entry_key(validation)))
            if previous is None:
                return None
            entry = change(previous)
            if entry is None or entry == previous:
                return node
            plan = plan_node(node, validation, entry, rfc3339(time.time()))
            try:
                patched = await self._apply(name, plan)
            except ApiError as exc:
                if exc.status == 409:
                    continue
                raise
            if self.operator_breaker is not None:
                self.operator_breaker.observe(patched or node)
            return patched or node
        return None

    async def forget(self, validation: str, selector: str) -> int:
        """Remove a deleted validation's record from every node that has one, and what it alone
        asked for (its taint, its cordon); the node count touched."""
        key, touched = entry_key(validation), 0
        while True:
            try:
                async for nodes, _, _ in self.client.pages(NODES_PATH, selector):
                    for node in nodes:
                        if key in ((node.get("metadata") or {}).get("annotations") or {}):
                            touched += await self._forget_one(node, validation)
            except ResourceExpiredError:
                continue
            return touched

    async def _forget_one(self, node: dict[str, Any], validation: str) -> int:
        name = node["metadata"]["name"]
        for _ in range(3):
            plan = plan_node(node, validation, None, rfc3339(time.time()))
            try:
                patched = await self._apply(name, plan)
                if self.operator_breaker is not None and patched is not None:
                    self.operator_breaker.observe(patched)
                return 1
            except ApiError as exc:
                if exc.status != 409:
                    log.warning("%s: could not forget node %s: %s", validation, name, exc)
                    return 0
            node = await self.client.get_or_none(f"{NODES_PATH}/{q(name)}") or {}
            if not node:
                return 0
        return 0
