"""What the operator remembers of one run: a few hundred bytes per node.

`RunState` is the one home of a run's state: its nodes and their progress, and what the run alone
owns (its outliers, the next scheduled run, Events posted, dry-run changes, whether the status is
behind). A run starts with a fresh `RunState`, so nothing of an earlier run leaks into it. It
applies the facts of the run's pods and reports (gpuval_operator.run.facts). A node's result is
Passed, Failed or NotRun (gpuval could not test it); a NotRun node with attempts left waits for
its next attempt in the same run. Nodes may join a run after it started (spec.gating, retries),
which reopens a completed run. Everything here is
pure and synchronous: the controller does the I/O.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from gpuval_api import Reason, Verdict, verdict_of
from gpuval_api.checks import CheckName, ChecksConfig, Profile
from gpuval_api.crd import NodeTrigger
from gpuval_api.kubernetes import TERMINAL_POD_PHASES
from gpuval_api.training import TrainingRunStatus
from gpuval_operator import names
from gpuval_operator.baseline.state import RunBaselines
from gpuval_operator.fabric.podfacts import FabricPodFacts
from gpuval_operator.fabric.state import FabricState
from gpuval_operator.planning import Candidate
from gpuval_operator.podfacts import DeviceHealthFact, PodFacts
from gpuval_operator.run.breakerstate import BreakerState
from gpuval_operator.run.facts import ReportFacts
from gpuval_operator.run.refusals import Refused
from gpuval_operator.run.uniformity import Outlier


class Phase(IntEnum):
    PENDING = 0
    # The API server refuses its agent pod for now (a quota, an admission policy): no verdict, not
    # NotRun; the run creates the pod again (gpuval_operator.run.refusals).
    WAITING = 1
    RUNNING = 2
    PASSED = 3
    FAILED = 4
    NOT_RUN = 5

    @classmethod
    def of(cls, verdict: Verdict) -> Phase:
        return {Verdict.PASSED: cls.PASSED, Verdict.NOT_RUN: cls.NOT_RUN}.get(verdict, cls.FAILED)


# Keys of RunState.counts(), as the status's NodeCounts spells them.
COUNT_KEYS = {
    Phase.PENDING: "pending",
    Phase.WAITING: "waiting",
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
    # A next attempt, or a refused pod made again: the report is reset (Pending, the operator's
    # settled mark removed) before its pod is made, whatever the report watch brought meanwhile.
    reset_due: bool = False
    # Its report exists: only then may its pod start (the agent writes to that report).
    planned: bool = False
    pod_seen: bool = False
    # The API server admitted the create of its pod (pod_seen tells the same after a restart).
    admitted: bool = False
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
    # The scheduler (or the kubelet) preempted the pod for one of higher priority.
    preempted: bool = False
    # The kubelet's reason for a pod that failed before a container started (admission).
    pod_reason: str | None = None
    # The node's GPU sharing its pod was made for (keys.ANNOTATION_GPU_SHARING); None: none.
    sharing: str | None = None
    # Its pod asks for the node's devices through a ResourceClaim (spec.agent.devices dra).
    claimed: bool = False
    # The kubelet's word on the devices of its pod's claims (KEP-4680), and what the report
    # shows of it (written by the driver when they differ).
    device_health: tuple[DeviceHealthFact, ...] = ()
    device_health_written: tuple[DeviceHealthFact, ...] = ()
    # What the agent found failing before it ended (its Running report's first failure): the
    # evidence a death without a verdict is judged on.
    found: tuple[Reason, str] | None = None
    node_gone: bool = False  # deleted
    # NotReady: since when (epoch seconds) and why; None while Ready.
    not_ready: tuple[float, str] | None = None
    terminal_since: float | None = None
    deleted_by_us: bool = False
    reason: Reason | None = None
    message: str = ""
    # The boot ID and GPU stack the node had when it got its verdict (gating compares them).
    tested_boot: str | None = None
    tested_stack: str = ""
    # Passed its local checks and waits for its fabric verdict (spec.fabric): no node action yet,
    # counted as running.
    awaiting_fabric: bool = False
    # The checks of this attempt when not the spec's (CheckName values): a re-validation after a
    # repair runs the checks that failed, with the state check (spec.remediation).
    checks: tuple[str, ...] | None = None

    @property
    def done(self) -> bool:
        return self.phase >= Phase.PASSED

    @property
    def refused(self) -> bool:
        """The API server refused its agent pod: it waits for the cluster to admit one
        (run.refusals), with no verdict."""
        return self.phase is Phase.WAITING

    @property
    def settled(self) -> bool:
        """Its verdict in this run is final: done, not waiting for the fabric."""
        return self.done and not self.awaiting_fabric

    @property
    def pod_live(self) -> bool:
        """Its agent pod was admitted and has not ended, as far as the pod watch showed: it
        holds a slot of a quota on the agents' pods."""
        return (
            (self.admitted or self.pod_seen)
            and self.terminal_since is None
            and not self.pod_gone
            and not self.deleted_by_us
        )

    def next_attempt(self, pod: str, not_before: float, trigger: NodeTrigger | None) -> None:
        """Make the record wait for another attempt, under a new pod name, in the same report
        (which still shows the previous attempt until the operator resets it)."""
        self._again(pod, self.attempt + 1, not_before, trigger)

    def readmit(self) -> None:
        """Its refused agent pod is to be created again: the same attempt and pod name (no pod
        existed, so no attempt was spent), the report reset first."""
        self._again(self.pod, self.attempt, 0.0, self.trigger)

    def _again(
        self, pod: str, attempt: int, not_before: float, trigger: NodeTrigger | None
    ) -> None:
        fresh = NodeRecord(
            self.node,
            self.gpus,
            self.report,
            pod,
            attempt=attempt,
            trigger=trigger,
            not_before=not_before,
            stale_report=True,
            reset_due=True,
            planned=True,
            # A retry tries the same checks again (a re-validation's stay a re-validation's).
            checks=self.checks if trigger is NodeTrigger.RETRY else None,
        )
        for slot in NodeRecord.__slots__:
            setattr(self, slot, getattr(fresh, slot))


def ended_before(record: NodeRecord, pod: PodFacts) -> bool:
    """The node's pod had ended (seen ending, or ended in its last state) when it was deleted."""
    return record.terminal_since is not None or pod.phase in TERMINAL_POD_PHASES


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
    fabric: FabricState | None = None
    # Its baselines and history, when the spec asks for them (spec.baseline).
    baseline: RunBaselines | None = None
    # The uniformity outliers found when the run completed (None: not compared).
    outliers: list[Outlier] | None = None
    # How its training losses were compared, once it completed (None: no node trained).
    training: TrainingRunStatus | None = None
    # When the schedule's next run is due: set when this run completes.
    next_run_at: float | None = None
    # Node Events posted for this run (capped by GPUVAL_EVENTS_PER_RUN).
    events_posted: int = 0
    # nodeActions.dryRun: node -> the changes that would have been made (status.dryRun).
    dry_run: dict[str, str] = field(default_factory=dict)
    # spec.gating: an empty run waits for nodes to join (phase Pending), it is not a failure.
    gating: bool = False
    # RunCompleted was posted for the run's current end, and how many ends were announced: once
    # per end (a reopening, by arrivals, a retry or a revised verdict, ends it again), at most
    # GPUVAL_EVENTS_PER_RUN ends a run.
    announced: bool = False
    announcements: int = 0
    # NodeQueued Events posted for this run (capped by GPUVAL_EVENTS_PER_RUN; the rest counted).
    queued_events: int = 0
    # Something the status shows changed since the status was last written.
    dirty: bool = False
    # The run's breaker: node actions held for a limit or the systemic hold (run.breakerstate).
    breaker: BreakerState = field(default_factory=BreakerState)
    # Node actions under way for verdicts that came at once: (applied, of), None when none are
    # (a fabric settles every node at its end; the status shows the progress).
    acting: tuple[int, int] | None = None
    # The API server refuses the run's agent pods now (admission, quota), and the refusals an
    # Event has said (once per run, cause and policy): gpuval_operator.run.refusals.
    refused: Refused | None = None
    refusals_said: set[str] = field(default_factory=set)
    # Nodes whose pod's device health changed since their report last showed it.
    health_due: set[str] = field(default_factory=set)
    # status.remediation as the repair loop last built it (spec.remediation; it spans runs, so a
    # new run starts with the last one's); None: no repair loop.
    remediation: dict[str, Any] | None = None
    # spec.agent.devices dra: the selected nodes (Ready, schedulable) for which the driver
    # publishes no device, left out of the run (status.nodesWithoutDevices); None without DRA.
    without_devices: tuple[str, ...] | None = None
    # After a restart: how many the status counted beyond those it listed.
    without_devices_omitted: int = 0
    # RepairRequestsRefused (type, status, reason, message) as the repair loop last built it
    # (gpuval_operator.remediation.refusals); None without spec.remediation. It spans runs too.
    repair_requests: tuple[str, str, str, str] | None = None
    # spec.checks.profile, and the checks of it that their section's `enabled: false` keeps off
    # (the ProfileOverridden condition).
    profile: Profile = Profile.DEFAULT
    overridden: tuple[CheckName, ...] = ()

    def note_checks(self, checks: ChecksConfig) -> None:
        """What the run's spec.checks says of its profile (the ProfileOverridden condition)."""
        self.profile, self.overridden = checks.profile, tuple(checks.overridden())

    def add(self, node: str, gpus: int, report: str, pod: str) -> NodeRecord:
        record = self.nodes.get(node)
        if record is None:
            record = self.nodes[node] = NodeRecord(
                node=sys.intern(node), gpus=gpus, report=report, pod=pod
            )
        return record

    def expect_fabric(self, started_at: float | None = None) -> None:
        """The spec asks for a fabric phase (spec.fabric): the run keeps its state from now on."""
        self.fabric = FabricState(started_at=started_at)

    def add_candidates(self, candidates: Iterable[Candidate]) -> None:
        """Selected nodes into the run, each with its deterministic report and pod names."""
        for c in candidates:
            self.add(
                c.name,
                c.gpus,
                names.report_name(self.validation, self.run_id, c.name),
                names.pod_name(self.validation, self.run_id, c.name),
            )

    def counts(self) -> dict[str, int]:
        counts = {"total": len(self.nodes), **dict.fromkeys(COUNT_KEYS.values(), 0)}
        for record in self.nodes.values():
            counts[COUNT_KEYS[Phase.RUNNING if record.awaiting_fabric else record.phase]] += 1
        return counts

    def running(self) -> int:
        return sum(1 for r in self.nodes.values() if r.phase is Phase.RUNNING)

    def pending(self, now: float = float("inf")) -> Iterator[NodeRecord]:
        """Nodes waiting for their wave whose report exists, whose backoff is over and whose
        node is Ready (a NotReady one waits: lifecycle.due_outcomes bounds how long)."""
        return (
            r
            for r in self.nodes.values()
            if r.phase is Phase.PENDING and r.planned and r.not_before <= now and not r.not_ready
        )

    def all_done(self) -> bool:
        return all(r.settled for r in self.nodes.values())

    def local_verdicts_in(self) -> bool:
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
            record.awaiting_fabric = True
        else:
            self.finished.append(node)
        return True

    def revise(self, node: str, verdict: Verdict, reason: Reason | None, message: str) -> bool:
        """A settled node's report now gives another verdict than the run holds, written after
        the run's: by a person overruling it, or by an agent whose write landed after the
        operator's. The report is the node's verdict, for the status as for the metrics (which
        read the same report): the run takes it, the node's actions follow it, and a completed
        run is closed again on it. True when the verdict changed; the same verdict with other
        words changes nothing (the operator's own writes may word a reason differently)."""
        record = self.nodes.get(node)
        phase = Phase.of(verdict)
        if record is None or not record.settled or record.phase is phase:
            return False
        passed = phase is Phase.PASSED
        record.phase, record.message = phase, message[:300]
        record.reason = None if passed else (reason or Reason.CHECK_ERROR)
        if passed and self.fabric is not None and self.fabric.wants(node):
            record.awaiting_fabric = True
        else:
            self.finished.append(node)
        self.reopen()
        return True

    def settle_fabric(
        self, node: str, verdict: Verdict, reason: Reason | None, message: str
    ) -> None:
        """A node awaiting the fabric gets its final verdict (unchanged when it stays Passed, or
        NotRun as recorded when its own fabric pod never started) and its node actions."""
        record = self.nodes.get(node)
        if record is None or not record.awaiting_fabric:
            return
        record.awaiting_fabric = False
        if record.phase is Phase.PASSED and verdict is not Verdict.PASSED:
            record.phase = Phase.of(verdict)
            record.reason, record.message = reason or Reason.CHECK_ERROR, message[:300]
        self.finished.append(node)

    def refuse(self, node: str, message: str) -> bool:
        """The API server refused the node's agent pod: Waiting (AgentPodRefused), no verdict,
        until the cluster admits one; no node action follows (it is not `finished`). False when
        the node had a verdict already."""
        record = self.nodes.get(node)
        if record is None or record.done:
            return False
        record.phase, record.reason = Phase.WAITING, Reason.AGENT_POD_REFUSED
        record.message, record.termination = message, None
        self.dirty = True
        return True

    def ended_since(self, since: float) -> int:
        """The run's agent pods seen ending since `since` (monotonic, as `apply_pod`'s `now`)."""
        return sum(
            1
            for r in self.nodes.values()
            if r.terminal_since is not None and r.terminal_since >= since
        )

    def live_pods(self) -> int:
        """The run's agent pods admitted and not ended (what a quota on pods counts)."""
        return sum(1 for r in self.nodes.values() if r.pod_live)

    def refused_nodes(self) -> list[NodeRecord]:
        return sorted((r for r in self.nodes.values() if r.refused), key=lambda r: r.node)

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
        """Nodes joined a completed run (gating, retry), or a node's verdict was written over: it
        is running again, until it completes again (and says so again)."""
        self.completed_at = None
        self.announced = False

    def apply_report(self, report: ReportFacts) -> bool:
        """Apply a report of this run; True when it gave its node a verdict."""
        if report.run != self.run_id:
            return False
        if self.fabric is not None:
            self.fabric.apply_report(report.node, report.fabric)
        record = self.nodes.get(report.node)
        if record is None:
            gpus = report.gpus or 0
            record = self.add(
                report.node,
                gpus,
                report.name,
                names.pod_name(self.validation, self.run_id, report.node),
            )
        record.planned = True
        if record.stale_report:
            if not report.completed:
                record.stale_report = False  # the reset (or the new agent) shows
            return False
        if report.started:
            record.started = True
        if report.failing and not report.completed and report.reason is not None:
            record.found = (report.reason, report.message)
        if report.completed and report.verdict is not None:
            if record.settled:
                return self.revise(report.node, report.verdict, report.reason, report.message)
            return self.finish_node(report.node, report.verdict, report.reason, report.message)
        return False

    def apply_pod(self, pod: PodFacts, now: float) -> None:
        if pod.run != self.run_id:
            return
        record = self.nodes.get(pod.node)
        if record is None:
            return
        if pod.attempt > record.attempt and not record.done:
            # Seen after a restart: the node was on a later attempt than its report tells.
            record.attempt, record.pod, record.stale_report = pod.attempt, pod.name, False
        if pod.name != record.pod:
            return  # another attempt's pod
        record.pod_seen = True
        record.pod_created = pod.created or record.pod_created
        if record.phase is Phase.PENDING:
            record.phase = Phase.RUNNING
        terminal = pod.phase in TERMINAL_POD_PHASES
        if pod.deleting and not record.deleted_by_us and not ended_before(record, pod):
            # Deleted by someone else: gone now, though its end (which a kubelet reports before
            # removing it, and a Kueue finalizer may keep in view) comes later.
            record.pod_gone = True
        if terminal and record.terminal_since is None:
            record.terminal_since = now
        record.pod_phase = pod.phase
        record.scheduled = pod.scheduled
        record.unschedulable = None if pod.scheduled else pod.unschedulable
        record.evicted = pod.evicted
        record.preempted = record.preempted or pod.preempted
        record.pod_reason = pod.reason
        record.sharing = pod.sharing or record.sharing
        record.claimed = record.claimed or pod.claimed
        if pod.device_health and pod.device_health != record.device_health:
            record.device_health = pod.device_health
            self.health_due.add(record.node)
            self.dirty = True  # status.unhealthyDevices
        record.started = record.started or pod.started
        record.waiting_reason = pod.waiting_reason
        record.exit_code = pod.exit_code
        record.terminated_reason = pod.terminated_reason
        if not record.done and pod.termination is not None:
            record.termination = pod.termination

    def apply_fabric_pod(
        self, pod: FabricPodFacts, monotonic: float, now: float, *, deleted: bool = False
    ) -> None:
        if pod.pod.run != self.run_id or self.fabric is None:
            return
        if deleted:
            self.fabric.apply_pod_deleted(pod, monotonic, now)
        else:
            self.fabric.apply_pod(pod, monotonic, now)

    def apply_pod_deleted(self, pod: PodFacts, now: float) -> None:
        """The node's pod was deleted (`now`: monotonic, as for `apply_pod`)."""
        if pod.run != self.run_id:
            return
        record = self.nodes.get(pod.node)
        if (
            record is not None
            and pod.name == record.pod
            and record.phase is Phase.RUNNING
            and not record.deleted_by_us
        ):
            if ended_before(record, pod):
                # It ended, then was deleted (kube-controller-manager deletes the oldest ended
                # pods past its threshold, 12,500 by default; a person cleans up): its end, with
                # the grace for its report and its termination message (deaths.ended), not a
                # pod deleted before it finished.
                self.apply_pod(pod, now)
                return
            record.pod_gone = True
            # The Eviction API deletes the pod; its last state carries the DisruptionTarget mark
            # (so does the scheduler's preemption).
            record.evicted = record.evicted or pod.evicted
            record.preempted = record.preempted or pod.preempted
