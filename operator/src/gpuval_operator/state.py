"""What the operator remembers of one run: a few hundred bytes per node.

`RunState` holds one run's nodes and applies the compact views of their pods and reports
(gpuval_operator.views). Everything here is pure and synchronous: the controller does the I/O.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from gpuval_api.kubernetes import TERMINAL_POD_PHASES
from gpuval_api.reasons import Reason
from gpuval_operator import names
from gpuval_operator.views import PodView, ReportView


class Phase(IntEnum):
    PENDING = 0
    RUNNING = 1
    PASSED = 2
    FAILED = 3


@dataclass(slots=True)
class NodeRecord:
    node: str
    gpus: int
    report: str
    pod: str
    phase: Phase = Phase.PENDING
    # Its report exists: only then may its pod start (the agent writes to that report).
    planned: bool = False
    pod_seen: bool = False
    pod_created: float | None = None
    pod_phase: str | None = None
    scheduled: bool = False
    unschedulable: str | None = None
    evicted: bool = False
    exit_code: int | None = None
    terminated_reason: str | None = None
    # The verdict the agent left in its termination message; kept only until the node finishes.
    termination: dict[str, Any] | None = None
    pod_gone: bool = False
    terminal_since: float | None = None
    deleted_by_us: bool = False
    reason: Reason | None = None
    message: str = ""

    @property
    def done(self) -> bool:
        return self.phase >= Phase.PASSED


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

    def add(self, node: str, gpus: int, report: str, pod: str) -> NodeRecord:
        record = self.nodes.get(node)
        if record is None:
            record = self.nodes[node] = NodeRecord(
                node=sys.intern(node), gpus=gpus, report=report, pod=pod
            )
        return record

    def counts(self) -> dict[str, int]:
        counts = {"total": len(self.nodes), **{p.name.lower(): 0 for p in Phase}}
        for record in self.nodes.values():
            counts[record.phase.name.lower()] += 1
        return counts

    def running(self) -> int:
        return sum(1 for r in self.nodes.values() if r.phase is Phase.RUNNING)

    def pending(self) -> Iterator[NodeRecord]:
        """Nodes waiting for their wave whose report exists."""
        return (r for r in self.nodes.values() if r.phase is Phase.PENDING and r.planned)

    def all_done(self) -> bool:
        return all(r.done for r in self.nodes.values())

    def failed(self) -> list[NodeRecord]:
        return sorted(
            (r for r in self.nodes.values() if r.phase is Phase.FAILED), key=lambda r: r.node
        )

    def finish_node(self, node: str, passed: bool, reason: Reason | None, message: str) -> bool:
        """Record a verdict; False when the node already had one (the first verdict stands)."""
        record = self.nodes.get(node)
        if record is None or record.done:
            return False
        record.phase = Phase.PASSED if passed else Phase.FAILED
        record.reason = None if passed else (reason or Reason.CHECK_ERROR)
        record.message = message[:300]
        record.termination = None
        self.finished.append(node)
        return True

    def overturn(self, node: str, reason: Reason, message: str) -> bool:
        """Fail a node that passed on its own, on evidence only the whole run shows (a burn
        fingerprint unlike its peers'); False when the node had not passed."""
        record = self.nodes.get(node)
        if record is None or record.phase is not Phase.PASSED:
            return False
        record.phase, record.reason, record.message = Phase.FAILED, reason, message[:300]
        self.finished.append(node)
        return True

    def apply_report(self, view: ReportView) -> bool:
        """Apply a report of this run; True when it gave its node a verdict."""
        if view.run != self.run_id:
            return False
        record = self.nodes.get(view.node)
        if record is None:
            gpus = view.gpus or 0
            record = self.add(
                view.node, gpus, view.name, names.pod_name(self.validation, self.run_id, view.node)
            )
        record.planned = True
        if view.completed:
            return self.finish_node(view.node, view.passed, view.reason, view.message)
        return False

    def apply_pod(self, view: PodView, now: float) -> None:
        if view.run != self.run_id:
            return
        record = self.nodes.get(view.node)
        if record is None:
            return
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
        record.exit_code = view.exit_code
        record.terminated_reason = view.terminated_reason
        if not record.done and view.termination is not None:
            record.termination = view.termination

    def apply_pod_deleted(self, view: PodView) -> None:
        if view.run != self.run_id:
            return
        record = self.nodes.get(view.node)
        if record is not None and record.phase is Phase.RUNNING and not record.deleted_by_us:
            record.pod_gone = True
            # The Eviction API deletes the pod; its last state carries the DisruptionTarget mark.
            record.evicted = record.evicted or view.evicted
