"""The pure decisions of a validation's life: what the controller does next, which running nodes
ended without their agent's verdict, and which pending nodes start now.

Nothing here calls the API or reads a clock: the controller passes the time in and carries out
what comes back, so every transition is unit-tested without a cluster (tests/unit/
operator/test_operator_lifecycle.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, auto
from typing import Any

from gpuval_api import Reason, Verdict, verdict_of
from gpuval_api.crd import RetryPolicy, RunTrigger
from gpuval_operator.run import deaths
from gpuval_operator.run.state import NodeRecord, Phase, RunState


class Step(Enum):
    INVALID = auto()  # mark the spec invalid (after superseding an active run, if any)
    EXECUTE = auto()  # drive the active run of this generation
    RESTART = auto()  # supersede the active run of an older generation, start a new one
    START = auto()  # start a run: none yet, a new generation, or a schedule tick that is due
    PLAN_TICK = auto()  # a completed scheduled run without a recorded next tick: compute it
    EXTEND = auto()  # nodes arrived (spec.gating) after the run completed: reopen it for them
    WAIT = auto()  # nothing to do until the spec changes (or `until`, when given)


@dataclass(frozen=True, slots=True)
class Decision:
    step: Step
    trigger: RunTrigger | None = None
    until: float | None = None
    supersede: bool = False


@dataclass(frozen=True, slots=True)
class RunFacts:
    """What `decide` needs to know about the current run."""

    generation: int
    completed: bool


def decide(
    *,
    valid: bool,
    generation: int,
    run: RunFacts | None,
    scheduled: bool,
    next_run_at: float | None,
    now: float,
    arrivals: bool = False,
    proof_due_at: float | None = None,
) -> Decision:
    """The controller's next step for a validation at spec `generation`; `arrivals`: nodes the
    gating queued have waited out their batch window; `proof_due_at`: when the first selected
    node's proof outgrows spec.maxProofAgeSeconds (None: off, or no node)."""
    active = run is not None and not run.completed
    if not valid:
        return Decision(Step.INVALID, supersede=active)
    if run is None:
        return Decision(Step.START, RunTrigger.CREATED)
    if run.generation != generation:
        step = Step.RESTART if active else Step.START
        return Decision(step, RunTrigger.SPEC_CHANGED)
    if active:
        return Decision(Step.EXECUTE)
    tick_due = scheduled and next_run_at is not None and now >= next_run_at
    if arrivals and not tick_due:
        return Decision(Step.EXTEND)
    # A schedule's tick takes every node: a proof that expires at the same time waits for it.
    if proof_due_at is not None and now >= proof_due_at and not tick_due:
        return Decision(Step.START, RunTrigger.PROOF_EXPIRED)
    if not scheduled:
        return Decision(Step.WAIT, until=proof_due_at)
    if next_run_at is None:
        return Decision(Step.PLAN_TICK)
    if now >= next_run_at:
        return Decision(Step.START, RunTrigger.SCHEDULE)
    return Decision(Step.WAIT, until=min(next_run_at, proof_due_at or next_run_at))


@dataclass(frozen=True, slots=True)
class Outcome:
    """A running node that ended without a verdict written by its agent, and what it gets."""

    node: str
    verdict: Verdict
    reason: Reason | None
    message: str
    delete_pod: bool = False
    # The node's own fate takes precedence: the controller looks the node up first.
    check_node: bool = False
    # The report status to write for the agent: its verdict from the termination message.
    status: dict[str, Any] | None = None

    @classmethod
    def of(cls, node: str, reason: Reason, message: str, **kwargs: Any) -> Outcome:
        """The outcome an operator-side reason gives: Failed or NotRun by the catalogue."""
        return cls(node, verdict_of(reason), reason, message, **kwargs)


IMAGE_PULL_REASONS = frozenset(
    {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"}
)


def node_gone(r: NodeRecord, why: str) -> Outcome:
    """The node was deleted: evidence against it only if its agent had started."""
    reason = Reason.NODE_GONE if r.started else Reason.NODE_GONE_UNTESTED
    return Outcome.of(r.node, reason, f"node {r.node} {why}", delete_pod=True)


def node_not_ready(r: NodeRecord, now: float) -> Outcome:
    """The node stayed NotReady past the grace period: not tested (its kubelet, runtime or network
    is no evidence against its GPUs), tried again once Ready."""
    since, why = r.not_ready or (now, "")
    doing = {Phase.PENDING: "was to start"}.get(r.phase, "ran" if r.started else "waited to start")
    detail = f" ({why})" if why else ""
    message = (
        f"node {r.node} was NotReady for {now - since:.0f}s{detail} while its agent {doing}: not "
        "tested, tried again once Ready"
    )
    return Outcome.of(r.node, Reason.NODE_NOT_READY, message, delete_pod=r.phase is Phase.RUNNING)


def _death(r: NodeRecord, death: deaths.Death, **kwargs: Any) -> Outcome:
    return Outcome(
        r.node, death.verdict, death.reason, death.message, status=death.status, **kwargs
    )


def _timed_out(r: NodeRecord, timeout: float) -> Outcome:
    kwargs: dict[str, Any] = {"delete_pod": True, "check_node": True}
    if not r.scheduled:
        why = f": {r.unschedulable}" if r.unschedulable else ""
        message = f"agent pod {r.pod} was not scheduled within {timeout:.0f}s{why}"
        if r.claimed:
            message = (
                f"{message}; it asks, through a ResourceClaim, for every device the node "
                "publishes, so that no workload shares one while it is tested"
            )
            return Outcome.of(r.node, Reason.DEVICES_CLAIMED, message, **kwargs)
        if r.sharing is not None:
            message = (
                f"{message}; the node's GPUs are shared ({r.sharing}) and the agent asks for "
                "every replica, so that no tenant shares a GPU while it is tested: workloads "
                "held some"
            )
            return Outcome.of(r.node, Reason.GPU_REPLICAS_HELD, message, **kwargs)
        return Outcome.of(r.node, Reason.POD_UNSCHEDULABLE, message, **kwargs)
    if not r.started:
        waiting = f" ({r.waiting_reason})" if r.waiting_reason else ""
        message = f"agent pod {r.pod}'s container did not start within {timeout:.0f}s{waiting}"
        reason = (
            Reason.IMAGE_PULL_FAILED
            if r.waiting_reason in IMAGE_PULL_REASONS
            else Reason.AGENT_NOT_STARTED
        )
        return Outcome.of(r.node, reason, message, **kwargs)
    message = f"agent pod {r.pod} did not finish within {timeout:.0f}s"
    return Outcome.of(r.node, Reason.TIMED_OUT, message, **kwargs)


def due_outcomes(
    run: RunState,
    *,
    now: float,
    monotonic: float,
    timeout: float,
    grace: float,
    not_ready_grace: float = float("inf"),
) -> list[Outcome]:
    """Running nodes that ended without their agent's report, and what each gets.

    `now` is wall-clock time (compared with pod creation times, which survive an operator restart);
    `monotonic` is compared with when the operator saw a pod end, because the agent's report and the
    pod's end arrive on two different watches in either order: a pod that ended is given `grace`
    seconds for its report to show up. A node NotReady for less than `not_ready_grace` seconds
    goes on as if nothing happened: its agent may well finish and write its report.
    """
    outcomes: list[Outcome] = []
    for r in run.nodes.values():
        if r.phase is Phase.PENDING and r.not_ready is not None:
            # Its next attempt waits for the node to be Ready, for one node timeout at most.
            if now - max(r.not_ready[0], r.not_before) >= timeout:
                outcomes.append(node_not_ready(r, now))
            continue
        if r.phase is not Phase.RUNNING:
            continue
        if r.node_gone:
            outcomes.append(node_gone(r, "was deleted during the run"))
        elif r.not_ready is not None and now - r.not_ready[0] >= not_ready_grace:
            outcomes.append(node_not_ready(r, now))
        elif r.pod_gone:
            outcomes.append(_death(r, deaths.gone(r), check_node=True))
        elif r.terminal_since is not None and monotonic - r.terminal_since >= grace:
            outcomes.append(_death(r, deaths.ended(r)))
        elif r.pod_created is not None and now - r.pod_created >= timeout:
            outcomes.append(_timed_out(r, timeout))
    return outcomes


# NotRun reasons a retry in the same run cannot change: the fabric's group did not form (its
# local checks passed; the next run tries again), a node's GPU sharing lets no pod hold a GPU, its
# GPUs are handed out by both the device plugin and a DRA driver (a person's change, either way).
NOT_RETRIED = frozenset(
    {
        Reason.FABRIC_GANG_NOT_FORMED,
        Reason.GPU_SHARING_UNSUPPORTED,
        Reason.DEVICES_PUBLISHED_TWICE,
    }
)


def retry_wanted(record: NodeRecord, policy: RetryPolicy) -> bool:
    """A node gpuval could not test gets another attempt while it has attempts left, unless
    another attempt in this run cannot change it (NOT_RETRIED)."""
    return (
        record.phase is Phase.NOT_RUN
        and record.reason not in NOT_RETRIED
        and record.attempt < policy.attempts
    )


def next_wave(run: RunState, limit: int, now: float = float("inf")) -> list[NodeRecord]:
    """Pending nodes (whose report exists and whose backoff is over) that start now, so at most
    `limit` run at once."""
    slots = limit - run.running()
    wave: list[NodeRecord] = []
    if slots <= 0:
        return wave
    for record in run.pending(now):
        if len(wave) >= slots:
            break
        wave.append(record)
    return wave
