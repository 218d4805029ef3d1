"""Node actions: a validation's verdict on a node, written into its entry on the node (one per
validation: gpuval_operator.nodes.entries), and what follows for its labels, taint, cordon and
GpuValidated condition; with nodeActions.dryRun, nothing is written and the changes are kept in
the run (RunState.dry_run) for the status and Events. Also forgetting a deleted
validation's entries.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from gpuval_api.conditions import EventReason
from gpuval_api.crd import GpuValidationSpec
from gpuval_api.result import Verdict
from gpuval_operator.kube import events
from gpuval_operator.kube.client import ApiError, ResourceExpiredError, q
from gpuval_operator.nodes.entries import (
    NodeEntry,
    NodePlan,
    already_said,
    entry_key,
    next_entry,
    plan_node,
)
from gpuval_operator.nodes.facts import stack_of
from gpuval_operator.run.effects import NODES_PATH, Effects
from gpuval_operator.run.state import NodeRecord, Phase, RunState
from gpuval_operator.timestamps import rfc3339

log = logging.getLogger(__name__)

STRATEGIC_MERGE = "application/strategic-merge-patch+json"


def _verdict(record: NodeRecord) -> Verdict:
    return {Phase.PASSED: Verdict.PASSED, Phase.NOT_RUN: Verdict.NOT_RUN}.get(
        record.phase, Verdict.FAILED
    )


class NodeActor:
    def __init__(self, effects: Effects) -> None:
        self.effects = effects
        self.client = effects.client

    async def act(self, run: RunState, record: NodeRecord, spec: GpuValidationSpec) -> None:
        """Bring the node to its verdict (or say what would be done); post Events."""
        for _ in range(3):
            node = await self.client.get_or_none(f"{NODES_PATH}/{q(record.node)}")
            if node is None:
                return
            info = (node.get("status") or {}).get("nodeInfo") or {}
            record.tested_boot, record.tested_stack = str(info.get("bootID") or ""), stack_of(node)
            plan, said = self._plan(node, run, record, spec)
            if spec.node_actions.dry_run:
                run.dry_run[record.node] = "; ".join(plan.changes) or "nothing to change"
                break
            try:
                await self._apply(record.node, plan)
                break
            except ApiError as exc:
                if exc.status == 409:
                    continue  # the node changed under us: plan again on its new state
                log.warning("%s: could not update node %s: %s", run.validation, record.node, exc)
                return
        else:
            return
        if not said:
            await self._events(run, record, node["metadata"]["uid"], spec.node_actions.dry_run)

    def _plan(
        self, node: dict[str, Any], run: RunState, record: NodeRecord, spec: GpuValidationSpec
    ) -> tuple[NodePlan, bool]:
        """The node's plan, and whether its entry already said this verdict (no new Events)."""
        annotations = (node.get("metadata") or {}).get("annotations") or {}
        previous = NodeEntry.decode(annotations.get(entry_key(run.validation)))
        actions, gating = spec.node_actions, spec.gating
        entry = next_entry(
            previous,
            _verdict(record),
            reason=None if record.reason is None else str(record.reason),
            at=int(time.time()),
            run=run.run_id,
            boot=record.tested_boot or "",
            stack=record.tested_stack,
            label=actions.label,
            taint=str(actions.taint.effect) if actions.taint else None,
            cordon=actions.cordon,
            startup_taint=gating.startup_taint.key if gating and gating.startup_taint else None,
        )
        plan = plan_node(node, run.validation, entry, rfc3339(time.time()))
        return plan, already_said(previous, entry)

    async def _apply(self, name: str, plan: NodePlan) -> None:
        if plan.patch is not None:
            await self.client.merge_patch(f"{NODES_PATH}/{q(name)}", plan.patch)
        if plan.condition is not None:
            # Strategic merge: conditions merge by type, so the kubelet's stay as they are.
            await self.client.request(
                "PATCH",
                f"{NODES_PATH}/{q(name)}/status",
                body={"status": {"conditions": [plan.condition]}},
                content_type=STRATEGIC_MERGE,
            )

    async def _events(
        self, run: RunState, record: NodeRecord, node_uid: str, dry_run: bool
    ) -> None:
        effects = self.effects
        if run.events_posted >= effects.config.events_per_run:
            return
        involved = {"apiVersion": "v1", "kind": "Node", "name": record.node, "uid": node_uid}
        message = f"{record.reason}: {record.message} (GpuNodeReport {record.report})"
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
                await self._apply(name, plan)
                return 1
            except ApiError as exc:
                if exc.status != 409:
                    log.warning("%s: could not forget node %s: %s", validation, name, exc)
                    return 0
            node = await self.client.get_or_none(f"{NODES_PATH}/{q(name)}") or {}
            if not node:
                return 0
        return 0
