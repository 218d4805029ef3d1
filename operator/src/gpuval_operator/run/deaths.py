"""Pure: what an agent pod that ended without its agent's verdict says about its node.

A verdict against a node needs evidence against the node (docs/operator/verdicts-and-actions.md,
"Verdict classes").
A pod that ends without a report is judged on what is known of its end, in this order:

1. the verdict the agent left in its termination message (its report write never arrived);
2. what the agent had found failing before it ended (its Running report lists failures, written
   as each check fails): Failed on the first one, however the pod ended (a death alone is no
   evidence, what it measured is);
3. preempted for a pod of higher priority: NotRun (AgentPreempted);
4. evicted: NotRun (PodEvicted);
5. killed by the kubelet for its memory limit (`terminated.reason` OOMKilled): NotRun
   (PodOomKilled);
6. failed before its container started (the kubelet refused it at admission, e.g. a shared GPU
   whose device plugin gives no pod every replica): NotRun (GpuSharingUnsupported on a node with
   shared GPUs, else AgentNotStarted);
7. killed from outside, SIGKILL or SIGTERM (exit code 137 or 143): NotRun (AgentKilled), tried
   again, and that attempt's state check reads the kernel log since boot;
8. anything else (the agent exited by itself, 1 or 2, without a verdict): Failed (PodFailed).

Nothing here calls the API or reads a clock (tests/unit/operator/test_operator_deaths.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gpuval_api import Reason, Verdict, verdict_of
from gpuval_api.kubernetes import (
    CONTAINER_REASON_OOM_KILLED,
    PodPhase,
)
from gpuval_api.report import ReportPhase, StatusKey, rfc3339
from gpuval_operator.podfacts import killed_from_outside
from gpuval_operator.run.state import NodeRecord


@dataclass(frozen=True, slots=True)
class Death:
    """The verdict a pod's end gives its node; `status`: a report status to write as it is (the
    agent's own from its termination message, or its own findings made final)."""

    verdict: Verdict
    reason: Reason | None
    message: str
    status: dict[str, Any] | None = None

    @classmethod
    def of(cls, reason: Reason, message: str) -> Death:
        return cls(verdict_of(reason), reason, message)


def _from_termination(r: NodeRecord, termination: dict[str, Any]) -> Death:
    verdict = Verdict(termination.get(StatusKey.VERDICT) or Verdict.FAILED)
    message = (
        f"{termination.get(StatusKey.MESSAGE) or ''} (from agent pod {r.pod}'s termination "
        "message: its report write never arrived)"
    )
    reason = termination.get(StatusKey.REASON)
    return Death(verdict, Reason(reason) if reason else None, message.strip(), termination)


def _findings(r: NodeRecord, reason: Reason, found: str, how: str) -> Death:
    """Failed on what the agent had found: its report keeps the failures it listed and is made
    final with the first one."""
    message = f"agent pod {r.pod} {how} after its checks found {reason}: {found}"
    status: dict[str, Any] = {
        StatusKey.PHASE: str(ReportPhase.COMPLETED),
        StatusKey.VERDICT: str(Verdict.FAILED),
        StatusKey.REASON: str(reason),
        StatusKey.MESSAGE: message,
        StatusKey.COMPLETED_AT: rfc3339(datetime.now(UTC)),
    }
    return Death(Verdict.FAILED, reason, message, status)


def _how(r: NodeRecord, code: str) -> tuple[str, Death | None]:
    """How the pod ended, in words, and the verdict that end gives when the agent had found
    nothing (None: the agent exited by itself, PodFailed)."""
    if r.preempted:
        how = "was preempted for a pod of higher priority"
        return how, Death.of(Reason.AGENT_PREEMPTED, f"agent pod {r.pod} {how}")
    if r.evicted:
        return "was evicted", Death.of(Reason.POD_EVICTED, f"agent pod {r.pod} was evicted")
    if r.terminated_reason == CONTAINER_REASON_OOM_KILLED:
        how = f"was OOM-killed{code}"
        message = f"agent pod {r.pod} {how}: raise spec.agent.resources.limits.memory"
        return how, Death.of(Reason.POD_OOM_KILLED, message)
    if r.pod_phase == PodPhase.FAILED and not r.started:
        why = f" ({r.pod_reason})" if r.pod_reason else ""
        how = f"failed before its container started{why}"
        if r.sharing is not None:
            message = (
                f"agent pod {r.pod} {how}: the node's GPUs are shared ({r.sharing}) and its "
                "device plugin gave no pod every replica"
            )
            return how, Death.of(Reason.GPU_SHARING_UNSUPPORTED, message)
        return how, Death.of(Reason.AGENT_NOT_STARTED, f"agent pod {r.pod} {how}")
    if killed_from_outside(r.exit_code, r.terminated_reason):
        message = (
            f"agent pod {r.pod} was killed from outside{code} before it wrote a verdict, and its "
            "checks had found nothing failing: no evidence against the node"
        )
        return f"was killed{code}", Death.of(Reason.AGENT_KILLED, message)
    return (f"failed{code}" if r.pod_phase == PodPhase.FAILED else "exited"), None


def ended(r: NodeRecord) -> Death:
    """The verdict of a pod that ended (and stayed without a report for the grace period)."""
    if r.termination is not None:
        return _from_termination(r, r.termination)
    code = "" if r.exit_code is None else f" with exit code {r.exit_code}"
    how, death = _how(r, code)
    if r.found is not None:
        return _findings(r, *r.found, how)
    if death is not None:
        return death
    return Death.of(Reason.POD_FAILED, f"agent pod {r.pod} {how} without writing a verdict")


def gone(r: NodeRecord) -> Death:
    """A pod deleted before it finished, by someone else than the operator."""
    if r.preempted:
        how, reason = "was preempted for a pod of higher priority", Reason.AGENT_PREEMPTED
    elif r.evicted:
        how, reason = "was evicted", Reason.POD_EVICTED
    else:
        how, reason = "was deleted", Reason.POD_DELETED
    if r.found is not None:
        return _findings(r, *r.found, how)
    return Death.of(reason, f"agent pod {r.pod} {how} before it finished")
