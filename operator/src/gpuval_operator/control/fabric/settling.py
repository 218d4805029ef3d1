"""The fabric's verdicts, from the groups' results to each member's settled verdict: the members
whose verdict no later group can change, as soon as that is so (fabric.early), then the run-wide
comparison once every group has its results (fabric.verdicts), each member's report rewritten only
where the comparison changed what its agent wrote, and its final verdict given to the run (its
node actions follow). The decisions are fabric.early's and fabric.verdicts'; the calls are
gpuval_operator.run.effects'. docs/operator/fabric.md, "The fabric phase".
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from gpuval_api import EventReason, Verdict
from gpuval_api.fabric import FABRIC_CHECK, FabricKey, FabricSpec
from gpuval_api.report import StatusKey, build_operator_failure_status
from gpuval_operator.control.fabric.evidence import fabric_evidence_status
from gpuval_operator.fabric import lifecycle
from gpuval_operator.fabric.early import early_finals
from gpuval_operator.fabric.facts import FabricFacts
from gpuval_operator.fabric.plan import possible_representatives
from gpuval_operator.fabric.rollup import summary_line
from gpuval_operator.fabric.state import FabricState, Group
from gpuval_operator.fabric.verdicts import (
    Classification,
    Final,
    GroupEvidence,
    as_reported,
    classify,
)
from gpuval_operator.nodes.watch import NodeWatch
from gpuval_operator.run.effects import Effects
from gpuval_operator.run.state import RunState

log = logging.getLogger(__name__)


class FabricSettling:
    def __init__(
        self,
        *,
        effects: Effects,
        node_watch: NodeWatch,
        settled: Callable[[str, str, FabricFacts], None],
        judge: Callable[[RunState, Classification], None] | None = None,
    ) -> None:
        self.effects, self.node_watch = effects, node_watch
        # The read model's hook for a settled verdict whose report the operator leaves as the
        # agent wrote it (readmodel.validation.ValidationState.settle_fabric).
        self.settled = settled
        # Rules beyond the fabric's own, over its classification before it settles (spec.baseline:
        # a node's pairs against its baseline).
        self.judge = judge

    def stopping(self, fabric: FabricState) -> list[str]:
        """Pods given up are let end before the groups are compared: what their agents write
        as they stop lands before the settled verdicts, not over them."""
        limit = lifecycle.STOP_SECONDS + self.effects.config.pod_grace_seconds
        return fabric.stopping(time.monotonic(), limit)

    def _evidence(
        self, fabric: FabricState, groups: list[Group], keyed: bool
    ) -> list[GroupEvidence]:
        members = sorted({n for g in groups if g.plan.cross for n in g.plan.nodes})
        domains = self.node_watch.domains(members) if keyed else {}
        # A representative whose domain group was a group of one was never tested inside it.
        lone = frozenset(n for g in fabric.groups.values() if g.size == 1 for n in g.plan.nodes)
        return [
            GroupEvidence(
                g.name,
                g.plan.nodes,
                tuple(r for m in g.members if (r := fabric.result(g, m)) is not None),
                fabric.busbw.get(g.name),
                fabric.pairs.get(g.name, ()),
                g.plan.domain,
                cross=g.plan.cross,
                domains={n: domains.get(n, "") for n in g.plan.nodes} if g.plan.cross else None,
                lone=lone & set(g.plan.nodes) if g.plan.cross else frozenset(),
                train=fabric.train.get(g.name),
            )
            for g in groups
            if g.size > 1
        ]

    async def early(self, run: RunState, fabric: FabricState, wanted: FabricSpec) -> None:
        """Members whose verdict the comparison can no longer change (fabric.early) get it now,
        and their node actions with it, while later groups run."""
        inside = [g for g in fabric.groups.values() if not g.plan.cross and g.size > 1]
        # A group given up whose pods are still stopping may yet get pairs from an agent's last
        # write: it counts as still to come.
        stopping = set(self.stopping(fabric))
        done = [
            g for g in inside if fabric.done(g) and not any(m.pod in stopping for m in g.members)
        ]
        seen = (len(done), fabric.cross_planned)
        if not fabric.planned or seen == fabric.early_seen:
            return
        fabric.early_seen = seen
        finished = sum(g.size for g in done)
        pending = sum(g.size for g in inside) - finished
        if pending >= finished:
            return  # the floor's ceiling is unbounded until more than half are in (fabric.early)
        excluded = set(fabric.early)
        excluded.update(n for g in fabric.groups.values() if g.plan.cross for n in g.plan.nodes)
        if wanted.topology_key is not None and not fabric.cross_planned:
            plans = [g for g in fabric.groups.values() if not g.plan.cross]
            passed = {
                m.node: None if (r := fabric.result(g, m)) is None else r.verdict is Verdict.PASSED
                for g in plans
                for m in g.members
            }
            excluded |= possible_representatives([g.plan for g in plans], passed)
        evidence = self._evidence(fabric, done, keyed=False)
        finals = early_finals(evidence, pending, wanted.thresholds, excluded, wanted.train)
        if self.judge is not None and finals:
            judged = Classification(None, 0.0, (), finals)
            self.judge(run, judged)
            finals = {n: f for n, f in judged.nodes.items() if f.verdict is Verdict.PASSED}
        if not finals:
            return
        fabric.early.update(finals)
        run.dirty = True
        log.info("%s: %d fabric verdicts settled early", run.validation, len(finals))
        await self.effects.bounded(
            self._settle(run, fabric, node, finals[node]) for node in sorted(finals)
        )

    async def classify(self, run: RunState, fabric: FabricState, wanted: FabricSpec) -> None:
        evidence = self._evidence(
            fabric, list(fabric.groups.values()), keyed=wanted.topology_key is not None
        )
        found = classify(evidence, wanted.thresholds, wanted.train)
        if self.judge is not None:
            self.judge(run, found)
        fabric.classification = found
        # Those settled early keep their verdict, unless it was written over since and the node
        # awaits the fabric again.
        given_early = {
            n: f
            for n, f in fabric.early.items()
            if n in run.nodes and not run.nodes[n].awaiting_fabric
        }
        await self.effects.bounded(
            self._settle(run, fabric, node, found.nodes.get(node))
            for node in sorted(fabric.groups_of)
            if node not in given_early
        )
        fabric.classified, fabric.completed_at = True, time.time()
        run.dirty = True
        for node, given in sorted(given_early.items()):
            final = found.nodes.get(node)
            if final is not None and final != given:
                # fabric.early's proof says this cannot happen; should it, the comparison wins.
                log.error(
                    "%s: %s was settled early as %s; compared: %s",
                    run.validation,
                    node,
                    given,
                    final,
                )
                await self._settle(run, fabric, node, final, again=True)
        text = f"fabric of run {run.run_id}: {summary_line(fabric)}"
        failed = any(f.verdict is Verdict.FAILED for f in found.nodes.values())
        differ = found.train is not None and bool(found.train.mismatched)
        await self.effects.event(EventReason.FABRIC_COMPLETED, text, warning=failed or differ)
        log.info("%s: %s", run.validation, text)

    async def _settle(
        self,
        run: RunState,
        fabric: FabricState,
        node: str,
        final: Final | None,
        *,
        again: bool = False,
    ) -> None:
        """The node's settled fabric verdict into its report, then its final verdict (`again`:
        over one it was given early)."""
        # Only a node alone in its domain, in no cross-domain group, is in no group compared.
        final = final or Final(
            Verdict.NOT_RUN,
            None,
            "alone in its topology domain, and no other domain had a node to test across: its "
            "fabric was not tested",
        )
        never = any(
            m.never_started
            for name in fabric.groups_of[node]
            for m in fabric.groups[name].members
            if m.node == node
        )
        record = run.nodes.get(node)
        if record is None:
            return
        reported = fabric.reported.get(node)
        if not never and reported is not None and as_reported(final, reported):
            # The agent's own result stands: its report already says it (at 10,000 nodes, as
            # many writes saved as nodes pass).
            self.settled(run.run_id, node, reported)
            (run.revise if again else run.settle_fabric)(node, Verdict.PASSED, None, final.message)
            return
        fabric_body = {
            FabricKey.VERDICT: str(final.verdict),
            FabricKey.REASON: None if final.reason is None else str(final.reason),
            FabricKey.MESSAGE: final.message[:1024],
            FabricKey.CLASSIFIED: True,
        }
        status: dict[str, Any] = {StatusKey.FABRIC: fabric_body}
        verdict = Verdict.PASSED
        if final.verdict is Verdict.FAILED and final.reason is not None:
            verdict = Verdict.FAILED
            status |= build_operator_failure_status(
                final.reason, final.message, None, datetime.now(UTC), FABRIC_CHECK
            )
            status[StatusKey.EVIDENCE] = await fabric_evidence_status(
                self.effects, record, fabric, final.reason, final.message
            )
        elif never:
            verdict = Verdict.NOT_RUN
        await self.effects.settle_report(record, status)
        (run.revise if again else run.settle_fabric)(node, verdict, final.reason, final.message)
