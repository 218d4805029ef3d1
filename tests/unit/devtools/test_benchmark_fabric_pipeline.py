"""benchmarks/fabric_pipeline.py: each fabric pod's stage times, from the pod events the stand-in
fabric sees, and the pods at each stage over the phase."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

# The benchmarks import one another by name, as they run: from their own folder.
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
pipeline = importlib.import_module("fabric_pipeline")


def pod(node: str | None = None, phase: str = "Pending") -> dict[str, Any]:
    return {"spec": {"nodeName": node} if node else {}, "status": {"phase": phase}}


def test_each_stage_is_timed_when_it_is_first_seen() -> None:
    times = pipeline.PodTimes(created=100.0)
    times.see(pod(), 100.0)
    times.see(pod("n1"), 103.0)
    times.see(pod("n1"), 104.0)  # seen again: the first time stays
    times.see(pod("n1", "Running"), 110.0)
    times.see(pod("n1", "Succeeded"), 111.5)
    assert (times.bound, times.running, times.ended) == (103.0, 110.0, 111.5)
    assert [times.stage(t) for t in (99.0, 100.0, 103.0, 109.9, 110.0, 111.5)] == [
        None,
        "unbound",
        "bound",
        "bound",
        "running",
        None,
    ]


def test_a_pod_first_seen_running_was_bound_then_too() -> None:
    # Watch events can be coalesced: the binding and Running arrive as one.
    times = pipeline.PodTimes(created=5.0)
    times.see(pod("n1", "Running"), 7.0)
    assert (times.bound, times.running, times.ended) == (7.0, 7.0, None)
    assert times.stage(1000.0) == "running"


def test_waits_and_occupancy_over_the_phase() -> None:
    pods = [
        pipeline.PodTimes(created=0.0, bound=2.0, running=5.0, ended=6.0),
        pipeline.PodTimes(created=0.0, bound=4.0, running=5.0, ended=8.0),
        pipeline.PodTimes(created=3.0, bound=None, running=None, ended=None),
    ]
    waits = pipeline.stage_waits(pods)
    assert waits["createdToBound"] == {"median": 3.0, "p90": 4.0, "max": 4.0}
    assert waits["boundToRunning"]["max"] == 3.0
    assert waits["runningToEnded"] == {"median": 2.0, "p90": 3.0, "max": 3.0}
    stages = pipeline.occupancy(pods, 0.0, 9.0)
    # t=0,1: two unbound; t=2,3: one bound, one unbound (+ the third from t=3); t=4: two
    # bound + one unbound; t=5: two running; t=6,7: one running; then none but the third.
    assert stages["max_unbound"] == 2
    assert stages["max_bound"] == 2
    assert stages["max_running"] == 2
    assert stages["meanInFlight"] == round((2 + 2 + 2 + 3 + 3 + 3 + 2 + 2 + 1 + 1) / 10, 1)


def test_the_longest_gap_between_domain_group_pods_leaves_the_cross_domain_round_out() -> None:
    pods = [
        pipeline.PodTimes(created=t)
        for t in (0.0, 0.5, 1.0, 14.0, 14.2)  # 13 s with no pod made while groups waited
    ] + [pipeline.PodTimes(created=90.0, cross=True)]  # after every domain group ended
    assert pipeline.longest_opening_gap(pods) == 13.0
    assert pipeline.longest_opening_gap([]) == 0.0
