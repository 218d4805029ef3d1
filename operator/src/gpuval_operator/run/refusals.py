"""Pure: the API server's refusal of an agent pod, which is about the cluster, never the node.

Pod Security admission, an admission webhook or ValidatingAdmissionPolicy, a ResourceQuota, a
webhook that fails closed and cannot be called: each refuses the pod before any node sees it, so
its node is `NotRun` (AgentPodRefused), no node action follows, and the run says once what
refused it (condition AgentPodsRefused: the namespace, the policy, the API server's words). The
run tries again itself, one create at a time with a growing pause, for as long as it is open:
what refused the pods is configuration, which someone changes (a namespace label, a quota, a
webhook back up), and the run goes on once a pod is admitted. Nothing here calls the API.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuval_api.conditions import ConditionReason as R
from gpuval_api.conditions import ConditionType
from gpuval_operator.timestamps import rfc3339

# The pause before the next create after a refusal: doubled each time it is refused again.
FIRST_PAUSE = 5.0
LONGEST_PAUSE = 120.0
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
        """What the refused node's report says."""
        return (
            f"the API server refused agent pod {pod} in namespace {namespace}: {self.policy}: "
            f"{self.words} (the cluster's configuration, not the node: the run tries again "
            "until a pod is admitted)"
        )


@dataclass(slots=True)
class Refused:
    """The run's agent pods are refused now: the last refusal, since when, and when the next
    create is due (one at a time while it lasts)."""

    refusal: Refusal
    namespace: str
    since: float
    retry_at: float
    pause: float = FIRST_PAUSE

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

    def due(self, now: float) -> bool:
        return now >= self.retry_at

    def key(self) -> str:
        """What an Event says once per run: this cause and policy."""
        return f"{self.refusal.cause}:{self.refusal.policy}"


def refused_condition(refused: Refused | None, waiting: int) -> tuple[str, str, str, str]:
    """AgentPodsRefused (type, status, reason, message): True naming the namespace, the policy
    and the API server's words, with the `waiting` nodes and the next try; False otherwise."""
    if refused is None:
        return (
            ConditionType.AGENT_PODS_REFUSED,
            "False",
            R.AGENT_PODS_ADMITTED,
            "no agent pod of the run is refused by the API server",
        )
    found = refused.refusal
    message = (
        f"the API server refuses agent pods in namespace {refused.namespace}: {found.policy}: "
        f"{found.words}. The cluster's configuration, not the nodes: {waiting} nodes wait "
        f"(NotRun AgentPodRefused, no node action); one pod is tried again at "
        f"{rfc3339(refused.retry_at)} (the pause doubles up to {LONGEST_PAUSE:.0f}s), and the "
        "run goes on once one is admitted"
    )
    return ConditionType.AGENT_PODS_REFUSED, "True", found.cause, message
