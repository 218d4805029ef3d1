"""The pure decisions of a run's fabric phase: which groups open now, which pods a crash left
unmade, and which members ended without a result and what each gets: the group did not form in
time (FabricGangNotFormed), the pod was deleted, it ended without writing, or it ran past its
deadline (NcclTimeout: it had started).

Nothing here calls the API or reads a clock (tests/unit/operator/test_operator_fabric_life.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpuval_api import Reason
from gpuval_api.fabric import (
    FabricConfig,
    FabricKey,
    build_operator_fabric_status,
)
from gpuval_api.kubernetes import CONTAINER_REASON_OOM_KILLED, TERMINAL_POD_PHASES
from gpuval_operator.fabric.plan import gang_deadline, pod_deadline
from gpuval_operator.fabric.state import FabricState, Group, Member
from gpuval_operator.fabric.verdicts import MemberResult, result_of
from gpuval_operator.podfacts import PodFacts, killed_from_outside

# How long a fabric pod the operator deleted is given to end before the groups are compared
# without it: Kubernetes' default terminationGracePeriodSeconds (the fabric pods set none).
STOP_SECONDS = 30.0


@dataclass(frozen=True, slots=True)
class MemberOutcome:
    """A member that ended without a result of its agent, and the status.fabric it gets."""

    group: str
    rank: int
    status: dict[str, object]
    result: MemberResult
    delete_pod: bool = False
    # Its own pod was made and never started: the node is NotRun (design.md, verdict classes).
    never_started: bool = False


def groups_to_open(run: FabricState, limit: int) -> list[Group]:
    """Groups that start now, in plan order: whole groups while the nodes in fabric pods stay
    within `limit` (a group larger than the limit runs alone), never a node in two groups at
    once (a representative's cross-domain group waits for its domain group)."""
    busy: set[str] = set()
    for group in run.active():
        busy.update(group.plan.nodes)
    running = len(busy)
    chosen: list[Group] = []
    for group in run.groups.values():
        if run.opened(group):
            continue
        if busy.intersection(group.plan.nodes):
            busy.update(group.plan.nodes)  # later groups of these nodes wait for this one
            continue
        if running and running + group.size > limit:
            break
        chosen.append(group)
        running += group.size
        busy.update(group.plan.nodes)
    return chosen


def groups_to_launch(run: FabricState) -> list[Group]:
    """Opened groups with pods still to make: a group's pods are all made when it opens, so these
    are the members a crash left out, in a group opened by its pods, before any member has a
    result (pods that vanished after the group ran are not made again)."""
    ready: list[Group] = []
    for group in run.groups.values():
        if run.done(group) or gang_broken(run, group) or group.opened_at is None:
            continue
        if any(run.result(group, m) is not None for m in group.members):
            continue
        if any(not run.created(m) and m.refused is None for m in group.members):
            ready.append(group)
    return ready


def _terminal(run: FabricState, member: Member) -> bool:
    pod = run.pods.get(member.pod)
    return pod is not None and pod.pod.phase in TERMINAL_POD_PHASES


def _gated(run: FabricState, member: Member) -> bool:
    pod = run.pods.get(member.pod)
    return pod is not None and pod.pod.gated


def gang_broken(run: FabricState, group: Group) -> bool:
    """The group cannot form any more: a pod was refused, deleted or ended before every pod
    ran, or the operator already gave it up (before a restart)."""
    for member in group.members:
        result = run.result(group, member)
        if result is not None and result.reason is Reason.FABRIC_GANG_NOT_FORMED:
            return True
        if member.refused is not None or member.gone or _terminal(run, member):
            return True
    return False


# Nodes deleted (None) or NotReady past the grace period (since when, why): NodeWatch.unavailable.
Unavailable = Mapping[str, tuple[float, str] | None]


def gang_due_gone(run: FabricState, group: Group, gone: Unavailable) -> bool:
    """A member's node went away before the group formed: it cannot form."""
    return any(m.node in gone and not run.started(m) for m in group.members)


def formed(run: FabricState, group: Group) -> bool:
    return all(run.started(m) or run.result(group, m) is not None for m in group.members)


def gang_due(run: FabricState, group: Group, config: FabricConfig, now: float) -> bool:
    if formed(run, group):
        return False
    if gang_broken(run, group):
        return True
    if group.opened_at is None:
        # Opened by its results alone: after a restart, a group whose pods are all gone.
        return not any(run.created(m) for m in group.members)
    rank0 = group.members[0]
    return now >= gang_deadline(config, group.opened_at, run.pod_started_at(rank0))


def gang_outcomes(run: FabricState, group: Group, config: FabricConfig) -> list[MemberOutcome]:
    """Every member without a result: NotRun (FabricGangNotFormed), the pods deleted; a node
    whose own pod was made and did not start is NotRun itself."""
    waiting = [m for m in group.members if not run.started(m)]
    names = ", ".join(m.node for m in waiting) or "none"
    why = next((m.refused for m in group.members if m.refused), None)
    message = (
        f"fabric group {group.name} did not form: the fabric pods of {names} did not start "
        f"within {config.timeouts.gang_seconds}s (fabric.timeouts.gangSeconds) or before rank "
        "0 stopped waiting for them (fabric.timeouts.initSeconds)"
    )
    if why is not None:
        message = f"fabric group {group.name} did not form: {why}"
    elif waiting and all(_gated(run, m) for m in waiting):
        message = (
            f"fabric group {group.name} did not form: Kueue did not admit its pod group within "
            f"{config.timeouts.gang_seconds}s (fabric.timeouts.gangSeconds; the queue's quota "
            "could not hold every member), so none of its pods held a GPU"
        )
    outcomes: list[MemberOutcome] = []
    for member in group.members:
        result = run.result(group, member)
        if result is not None and result.reason is Reason.FABRIC_GANG_NOT_FORMED:
            continue
        own = run.created(member) and not run.started(member) and member.refused is None
        text = f"{message}; its own pod never started" if own else message
        status = build_operator_fabric_status(
            group.name, group.plan.nodes, member.node, Reason.FABRIC_GANG_NOT_FORMED, text
        )
        exists = member.pod in run.pods and not _terminal(run, member)
        outcomes.append(
            MemberOutcome(group.name, member.rank, status, result_of(status), exists, own)
        )
    return outcomes


def _from_termination(
    group: Group, member: Member, termination: dict[str, object]
) -> MemberOutcome:
    status = dict(termination)
    status[FabricKey.NODES] = list(group.plan.nodes)
    status[FabricKey.MESSAGE] = (
        f"{termination.get(FabricKey.MESSAGE) or ''} (from fabric pod {member.pod}'s termination "
        "message: its report write never arrived)"
    ).strip()
    return MemberOutcome(group.name, member.rank, status, result_of(status, by_agent=True))


def _operator(
    group: Group, member: Member, reason: Reason, message: str, **kw: bool
) -> MemberOutcome:
    status = build_operator_fabric_status(
        group.name, group.plan.nodes, member.node, reason, message
    )
    return MemberOutcome(group.name, member.rank, status, result_of(status), **kw)


def _node_unavailable(
    group: Group, member: Member, not_ready: tuple[float, str] | None, now: float, pod: bool
) -> MemberOutcome:
    if not_ready is None:
        text = f"node {member.node} was deleted while its fabric pod ran"
        return _operator(group, member, Reason.NODE_GONE, text, delete_pod=pod)
    since, why = not_ready
    text = (
        f"node {member.node} was NotReady for {now - since:.0f}s ({why}) while its fabric pod "
        "ran: its fabric was not tested"
    )
    return _operator(group, member, Reason.NODE_NOT_READY, text, delete_pod=pod)


def _ended(group: Group, member: Member, pod: PodFacts) -> MemberOutcome:
    """A fabric pod that ended without a fabric verdict (run.deaths says why the same way)."""
    code = "" if pod.exit_code is None else f" with exit code {pod.exit_code}"
    if pod.preempted:
        text = f"fabric pod {member.pod} was preempted for a pod of higher priority"
        return _operator(group, member, Reason.AGENT_PREEMPTED, text)
    if pod.terminated_reason == CONTAINER_REASON_OOM_KILLED:
        text = (
            f"fabric pod {member.pod} was OOM-killed{code}: raise "
            "spec.agent.resources.limits.memory"
        )
        return _operator(group, member, Reason.POD_OOM_KILLED, text)
    if killed_from_outside(pod.exit_code, pod.terminated_reason):
        text = (
            f"fabric pod {member.pod} was killed from outside{code} before it wrote a fabric "
            "verdict: no evidence against the node"
        )
        return _operator(group, member, Reason.AGENT_KILLED, text)
    text = f"fabric pod {member.pod} ended{code} without a fabric verdict"
    return _operator(group, member, Reason.POD_FAILED, text)


def member_outcome(
    run: FabricState,
    group: Group,
    member: Member,
    config: FabricConfig,
    *,
    now: float,
    monotonic: float,
    grace: float,
    gone: Unavailable | None = None,
) -> MemberOutcome | None:
    """What a member of a formed group without a result gets now, if anything (`gone`: its
    node's entry of NodeWatch.unavailable, when it has one)."""
    pod = run.pods.get(member.pod)
    termination = member.termination or (pod.termination if pod is not None else None)
    if gone is not None and member.node in gone:
        return _node_unavailable(group, member, gone[member.node], now, pod is not None)
    if member.gone:
        if termination is not None:
            return _from_termination(group, member, termination)
        if member.preempted:
            text = f"fabric pod {member.pod} was preempted for a pod of higher priority"
            return _operator(group, member, Reason.AGENT_PREEMPTED, text)
        reason = Reason.POD_EVICTED if member.evicted else Reason.POD_DELETED
        what = "evicted" if member.evicted else "deleted"
        return _operator(
            group, member, reason, f"fabric pod {member.pod} was {what} before it finished"
        )
    ended = member.terminal_since is not None and monotonic - member.terminal_since >= grace
    if pod is not None and ended:
        if termination is not None:
            return _from_termination(group, member, termination)
        return _ended(group, member, pod.pod)
    if group.opened_at is not None and now >= pod_deadline(config, group.opened_at, group.size):
        seconds = pod_deadline(config, group.opened_at, group.size) - group.opened_at
        text = (
            f"fabric pod {member.pod} started but its agent did not finish within {seconds:.0f}s "
            "(gang, init and phase timeouts of spec.fabric.timeouts)"
        )
        return _operator(group, member, Reason.NCCL_TIMEOUT, text, delete_pod=pod is not None)
    return None


def due_outcomes(
    run: FabricState,
    config: FabricConfig,
    *,
    now: float,
    monotonic: float,
    grace: float,
    gone: Unavailable | None = None,
) -> list[MemberOutcome]:
    """Every member of an open group that gets a result from the operator now (`gone`: nodes
    deleted or NotReady past the grace period)."""
    gone = gone or {}
    outcomes: list[MemberOutcome] = []
    for group in run.groups.values():
        if not run.opened(group) or run.done(group):
            continue
        if not formed(run, group) and (
            gang_due(run, group, config, now) or gang_due_gone(run, group, gone)
        ):
            outcomes += gang_outcomes(run, group, config)
            continue
        if not formed(run, group):
            continue
        for member in group.members:
            if run.result(group, member) is not None:
                continue
            found = member_outcome(
                run,
                group,
                member,
                config,
                now=now,
                monotonic=monotonic,
                grace=grace,
                gone=gone,
            )
            if found is not None:
                outcomes.append(found)
    return outcomes
