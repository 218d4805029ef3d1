"""Pure: repair requests the API server cannot carry out (spec.remediation mode Template), and
the pause before each is tried again. Nothing here calls the API or reads a clock.

A request is refused when the template's kind is not served (the engine's CRD is not installed)
or the create is refused (403: the chart's remediation.rbac; 422: an admission policy or webhook;
any other answer but 409). Trying again at once cannot help: what refused it is the cluster's
configuration. So each node and kind waits, FIRST_PAUSE seconds after its first refusal, twice as
long after each next one, LONGEST_PAUSE at most (a few requests a minute at first, fewer later),
and is asked again on its own: at once when the validation's periodic list of the kind's objects
finds it served, else when its pause is over. The validation says
so in its RepairRequestsRefused condition (the kind and the API server's words), `kubectl gpuval
status` shows it, and /metrics counts the refusals and the nodes waiting.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from gpuval_api import ConditionReason as R
from gpuval_api import ConditionType
from gpuval_operator.timestamps import rfc3339

FIRST_PAUSE = 15.0
LONGEST_PAUSE = 120.0
WORDS_LIMIT = 400
NODES_NAMED = 5


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why the API server did not make a repair object: the kind (Kind.group/version), the HTTP
    status (None: the kind is not served) and its words."""

    kind: str
    status: int | None
    words: str

    @property
    def cause(self) -> R:
        return R.KIND_NOT_SERVED if self.status is None else R.REPAIR_OBJECT_REFUSED

    def said(self) -> str:
        code = "not served" if self.status is None else f"HTTP {self.status}"
        return f"{self.kind} ({code}): {' '.join(self.words.split())[:WORDS_LIMIT]}"


@dataclass(frozen=True, slots=True)
class Waiting:
    """One node and kind whose request is refused: the last refusal and when it came, since
    when, how often, and when it is tried again."""

    refusal: Refusal
    since: float
    at: float
    retry_at: float
    pause: float
    tries: int = 1


def kind_of(api_version: str, kind: str) -> str:
    """A template's kind as the condition and the metrics name it: Kind.group/version."""
    group, _, version = api_version.rpartition("/")
    return f"{kind}.{group}/{version}" if group else f"{kind}/{version}"


class RequestBackoff:
    """The refused requests of one validation, by node and kind."""

    def __init__(self) -> None:
        self.waiting: dict[tuple[str, str], Waiting] = {}
        # Refusals ever seen, by kind (counted again with the process, as Prometheus expects).
        self.refused_total: Counter[str] = Counter()

    def blocked(self, node: str, kind: str, now: float) -> bool:
        """The node's request of `kind` was refused and its pause has not passed."""
        found = self.waiting.get((node, kind))
        return found is not None and now < found.retry_at

    def refused(self, node: str, refusal: Refusal, now: float) -> Waiting:
        """Refused (again): the next try after a pause twice the last one, LONGEST_PAUSE at
        most."""
        key = (node, refusal.kind)
        before = self.waiting.get(key)
        self.refused_total[refusal.kind] += 1
        if before is None:
            found = Waiting(refusal, now, now, now + FIRST_PAUSE, FIRST_PAUSE)
        else:
            pause = min(before.pause * 2, LONGEST_PAUSE)
            found = Waiting(refusal, before.since, now, now + pause, pause, before.tries + 1)
        self.waiting[key] = found
        return found

    def accepted(self, node: str, kind: str) -> bool:
        """The node's request of `kind` was made: True when it had been refused."""
        return self.waiting.pop((node, kind), None) is not None

    def served(self, kind: str) -> None:
        """The kind's objects were listed: its CRD is there now, so the nodes that waited for it
        are tried at once (what refuses their create next starts a pause of its own)."""
        for key in [
            k for k, w in self.waiting.items() if k[1] == kind and w.refusal.status is None
        ]:
            del self.waiting[key]

    def keep(self, nodes: set[str], kind: str | None) -> None:
        """Forget the nodes no longer waiting for a request of `kind` (passed, withdrawn, or the
        template names another kind)."""
        for key in [k for k in self.waiting if k[0] not in nodes or k[1] != kind]:
            del self.waiting[key]

    def nodes_by_kind(self) -> Counter[str]:
        return Counter(kind for _, kind in self.waiting)

    def next_try(self) -> float | None:
        return min((w.retry_at for w in self.waiting.values()), default=None)


def refused_condition(backoff: RequestBackoff) -> tuple[str, str, str, str]:
    """RepairRequestsRefused (type, status, reason, message): True naming the kind, the API
    server's words, the nodes waiting and the next try; False when no request is refused."""
    if not backoff.waiting:
        return (
            ConditionType.REPAIR_REQUESTS_REFUSED,
            "False",
            R.REPAIR_REQUESTS_ACCEPTED,
            "no repair request is refused by the API server",
        )
    latest = max(backoff.waiting.items(), key=lambda i: (i[1].at, i[0]))
    refusal = latest[1].refusal
    nodes = sorted(node for node, kind in backoff.waiting if kind == refusal.kind)
    named = ", ".join(nodes[:NODES_NAMED]) + (
        f" and {len(nodes) - NODES_NAMED} more" if len(nodes) > NODES_NAMED else ""
    )
    next_try = backoff.next_try()
    others = len({kind for _, kind in backoff.waiting} - {refusal.kind})
    message = (
        f"the API server does not make the repair objects: {refusal.said()}. "
        f"{len(nodes)} nodes wait for their repair request ({named}); each is tried again with a "
        f"pause that doubles up to {LONGEST_PAUSE:.0f}s (next at "
        f"{rfc3339(next_try or 0)}) and asked on its own once it is admitted. Install the "
        "engine's CRD, grant the operator its kind (the chart's remediation.rbac), or fix "
        "spec.remediation.template"
    )
    if others:
        message += f"; {others} other kinds are refused too"
    return ConditionType.REPAIR_REQUESTS_REFUSED, "True", refusal.cause, message
