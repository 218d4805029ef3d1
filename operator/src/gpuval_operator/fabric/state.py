"""What the operator remembers of one run's fabric phase: its groups, and the facts of their
reports' status.fabric and of their pods. Pure and synchronous.

Everything a decision needs is rebuilt from three durable sources after a restart: the reports'
status.fabric (each member's group, rank and node list, written before any pod; then its
result), the fabric pods (labels, the port annotation, their termination messages), and the
GpuValidation's annotation gpuval.dev/fabric-planned (the plan is complete). What lives only
here is bookkeeping a restart can redo: which pod this process deleted, since when a pod has
been terminal, the results it has written but not yet seen come back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpuval_api import Verdict
from gpuval_api.fabric import FabricPair
from gpuval_api.kubernetes import TERMINAL_POD_PHASES
from gpuval_operator.fabric.facts import FabricFacts, FabricTrainFacts
from gpuval_operator.fabric.plan import GroupPlan
from gpuval_operator.fabric.podfacts import FabricPodFacts
from gpuval_operator.fabric.verdicts import Classification, Final, MemberResult

# (group, rank) -> the fabric pod's name (names.fabric_pod_name, for one run).
PodNamer = Callable[[str, int], str]


@dataclass(slots=True)
class Member:
    node: str
    rank: int
    pod: str
    requested: bool = False  # this process asked for the pod
    refused: str | None = None  # the API server refused the pod: why
    deleted_at: float | None = None  # monotonic: when this process deleted the pod
    gone: bool = False  # the pod was deleted by someone else, or vanished
    evicted: bool = False
    preempted: bool = False
    terminal_since: float | None = None  # monotonic
    started_seen: float | None = None  # wall clock when this process first saw it started
    recorded: MemberResult | None = None  # written by the operator, not yet read back
    termination: dict[str, object] | None = None  # the fabric verdict its pod's agent left
    never_started: bool = False  # its pod was made and did not start in time (gang)

    @property
    def deleted_by_us(self) -> bool:
        return self.deleted_at is not None


@dataclass(slots=True)
class Group:
    plan: GroupPlan
    members: list[Member]
    port: int | None = None
    opened_at: float | None = None  # wall clock: its pods' creation

    @property
    def name(self) -> str:
        return self.plan.name

    @property
    def size(self) -> int:
        return len(self.members)


@dataclass(slots=True)
class FabricState:
    """The fabric phase of one run."""

    reported: dict[str, FabricFacts] = field(default_factory=dict)  # node -> status.fabric
    pods: dict[str, FabricPodFacts] = field(default_factory=dict)  # pod name -> its facts
    pairs: dict[str, tuple[FabricPair, ...]] = field(default_factory=dict)  # group -> pairs
    busbw: dict[str, float] = field(default_factory=dict)  # group -> busbw, GB/s
    train: dict[str, FabricTrainFacts] = field(default_factory=dict)  # group -> its training
    groups: dict[str, Group] = field(default_factory=dict)  # in plan order
    groups_of: dict[str, list[str]] = field(default_factory=dict)  # node -> its groups
    planned: bool = False
    cross_planned: bool = False
    classified: bool = False
    started_at: float | None = None
    completed_at: float | None = None
    classification: Classification | None = None
    # Members settled before the comparison (fabric.early), with the verdict they were given,
    # and what the last look at them saw: (domain groups done, cross-domain groups planned).
    early: dict[str, Final] = field(default_factory=dict)
    early_seen: tuple[int, bool] | None = None
    # The groups forming now, as status.fabric.waiting lists them (fabric.rollup.group_waits),
    # taken each tick.
    waits: list[dict[str, Any]] = field(default_factory=list)
    # Groups found done, each with its members' results then (a group stays done unless a report
    # loses its verdict), and groups found opened: a tick at 10,000 nodes asks for both of every
    # group several times, and would otherwise read every member's result each time.
    _done: dict[str, tuple[MemberResult, ...]] = field(default_factory=dict)
    _opened: set[str] = field(default_factory=set)

    # -- what arrives --

    def apply_report(self, node: str, reported: FabricFacts | None) -> None:
        if reported is None or reported.verdict is None:
            for group in self.groups_of.get(node, ()):
                self._done.pop(group, None)
        if reported is None:
            self.reported.pop(node, None)
            return
        self.reported[node] = reported
        if reported.pairs and reported.group not in self.pairs:
            self.pairs[reported.group] = reported.pairs
        if reported.busbw is not None:
            self.busbw.setdefault(reported.group, reported.busbw)
        if reported.train is not None:
            self.train.setdefault(reported.group, reported.train)

    def member(self, group: str, rank: int) -> Member | None:
        found = self.groups.get(group)
        if found is None or not 0 <= rank < found.size:
            return None
        return found.members[rank]

    def apply_pod(self, pod: FabricPodFacts, mono: float, now: float) -> None:
        self.pods[pod.name] = pod
        member = self.member(pod.group, pod.rank)
        if member is None or member.pod != pod.name:
            return
        self._observe(member, pod, mono, now)

    @staticmethod
    def _observe(member: Member, pod: FabricPodFacts, mono: float, now: float) -> None:
        if pod.pod.phase in TERMINAL_POD_PHASES and member.terminal_since is None:
            member.terminal_since = mono
        if pod.pod.started and member.started_seen is None:
            member.started_seen = now
        member.evicted = member.evicted or pod.pod.evicted
        member.preempted = member.preempted or pod.pod.preempted
        member.termination = pod.termination or member.termination
        ended = member.terminal_since is not None
        if pod.pod.deleting and not member.deleted_by_us and not ended:
            # Deleted by someone else: gone now, though its end may stay in view (a Kueue pod
            # group keeps every member until the whole group has ended).
            member.gone = True

    def apply_pod_deleted(self, pod: FabricPodFacts, mono: float, now: float) -> None:
        member = self.member(pod.group, pod.rank)
        if member is None or member.pod != pod.name or member.deleted_by_us:
            self.pods.pop(pod.name, None)
            return
        if member.terminal_since is not None or pod.pod.phase in TERMINAL_POD_PHASES:
            # It ended, then was deleted (kube-controller-manager's pod garbage collector, a
            # person cleaning up): its end decides, as for a pod that stayed (its last state is
            # kept), not a pod deleted before it finished.
            self.apply_pod(pod, mono, now)
            return
        self.pods.pop(pod.name, None)
        member.gone = True
        member.evicted = member.evicted or pod.pod.evicted
        member.preempted = member.preempted or pod.pod.preempted
        member.termination = pod.termination or member.termination

    # -- the plan --

    def add_groups(
        self, plans: list[GroupPlan], pod_name: PodNamer, mono: float, now: float
    ) -> None:
        for plan in plans:
            if plan.name in self.groups:
                continue
            members = [Member(n, r, pod_name(plan.name, r)) for r, n in enumerate(plan.nodes)]
            group = self.groups[plan.name] = Group(plan, members)
            for member in members:
                self.groups_of.setdefault(member.node, []).append(plan.name)
                pod = self.pods.get(member.pod)
                if pod is not None:
                    self._observe(member, pod, mono, now)
                    group.port = group.port or pod.port
            # Rank 0's pod is made first: the earliest pod still there is the best estimate.
            made = [self.pods[m.pod].pod.created for m in members if m.pod in self.pods]
            if any(made):
                group.opened_at = min(t for t in made if t)

    def members(self) -> set[str]:
        return set(self.groups_of)

    def wants(self, node: str) -> bool:
        """A node that passed locally waits for its fabric verdict before any node action:
        every such node until the groups are planned, then the plan's members until the run's
        groups are compared."""
        if not self.planned:
            return True
        return node in self.groups_of and not self.classified

    # -- results --

    def result(self, group: Group, member: Member) -> MemberResult | None:
        """The member's result in `group`: its report's status.fabric when it is about this
        group, else what the operator recorded. A representative's report shows its
        cross-domain group once that is planned; it was chosen because it passed its domain
        group, so that is its result there. A node alone in its topology domain has a group of
        one, which runs nothing: it is tested across domains only."""
        if group.size == 1:
            return MemberResult(Verdict.PASSED, None, "alone in its topology domain")
        reported = self.reported.get(member.node)
        mine = (
            reported is not None and reported.group == group.name and reported.rank == member.rank
        )
        if reported is not None and mine and reported.verdict is not None:
            verdict = reported.raw_verdict or reported.verdict
            return MemberResult(
                verdict, reported.raw_reason, reported.raw_message, reported.by_agent
            )
        if member.recorded is not None:
            return member.recorded
        if reported is not None and reported.group != group.name and not group.plan.cross:
            later = self.groups.get(reported.group)
            if later is not None and later.plan.cross and member.node in later.plan.nodes:
                return MemberResult(Verdict.PASSED, None, "chosen for a cross-domain group")
        return None

    def _has_result(self, group: Group, member: Member) -> bool:
        """A result of this group's, its report's or the operator's (the cheap part of
        `result`: a group whose pods are gone after a restart)."""
        if member.recorded is not None:
            return True
        reported = self.reported.get(member.node)
        return (
            reported is not None and reported.group == group.name and reported.verdict is not None
        )

    def done(self, group: Group) -> bool:
        return self.group_results(group) is not None

    def group_results(self, group: Group) -> tuple[MemberResult, ...] | None:
        """Every member's result by rank once each has one (as they were when the group was
        found done: what the status shows before the run-wide comparison); else None."""
        known = self._done.get(group.name)
        if known is not None:
            return known
        found = []
        for member in group.members:
            result = self.result(group, member)
            if result is None:
                return None
            found.append(result)
        self._done[group.name] = tuple(found)
        return self._done[group.name]

    def opened(self, group: Group) -> bool:
        """Its pods were asked for (or a member has a result: after a restart, a group
        whose pods are gone)."""
        if group.name in self._opened:
            return True
        opened = (
            group.opened_at is not None
            or any(self.created(m) for m in group.members)
            or any(self._has_result(group, m) for m in group.members)
        )
        if opened:
            self._opened.add(group.name)
        return opened

    def created(self, member: Member) -> bool:
        return member.requested or member.pod in self.pods or member.gone

    def started(self, member: Member) -> bool:
        pod = self.pods.get(member.pod)
        return member.started_seen is not None or (pod is not None and pod.pod.started)

    def pod_started_at(self, member: Member) -> float | None:
        pod = self.pods.get(member.pod)
        if pod is not None and pod.started_at is not None:
            return pod.started_at
        return member.started_seen

    def formed(self, group: Group) -> bool:
        return all(self.started(m) for m in group.members)

    def active(self) -> list[Group]:
        return [g for g in self.groups.values() if self.opened(g) and not self.done(g)]

    def stopping(self, mono: float, limit: float) -> list[str]:
        """Pods the operator deleted (a group given up) that have not ended yet, for at most
        `limit` seconds after the delete: their agents may still write a result (a rank that
        lost rank 0 before its own stop signal came), and a verdict settled before that write
        would be overwritten by it."""
        found = []
        for group in self.groups.values():
            for member in group.members:
                at, pod = member.deleted_at, self.pods.get(member.pod)
                if at is None or pod is None or pod.pod.phase in TERMINAL_POD_PHASES:
                    continue
                if mono - at < limit:
                    found.append(member.pod)
        return found

    def under_way(self) -> bool:
        """Planned and not yet compared: its groups open, run or wait to be opened."""
        return self.planned and not self.classified

    def all_done(self) -> bool:
        return bool(self.planned and self.cross_planned) and all(
            self.done(g) for g in self.groups.values()
        )

    def planned_groups(self) -> dict[str, tuple[str, ...]]:
        """Group -> nodes by rank, from the reports' status.fabric (after a restart)."""
        found: dict[str, tuple[str, ...]] = {}
        for reported in self.reported.values():
            if reported.nodes and len(reported.nodes) == reported.world:
                found.setdefault(reported.group, reported.nodes)
        return found
