"""What the operator remembers of one run's fabric phase: its groups, and the compact views of
their reports' status.fabric and of their pods. Pure and synchronous.

Everything a decision needs is rebuilt from three durable sources after a restart: the reports'
status.fabric (each member's group, rank and node list, written before any pod; then its
result), the fabric pods (labels, the port annotation, their termination messages), and the
GpuValidation's annotation gpuval.dev/fabric-planned (the plan is complete). What lives only
here is bookkeeping a restart can redo: which pod this process deleted, since when a pod has
been terminal, the results it has written but not yet seen come back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gpuval_api.fabric import FabricKey, FabricPair
from gpuval_api.kubernetes import TERMINAL_POD_PHASES
from gpuval_api.reasons import Reason
from gpuval_api.result import Verdict
from gpuval_operator.fabricplan import GroupPlan
from gpuval_operator.fabricpodview import FabricPodView
from gpuval_operator.fabricviews import FabricView

if TYPE_CHECKING:
    from gpuval_operator.fabricverdicts import Classification

# (group, rank) -> the fabric pod's name (names.fabric_pod_name, for one run).
PodNamer = Callable[[str, int], str]


@dataclass(frozen=True, slots=True)
class FabricRecord:
    """One member's result in one group: the agent's own, or what the operator recorded."""

    verdict: Verdict
    reason: Reason | None
    message: str
    by_agent: bool = False


@dataclass(slots=True)
class Member:
    node: str
    rank: int
    pod: str
    requested: bool = False  # this process asked for the pod
    refused: str | None = None  # the API server refused the pod: why
    deleted_by_us: bool = False
    gone: bool = False  # the pod was deleted by someone else, or vanished
    evicted: bool = False
    terminal_since: float | None = None  # monotonic
    started_seen: float | None = None  # wall clock when this process first saw it started
    recorded: FabricRecord | None = None  # written by the operator, not yet read back
    termination: dict[str, object] | None = None  # the fabric verdict its pod's agent left
    never_started: bool = False  # its pod was made and did not start in time (gang)


@dataclass(slots=True)
class Group:
    plan: GroupPlan
    members: list[Member]
    port: int | None = None
    opened_at: float | None = None  # wall clock: rank 0's pod creation

    @property
    def name(self) -> str:
        return self.plan.name

    @property
    def size(self) -> int:
        return len(self.members)


@dataclass(slots=True)
class FabricRun:
    """The fabric phase of one run."""

    views: dict[str, FabricView] = field(default_factory=dict)  # node -> status.fabric
    pods: dict[str, FabricPodView] = field(default_factory=dict)  # pod name -> view
    pairs: dict[str, tuple[FabricPair, ...]] = field(default_factory=dict)  # group -> pairs
    busbw: dict[str, float] = field(default_factory=dict)  # group -> busbw, GB/s
    groups: dict[str, Group] = field(default_factory=dict)  # in plan order
    groups_of: dict[str, list[str]] = field(default_factory=dict)  # node -> its groups
    planned: bool = False
    cross_planned: bool = False
    classified: bool = False
    started_at: float | None = None
    completed_at: float | None = None
    classification: Classification | None = None

    # -- what arrives --

    def apply_report(self, node: str, view: FabricView | None) -> None:
        if view is None:
            self.views.pop(node, None)
            return
        self.views[node] = view
        if view.pairs and view.group not in self.pairs:
            self.pairs[view.group] = view.pairs
        if view.busbw is not None:
            self.busbw.setdefault(view.group, view.busbw)

    def member(self, group: str, rank: int) -> Member | None:
        found = self.groups.get(group)
        if found is None or not 0 <= rank < found.size:
            return None
        return found.members[rank]

    def apply_pod(self, view: FabricPodView, mono: float, now: float) -> None:
        self.pods[view.name] = view
        member = self.member(view.group, view.rank)
        if member is None or member.pod != view.name:
            return
        self._observe(member, view, mono, now)

    @staticmethod
    def _observe(member: Member, view: FabricPodView, mono: float, now: float) -> None:
        if view.pod.phase in TERMINAL_POD_PHASES and member.terminal_since is None:
            member.terminal_since = mono
        if view.pod.started and member.started_seen is None:
            member.started_seen = now
        member.evicted = member.evicted or view.pod.evicted
        member.termination = view.termination or member.termination

    def apply_pod_deleted(self, view: FabricPodView) -> None:
        self.pods.pop(view.name, None)
        member = self.member(view.group, view.rank)
        if member is not None and member.pod == view.name and not member.deleted_by_us:
            member.gone = True
            member.evicted = member.evicted or view.pod.evicted
            member.termination = view.termination or member.termination

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
                view = self.pods.get(member.pod)
                if view is not None:
                    self._observe(member, view, mono, now)
                    group.port = group.port or view.port
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

    def result(self, group: Group, member: Member) -> FabricRecord | None:
        """The member's result in `group`: its report's status.fabric when it is about this
        group, else what the operator recorded. A representative's report shows its
        cross-domain group once that is planned; it was chosen because it passed its domain
        group, so that is its result there. A node alone in its topology domain has a group of
        one, which runs nothing: it is tested across domains only."""
        if group.size == 1:
            return FabricRecord(Verdict.PASSED, None, "alone in its topology domain")
        view = self.views.get(member.node)
        mine = view is not None and view.group == group.name and view.rank == member.rank
        if view is not None and mine and view.verdict is not None:
            verdict = view.raw_verdict or view.verdict
            return FabricRecord(verdict, view.raw_reason, view.raw_message, view.by_agent)
        if member.recorded is not None:
            return member.recorded
        if view is not None and view.group != group.name and not group.plan.cross:
            later = self.groups.get(view.group)
            if later is not None and later.plan.cross and member.node in later.plan.nodes:
                return FabricRecord(Verdict.PASSED, None, "chosen for a cross-domain group")
        return None

    def done(self, group: Group) -> bool:
        return all(self.result(group, m) is not None for m in group.members)

    def opened(self, group: Group) -> bool:
        """Its rank 0 pod was asked for (or a member has a result: after a restart, a group
        whose pods are gone)."""
        return (
            group.opened_at is not None
            or any(self.created(m) for m in group.members)
            or any(self.result(group, m) is not None for m in group.members)
        )

    def created(self, member: Member) -> bool:
        return member.requested or member.pod in self.pods or member.gone

    def started(self, member: Member) -> bool:
        view = self.pods.get(member.pod)
        return member.started_seen is not None or (view is not None and view.pod.started)

    def pod_started_at(self, member: Member) -> float | None:
        view = self.pods.get(member.pod)
        if view is not None and view.started_at is not None:
            return view.started_at
        return member.started_seen

    def formed(self, group: Group) -> bool:
        return all(self.started(m) for m in group.members)

    def active(self) -> list[Group]:
        return [g for g in self.groups.values() if self.opened(g) and not self.done(g)]

    def all_done(self) -> bool:
        return bool(self.planned and self.cross_planned) and all(
            self.done(g) for g in self.groups.values()
        )

    def planned_groups(self) -> dict[str, tuple[str, ...]]:
        """Group -> nodes by rank, from the reports' status.fabric (after a restart)."""
        found: dict[str, tuple[str, ...]] = {}
        for view in self.views.values():
            if view.nodes and len(view.nodes) == view.world:
                found.setdefault(view.group, view.nodes)
        return found


def record_of(status: Mapping[str, object], *, by_agent: bool = False) -> FabricRecord:
    """The record a status.fabric the operator writes stands for (`by_agent`: taken from the
    agent's termination message)."""
    reason = status.get(FabricKey.REASON)
    return FabricRecord(
        Verdict(str(status.get(FabricKey.VERDICT))),
        Reason(str(reason)) if reason else None,
        str(status.get(FabricKey.MESSAGE) or ""),
        by_agent,
    )
