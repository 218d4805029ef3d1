"""What the operator remembers of one run: a few hundred bytes per node.

`RunState` holds one run's nodes and applies the compact views of their pods and reports
(gpuval_operator.views). A node's result is Passed, Failed or NotRun (gpuval could not test it);
a NotRun node with attempts left waits for its next attempt in the same run. Nodes may join a
run after it started (spec.gating, retries), which reopens a completed run. Everything here is
pure and synchronous: the controller does the I/O.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from gpuval_api.crd import NodeTrigger
from gpuval_api.kubernetes import TERMINAL_POD_PHASES
from gpuval_api.reasons import Reason, verdict_of
from gpuval_api.result import Verdict
from gpuval_operator import names
from gpuval_operator.fabricpodview import FabricPodView
from gpuval_operator.fabricstate import FabricRun
from gpuval_operator.views import PodView, ReportView


class Phase(IntEnum):
    PENDING = 0
    RUNNING = 1
    PASSED = 2
    FAILED = 3
    NOT_RUN = 4

    @classmethod
    def of(cls, verdict: Verdict) -> Phase:
        return {Verdict.PASSED: cls.PASSED, Verdict.NOT_RUN: cls.NOT_RUN}.get(verdict, cls.FAILED)


# Keys of RunState.counts(), as the status's NodeCounts spells them.
COUNT_KEYS = {
    Phase.PENDING: "pending",
    Phase.RUNNING: "running",
    Phase.PASSED: "passed",
    Phase.FAILED: "failed",
    Phase.NOT_RUN: "notRun",
}


@dataclass(slots=True)
class NodeRecord:
    node: str
    gpus: int
    report: str
    pod: str
    phase: Phase = Phase.PENDING
    attempt: int = 1
    # Why the node is in the run beyond its start (gating, retry); None: selected at the start.
    trigger: NodeTrigger | None = None
    # Not before this (epoch seconds): a retry's backoff.
    not_before: float = 0.0
    # The report still shows the previous attempt: reset it before the next pod starts, and
    # read none of its completed statuses until the reset shows.
    stale_report: bool = False
    # Its report exists: only then may its pod start (the agent writes to that report).
    planned: bool = False
    pod_seen: bool = False
    pod_created: float | None = None
    pod_phase: str | None = None
    scheduled: bool = False
    unschedulable: str | None = None
    evicted: bool = False
    # The agent's container started (running or terminated), or its report says Running.
    started: bool = False
    waiting_reason: str | None = None
    exit_code: int | None = None
    terminated_reason: str | None = None
    # The verdict the agent left in its termination message; kept only until the node finishes.
    termination: dict[str, Any] | None = None
    pod_gone: bool = False
    node_gone: bool = False
    terminal_since: float | None = None
    deleted_by_us: bool = False
    reason: Reason | None = None
    message: str = ""
    # The boot ID and GPU stack the node had when it got its verdict (gating compares them).
    tested_boot: str | None = None
    tested_stack: str = ""
    # Passed its local checks and waits for its fabric verdict (spec.fabric): no node action yet,
    # counted as running.
    held: bool = False

    @property
    def done(self) -> bool:
        return self.phase >= Phase.PASSED

    @property
    def settled(self) -> bool:
        """Its verdict in this run is final: done, and not waiting for the fabric."""
        return self.done and not self.held

    def next_attempt(self, pod: str, not_before: float, trigger: NodeTrigger) -> None:
        """Make the record wait for another attempt, under a new pod name, in the same report
        (which still shows the previous attempt until the operator resets it)."""
        fresh = NodeRecord(
            self.node,
            self.gpus,
            self.report,
            pod,
            attempt=self.attempt + 1,
            trigger=trigger,
            not_before=not_before,
            stale_report=True,
            planned=True,
        )
        for slot in NodeRecord.__slots__:
            setattr(self, slot, getattr(fresh, slot))


@dataclass(slots=True)
class RunState:
    """One run of one GpuValidation: its nodes and their progress."""

    validation: str
    run_id: str
    number: int
    generation: int
    trigger: str
    started_at: float
    nodes: dict[str, NodeRecord] = field(default_factory=dict)
    completed_at: float | None = None
    finished: list[str] = field(default_factory=list)
    # The run's fabric phase, when the spec asks for one (and the run is going on).
    fabric: FabricRun | None = None

    def add(self, node: str, gpus: int, report: str, pod: str) -> NodeRecord:
        record = self.nodes.get(node)
        if record is None:
            record = self.nodes[node] = NodeRecord(
                node=sys.intern(node), gpus=gpus, report=report, pod=pod
            )
        return record

    def counts(self) -> dict[str, int]:
        counts = {"total": len(self.nodes), **dict.fromkeys(COUNT_KEYS.values(), 0)}
        for record in self.nodes.values():
            counts[COUNT_KEYS[Phase.RUNNING if record.held else record.phase]] += 1
        return counts

    def running(self) -> int:
        return sum(1 for r in self.nodes.values() if r.phase is Phase.RUNNING)

    def pending(self, now: float = float("inf")) -> Iterator[NodeRecord]:
        """Nodes waiting for their wave whose report exists and whose backoff is over."""
        return (
            r
            for r in self.nodes.values()
            if r.phase is Phase.PENDING and r.planned and r.not_before <= now
        )

    def all_done(self) -> bool:
        return all(r.settled for r in self.nodes.values())

    def local_settled(self) -> bool:
        """Every node has its local verdict, or waits for a retry's backoff: the fabric phase
        may begin."""
        return all(
            r.done or (r.phase is Phase.PENDING and r.trigger is NodeTrigger.RETRY)
            for r in self.nodes.values()
        )

    def in_phase(self, phase: Phase) -> list[NodeRecord]:
        return sorted((r for r in self.nodes.values() if r.phase is phase), key=lambda r: r.node)

    def failed(self) -> list[NodeRecord]:
        return self.in_phase(Phase.FAILED)

    def finish_node(self, node: str, verdict: Verdict, reason: Reason | None, message: str) -> bool:
        """Record a verdict; False when the node already had one (the first verdict stands)."""
        record = self.nodes.get(node)
        if record is None or record.done:
            return False
        record.phase = Phase.of(verdict)
        passed = record.phase is Phase.PASSED
        record.reason = None if passed else (reason or Reason.CHECK_ERROR)
        record.message = message[:300]
        record.termination = None
        if passed and self.fabric is not None and self.fabric.wants(node):
            record.held = True
        else:
            self.finished.append(node)
        return True

    def release(self, node: str, verdict: Verdict, reason: Reason | None, message: str) -> None:
        """A node held for the fabric gets its final verdict (unchanged when it stays Passed, or
        NotRun as recorded when its own fabric pod never started) and its node actions."""
        record = self.nodes.get(node)
        if record is None or not record.held:
            return
        record.held = False
        if record.phase is Phase.PASSED and verdict is not Verdict.PASSED:
            record.phase = Phase.of(verdict)
            record.reason, record.message = reason or Reason.CHECK_ERROR, message[:300]
        self.finished.append(node)

    def finish_for(self, node: str, reason: Reason, message: str) -> bool:
        """Record the verdict an operator-side reason gives (Failed or NotRun by its class)."""
        return self.finish_node(node, verdict_of(reason), reason, message)

    def overturn(self, node: str, reason: Reason, message: str) -> bool:
        """Fail a node that passed on its own, on evidence only the whole run shows (a burn
        fingerprint unlike its peers'); False when the node had not passed."""
        record = self.nodes.get(node)
        if record is None or record.phase is not Phase.PASSED:
            return False
        record.phase, record.reason, record.message = Phase.FAILED, reason, message[:300]
        self.finished.append(node)
        return True

    def reopen(self) -> None:
        """Nodes joined a completed run (gating, retry): it is running again."""
        self.completed_at = None

    def apply_report(self, view: ReportView) -> bool:
        """Apply a report of this run; True when it gave its node a verdict."""
        if view.run != self.run_id:
            return False
        if self.fabric is not None:
            self.fabric.apply_report(view.node, view.fabric)
        record = self.nodes.get(view.node)
        if record is None:
            gpus = view.gpus or 0
            record = self.add(
                view.node, gpus, view.name, names.pod_name(self.validation, self.run_id, view.node)
            )
        record.planned = True
        if record.stale_report:
            if not view.completed:
                record.stale_report = False  # the reset (or the new agent) shows
            return False
        if view.started:
            record.started = True
        if view.completed and view.verdict is not None:
            return self.finish_node(view.node, view.verdict, view.reason, view.message)
        return False

    def apply_pod(self, view: PodView, now: float) -> None:
        if view.run != self.run_id:
            return
        record = self.nodes.get(view.node)
        if record is None:
            return
        if view.attempt > record.attempt and not record.done:
            # Seen after a restart: the node was on a later attempt than its report tells.
            record.attempt, record.pod, record.stale_report = view.attempt, view.name, False
        if view.name != record.pod:
            return  # another attempt's pod
        record.pod_seen = True
        record.pod_created = view.created or record.pod_created
        if record.phase is Phase.PENDING:
            record.phase = Phase.RUNNING
        terminal = view.phase in TERMINAL_POD_PHASES
        if terminal and record.terminal_since is None:
            record.terminal_since = now
        record.pod_phase = view.phase
        record.scheduled = view.scheduled
        record.unschedulable = None if view.scheduled else view.unschedulable
        record.evicted = view.evicted
        record.started = record.started or view.started
        record.waiting_reason = view.waiting_reason
        record.exit_code = view.exit_code
        record.terminated_reason = view.terminated_reason
        if not record.done and view.termination is not None:
            record.termination = view.termination

    def apply_fabric_pod(
        self, view: FabricPodView, monotonic: float, now: float, *, deleted: bool = False
    ) -> None:
        if view.pod.run != self.run_id or self.fabric is None:
            return
        if deleted:
            self.fabric.apply_pod_deleted(view)
        else:
            self.fabric.apply_pod(view, monotonic, now)

    def apply_pod_deleted(self, view: PodView) -> None:
        if view.run != self.run_id:
            return
        record = self.nodes.get(view.node)
        if (
            record is not None
            and view.name == record.pod
            and record.phase is Phase.RUNNING
            and not record.deleted_by_us
        ):
            record.pod_gone = True
            # The Eviction API deletes the pod; its last state carries the DisruptionTarget mark.
            record.evicted = record.evicted or view.evicted
