"""What the API server was asked over a phase: its own request and watch-event counters
(`apiserver_request_total`, `apiserver_watch_events_total`, `apiserver_watch_events_sizes`),
read from its /metrics before and after and subtracted, so a phase's API server CPU can be put
down to the resources and verbs that made it. The text is parsed with prometheus_client's parser.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families


@dataclass(frozen=True)
class ApiCounts:
    requests: Counter[str]  # "VERB resource[/subresource]"
    watch_events: Counter[str]  # by kind
    watch_bytes: Counter[str]  # by kind: the sum of the events' sizes


def parse(text: str) -> ApiCounts:
    requests: Counter[str] = Counter()
    events: Counter[str] = Counter()
    sizes: Counter[str] = Counter()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if sample.name == "apiserver_request_total":
                what = labels.get("resource", "") or labels.get("component", "?")
                if labels.get("subresource"):
                    what += "/" + labels["subresource"]
                requests[f"{labels.get('verb', '?')} {what}"] += int(sample.value)
            elif sample.name == "apiserver_watch_events_total":
                events[labels.get("kind", labels.get("resource", "?"))] += int(sample.value)
            elif sample.name == "apiserver_watch_events_sizes_sum":
                sizes[labels.get("kind", labels.get("resource", "?"))] += int(sample.value)
    return ApiCounts(requests, events, sizes)


async def kubectl_raw(argv: Sequence[str], path: str) -> tuple[int | None, bytes, str]:
    """`kubectl get --raw PATH` (`argv`: kubectl and its flags): its exit code, its output and
    the start of its error text. Cancelled, it ends the kubectl it started."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        "get",
        "--raw",
        path,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await proc.communicate()
    except asyncio.CancelledError:
        proc.kill()
        await proc.wait()
        raise
    return proc.returncode, out, err.decode()[:200]


@dataclass
class ApiSampler:
    """Samples the counters (`sample`, as often as the caller likes: each is one /metrics read
    through kubectl, `argv`) and gives what happened between two moments (`between`)."""

    argv: Sequence[str]  # kubectl and its flags, without the command
    samples: list[tuple[float, ApiCounts]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    async def sample(self) -> None:
        code, out, err = await kubectl_raw(self.argv, "/metrics")
        if code != 0 or not out.strip():
            self.errors.append(f"/metrics: exit {code}: {err}")
            return
        self.samples.append((time.time(), parse(out.decode())))

    def between(self, start: float, end: float, prefix: str, top: int = 25) -> dict[str, object]:
        """The figures from the sample nearest `start` to the one nearest `end` (epoch seconds),
        with how far each was from its moment; empty without two distinct samples."""
        if len(self.samples) < 2:
            return {f"{prefix}Errors": self.errors[:3]} if self.errors else {}
        first = min(self.samples, key=lambda s: abs(s[0] - start))
        last = min(self.samples, key=lambda s: abs(s[0] - end))
        if first[0] >= last[0]:
            return {}
        (t0, before), (t1, after) = first, last
        requests = _delta(after.requests, before.requests, 100_000)
        return {
            f"{prefix}WindowOffsetsSeconds": [round(t0 - start, 1), round(t1 - end, 1)],
            f"{prefix}Requests": sum(requests.values()),
            f"{prefix}RequestsByVerbAndResource": dict(list(requests.items())[:top]),
            f"{prefix}WatchEventsByKind": _delta(after.watch_events, before.watch_events, top),
            f"{prefix}WatchMiBByKind": {
                k: round(v / 2**20, 1)
                for k, v in _delta(after.watch_bytes, before.watch_bytes, top).items()
            },
        }


def _delta(after: Counter[str], before: Counter[str], top: int) -> dict[str, int]:
    grown = Counter({k: v - before.get(k, 0) for k, v in after.items()})
    return {k: v for k, v in grown.most_common(top) if v > 0}
