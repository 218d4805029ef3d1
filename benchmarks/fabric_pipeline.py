"""Where the fabric's pods stood, second by second (benchmarks/operator_scale.py `--fabric`).

A round's time is its slowest group's: every pod of a group must be bound by the scheduler and
then marked Running by kwok before the stand-in agents run, and the operator opens the next
groups as earlier ones end. The stand-in fabric sees every pod event, so it knows when each pod
was first seen made, bound (spec.nodeName set), Running, and ended (Succeeded or Failed). From
those times this module says, over the fabric phase:

- how long a pod waited at each stage (median, 90th percentile, largest);
- how many pods were at each stage on average, and how many at once at most (whose queue the
  round waited in: the scheduler's, kwok's, the agents', or none because the operator had not
  opened more groups while it could have);
- the longest time the operator made no pod while domain groups were still to open (pods end
  every second or so, so room for a group comes often: a long gap is the operator's).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

STAGES = ("unbound", "bound", "running")  # made → bound → Running → ended


@dataclass
class PodTimes:
    """When the benchmark first saw a pod at each stage (epoch seconds)."""

    created: float
    cross: bool = False  # a cross-domain group's pod
    bound: float | None = None
    running: float | None = None
    ended: float | None = None

    def see(self, pod: Mapping[str, Any], now: float) -> None:
        phase = (pod.get("status") or {}).get("phase")
        if self.bound is None and (pod.get("spec") or {}).get("nodeName"):
            self.bound = now
        if self.running is None and phase in ("Running", "Succeeded", "Failed"):
            self.running = now
            self.bound = self.bound if self.bound is not None else now
        if self.ended is None and phase in ("Succeeded", "Failed"):
            self.ended = now

    def stage(self, at: float) -> str | None:
        """The pod's stage at `at`, None before it was made or once it ended."""
        if at < self.created or (self.ended is not None and at >= self.ended):
            return None
        if self.bound is None or at < self.bound:
            return "unbound"
        if self.running is None or at < self.running:
            return "bound"
        return "running"


def _spread(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    values = sorted(values)
    return {
        "median": round(statistics.median(values), 2),
        "p90": round(values[max(0, math.ceil(0.9 * len(values)) - 1)], 2),  # nearest rank
        "max": round(values[-1], 2),
    }


def stage_waits(pods: Iterable[PodTimes]) -> dict[str, dict[str, float]]:
    """Seconds per pod: made → bound (the scheduler), bound → Running (kwok), Running → ended
    (the group's other pods, then the stand-in agents)."""
    pods = list(pods)
    return {
        "createdToBound": _spread([p.bound - p.created for p in pods if p.bound is not None]),
        "boundToRunning": _spread(
            [p.running - p.bound for p in pods if p.running is not None and p.bound is not None]
        ),
        "runningToEnded": _spread(
            [p.ended - p.running for p in pods if p.ended is not None and p.running is not None]
        ),
    }


def occupancy(
    pods: Iterable[PodTimes], start: float, end: float, step: float = 1.0
) -> dict[str, float]:
    """Pods at each stage from `start` to `end`, sampled every `step` seconds: the mean and the
    most at once, and the mean of all pods in flight (made, not ended)."""
    pods = list(pods)
    samples: dict[str, list[int]] = {stage: [] for stage in STAGES}
    at = start
    while at <= end:
        counts = dict.fromkeys(STAGES, 0)
        for pod in pods:
            stage = pod.stage(at)
            if stage is not None:
                counts[stage] += 1
        for stage, count in counts.items():
            samples[stage].append(count)
        at += step
    if not samples["unbound"]:
        return {}
    in_flight = [sum(c) for c in zip(*samples.values(), strict=True)]
    return {
        "meanInFlight": round(statistics.fmean(in_flight), 1),
        **{f"mean_{s}": round(statistics.fmean(v), 1) for s, v in samples.items()},
        **{f"max_{s}": max(v) for s, v in samples.items()},
    }


def longest_opening_gap(pods: Iterable[PodTimes]) -> float:
    """The longest time between two domain-group pods made one after the other: from the first
    such pod to the last, groups were waiting to open."""
    made = sorted(p.created for p in pods if not p.cross)
    return round(max((b - a for a, b in itertools.pairwise(made)), default=0.0), 2)
