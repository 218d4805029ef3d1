"""Pure: what an agent pod that ended without its agent's verdict says about its node.

A verdict against a node needs evidence against the node (docs/operator.md, "Verdict classes").
A pod that ends without a report is judged on what is known of its end, in this order:

1. the verdict the agent left in its termination message (its report write never arrived);
2. preempted for a pod of higher priority: NotRun (AgentPreempted);
3. evicted: NotRun (PodEvicted);
4. killed by the kubelet for its memory limit (`terminated.reason` OOMKilled): NotRun
   (PodOomKilled);
5. failed before its container started (the kubelet refused it at admission, e.g. a shared GPU
   whose device plugin gives no pod every replica): NotRun (GpuSharingUnsupported on a node with
   shared GPUs, else AgentNotStarted);
6. killed from outside, SIGKILL or SIGTERM (exit code 137 or 143): Failed with the agent's own
   words when its Running report already listed a failure (what it had found before it was
   killed counts: an XID, a miscompare), else NotRun (AgentKilled) and tried again, whose state
   check reads the kernel log since boot;
7. anything else (the agent exited by itself, 1 or 2, without a verdict): Failed, on its own
   findings when its Running report listed some, else PodFailed.

Nothing here calls the API or reads a clock (tests/unit/test_operator_deaths.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gpuval_api.kubernetes import (
    CONTAINER_REASON_OOM_KILLED,
    EXIT_CODE_SIGKILL,
    EXIT_CODE_SIGTERM,
    PodPhase,
)
from gpuval_api.reasons import Reason, verdict_of
from gpuval_api.report import ReportPhase, StatusKey, rfc3339
from gpuval_api.result import Verdict
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


def killed_from_outside(exit_code: int | None, terminated_reason: str | None) -> bool:
    """SIGKILL or SIGTERM as the kubelet reports it, not the kubelet's own OOM kill."""
    return (
        exit_code in (EXIT_CODE_SIGKILL, EXIT_CODE_SIGTERM)
        and terminated_reason != CONTAINER_REASON_OOM_KILLED
    )


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


def _killed(r: NodeRecord, code: str) -> Death:
    if r.found is not None:
        return _findings(r, *r.found, f"was killed{code}")
    message = (
        f"agent pod {r.pod} was killed from outside{code} before it wrote a verdict, and its "
        "checks had found nothing failing: no evidence against the node"
    )
    return Death.of(Reason.AGENT_KILLED, message)


def ended(r: NodeRecord) -> Death:
    """The verdict of a pod that ended (and stayed without a report for the grace period)."""
    if r.termination is not None:
        return _from_termination(r, r.termination)
    if r.preempted:
        return Death.of(
            Reason.AGENT_PREEMPTED, f"agent pod {r.pod} was preempted for a pod of higher priority"
        )
    if r.evicted:
        return Death.of(Reason.POD_EVICTED, f"agent pod {r.pod} was evicted")
    code = "" if r.exit_code is None else f" with exit code {r.exit_code}"
    if r.terminated_reason == CONTAINER_REASON_OOM_KILLED:
        return Death.of(
            Reason.POD_OOM_KILLED,
            f"agent pod {r.pod} was OOM-killed{code}: raise spec.agent.resources.limits.memory",
        )
    if r.pod_phase == PodPhase.FAILED and not r.started:
        why = f" ({r.pod_reason})" if r.pod_reason else ""
        if r.sharing is not None:
            return Death.of(
                Reason.GPU_SHARING_UNSUPPORTED,
                f"agent pod {r.pod} failed before its container started{why}: the node's GPUs "
                f"are shared ({r.sharing}) and its device plugin gave no pod every replica",
            )
        return Death.of(
            Reason.AGENT_NOT_STARTED, f"agent pod {r.pod} failed before its container started{why}"
        )
    if killed_from_outside(r.exit_code, r.terminated_reason):
        return _killed(r, code)
    how = f"failed{code}" if r.pod_phase == PodPhase.FAILED else "exited"
    if r.found is not None:
        return _findings(r, *r.found, f"{how} without a verdict")
    return Death.of(Reason.POD_FAILED, f"agent pod {r.pod} {how} without writing a verdict")


def gone(r: NodeRecord) -> Death:
    """A pod deleted before it finished, by someone else than the operator."""
    if r.preempted:
        return Death.of(
            Reason.AGENT_PREEMPTED,
            f"agent pod {r.pod} was preempted for a pod of higher priority before it finished",
        )
    what = "evicted" if r.evicted else "deleted"
    reason = Reason.POD_EVICTED if r.evicted else Reason.POD_DELETED
    return Death.of(reason, f"agent pod {r.pod} was {what} before it finished")
