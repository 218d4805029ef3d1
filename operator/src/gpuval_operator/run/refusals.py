"""Pure: the API server's refusal of an agent pod, which is about the cluster, never the node.

Pod Security admission, an admission webhook or ValidatingAdmissionPolicy, a ResourceQuota, a
webhook that fails closed and cannot be called: each refuses the pod before any node sees it, so
its node is Waiting (AgentPodRefused): no verdict, not NotRun, no node action; and the run says
once what refused it (condition AgentPodsRefused: the namespace and the API server's words, which
name the policy). The run creates the pods again itself, for as long as it is open: what refused
them is configuration, which someone changes (a namespace label, a quota, a webhook back up).

A ResourceQuota that admitted some of the run's pods and refuses the rest limits how many run at
once: the run paces its creates to it (`Refused.slots`), one create for each of its pods that
ended, so the quota's slots are refilled as they free and not asked for more meanwhile, plus one
create after a growing pause, in case the quota was raised. Any other refusal (or a quota that
admits none of the run's pods) gets that one create after a growing pause. Nothing here calls the
API.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuval_api import ConditionReason as R
from gpuval_api import ConditionType
from gpuval_operator.timestamps import rfc3339

# The pause before the next create after a refusal: doubled each time it is refused again.
FIRST_PAUSE = 5.0
LONGEST_PAUSE = 120.0
# Under a quota, a create for a pod of the run that ended may still be refused: the quota's
# usage is brought down by kube-controller-manager after the pod's end, within about a second.
# A refusal within QUOTA_LAG seconds of such an end does not lower what the quota admits, and the
# freed slots are tried again after SLOT_PAUSE, doubled while refused.
SLOT_PAUSE = 0.5
QUOTA_LAG = 3.0
WORDS_LIMIT = 600

# What refused the pod, from the API server's message: (pattern, cause, how to name the policy).
_PATTERNS: tuple[tuple[re.Pattern[str], R, str], ...] = (
    (re.compile(r'violates PodSecurity "([^"]+)"'), R.POD_SECURITY, 'Pod Security "{0}"'),
    (
        re.compile(r"ValidatingAdmissionPolicy '([^']+)' with binding '([^']+)'"),
        R.ADMISSION_POLICY,
        "ValidatingAdmissionPolicy '{0}' (binding '{1}')",
    ),
    (
        re.compile(r'admission webhook "([^"]+)" denied'),
        R.ADMISSION_WEBHOOK,
        'admission webhook "{0}"',
    ),
    (
        re.compile(r'failed calling webhook "([^"]+)"'),
        R.WEBHOOK_UNAVAILABLE,
        'admission webhook "{0}" (unavailable)',
    ),
    (re.compile(r"exceeded quota: ([^,\s]+)"), R.QUOTA_EXCEEDED, 'ResourceQuota "{0}"'),
)


@dataclass(frozen=True, slots=True)
class Refusal:
    """One refusal of an agent pod: what refused it, and the API server's words."""

    cause: R
    policy: str
    status: int
    words: str

    @classmethod
    def of(cls, status: int, words: str) -> Refusal:
        words = " ".join(words.split())[:WORDS_LIMIT]
        for pattern, cause, name in _PATTERNS:
            found = pattern.search(words)
            if found is not None:
                return cls(cause, name.format(*found.groups()), status, words)
        return cls(R.POD_REFUSED, f"the API server (HTTP {status})", status, words)

    def node_message(self, pod: str, namespace: str) -> str:
        """What the waiting node's report says: the API server's words, which name the pod and
        the policy, once."""
        return (
            f"the API server refused agent pod {pod} in namespace {namespace}: {self.words} (the "
            "cluster's configuration, not the node: the pod is created again)"
        )

    @property
    def quota(self) -> bool:
        return self.cause is R.QUOTA_EXCEEDED


@dataclass(slots=True)
class Refused:
    """The run's agent pods are refused now: the last refusal, since when, when the next create
    is due, and, under a quota that admitted some of them, how many of the run's pods it admits
    at once (`admits`: None when it admitted none, or for any other refusal)."""

    refusal: Refusal
    namespace: str
    since: float
    retry_at: float
    pause: float = FIRST_PAUSE
    admits: int | None = None
    # Under a quota: when the slots freed by the run's pods that ended are tried, and the pause.
    slot_at: float = 0.0
    slot_pause: float = SLOT_PAUSE

    @classmethod
    def first(cls, refusal: Refusal, namespace: str, now: float) -> Refused:
        return cls(refusal, namespace, now, now + FIRST_PAUSE)

    def again(self, refusal: Refusal, now: float) -> None:
        """Refused once more: after the pause, a longer one before the next try (the other pods
        of the wave that was refused change nothing but the words)."""
        self.refusal = refusal
        if self.due(now):
            self.pause = min(self.pause * 2, LONGEST_PAUSE)
            self.retry_at = now + self.pause

    def paced(self, live: int, refused: bool, now: float, ended: int = 0) -> None:
        """After a wave of creates, `live` of the run's pods admitted and not ended, `ended` of
        them ended within QUOTA_LAG, `refused`: some create of the wave was. A quota that
        refuses some while `live` run admits that many at once; one that admits a create beyond
        them was raised; any other refusal, or a quota that admits none of the run's pods, is
        not paced (`admits` None)."""
        if not self.refusal.quota:
            self.admits = None
        elif not refused:
            if self.admits is not None:
                self.admits, self.slot_pause = max(self.admits, live), SLOT_PAUSE
        elif ended:
            # Pods of the run ended just now, which the quota may count still: it admits at least
            # what runs with them; their slots are tried again soon.
            self.admits = live + ended if self.admits is None else max(self.admits, live)
            self.slot_pause = min(self.slot_pause * 2, FIRST_PAUSE)
        else:
            # It admits what runs now (lowered, or other pods hold slots); none: not paced.
            self.admits, self.slot_pause = (live or None), SLOT_PAUSE
        self.slot_at = now + self.slot_pause

    def due(self, now: float) -> bool:
        return now >= self.retry_at

    def slots(self, live: int, now: float) -> int:
        """How many creates are due now, with `live` of the run's pods admitted and not ended:
        under a quota, one for each slot freed since; one when the pause is over (the quota may
        have been raised, the policy changed); else none."""
        freed = 0
        if self.admits is not None and now >= self.slot_at:
            freed = max(0, self.admits - live)
        return freed or (1 if self.due(now) else 0)

    def key(self) -> str:
        """What an Event says once per run: this cause and policy."""
        return f"{self.refusal.cause}:{self.refusal.policy}"


def refused_condition(refused: Refused | None, waiting: int) -> tuple[str, str, str, str]:
    """AgentPodsRefused (type, status, reason, message): True naming the namespace and the API
    server's words (which name the policy), with the `waiting` nodes and the next try; False
    otherwise."""
    if refused is None:
        return (
            ConditionType.AGENT_PODS_REFUSED,
            "False",
            R.AGENT_PODS_ADMITTED,
            "no agent pod of the run is refused by the API server",
        )
    found = refused.refusal
    head = (
        f"the API server refuses agent pods in namespace {refused.namespace}: {found.words}. "
        f"The cluster's configuration, not the nodes: {waiting} nodes wait (Waiting, "
        "AgentPodRefused: not tested yet, no node action)"
    )
    if refused.admits is not None:
        then = (
            f"{found.policy} admits {refused.admits} agent pods of the run at once: one is "
            "created as each ends, and one more is tried at "
        )
    else:
        then = "one pod is tried again at "
    message = (
        f"{head}; {then}{rfc3339(refused.retry_at)} (the pause doubles up to "
        f"{LONGEST_PAUSE:.0f}s), and the run goes on once one is admitted"
    )
    return ConditionType.AGENT_PODS_REFUSED, "True", found.cause, message


def refused_event(run_id: str, refused: Refused, waiting: int, live: int, done: int) -> str:
    """What the AgentPodsRefused Event says, once per run, cause and policy: the API server's
    words once, and what runs, what waits and what has a verdict as counted in the status."""
    found = refused.refusal
    if refused.admits is not None:
        what = (
            f"{found.policy} admits {refused.admits} agent pods of run {run_id} at once: "
            f"{live} run, {waiting} nodes wait their turn"
        )
        then = "a pod is created as each of the run's ends"
    else:
        what = (
            f"the API server refuses agent pods of run {run_id}: {live} run, {waiting} nodes wait"
        )
        then = "one pod is tried again after a growing pause"
    return (
        f"{what} (Waiting, not NotRun: not tested yet, none is blamed), {done} have a verdict; "
        f"{then} (condition AgentPodsRefused). In namespace {refused.namespace}: {found.words}"
    )
