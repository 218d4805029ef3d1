"""What the in-use watch's poll costs (issue 17, part 3), on CPU with the simulated backend.

While a check that makes CUDA contexts runs, the agent reads every GPU's processes every
POLL_SECONDS on a thread of its own (gpuval_agent.watch). Two figures, each poll on beside poll
off in the same run, interleaved:

  1. one reading: CPU seconds of `InUseWatch.tick()` on the simulated 8-GPU node with another
     process listed on one GPU (NVML's own calls cost more on real GPUs: the device run times them);
  2. a burn's figure beside the poll: inside `watch.during()`, a loop of float32 matmuls (the
     burn's shape of work: numpy releases the GIL) and a loop of small Python calls (a burn's
     launch loop: holds the GIL), each for --seconds, poll on and off in turn, --repeats times.

  python benchmarks/inuse_poll_cost.py [--seconds 2] [--repeats 5] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from gpuval_agent.backends.simulated.backend import SimulatedBackend
from gpuval_agent.backends.simulated.config import LoadCheck, SimulationConfig
from gpuval_agent.watch import POLL_SECONDS, InUseWatch

_FOREIGN = {"kind": "foreign-compute", "gpu": 5, "during": "burn"}


def _backend() -> SimulatedBackend:
    return SimulatedBackend(SimulationConfig.model_validate({"gpus": 8, "faults": [_FOREIGN]}))


def reading_cost(readings: int) -> dict[str, float]:
    backend = _backend()
    watch = InUseWatch(backend, poll_seconds=None)
    watch.take_baseline()
    with watch.during():
        backend.foreign.starts(LoadCheck.BURN, list(range(8)))
        cpu, wall = time.thread_time(), time.perf_counter()
        for _ in range(readings):
            watch.tick()
        cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
    return {
        "readings": readings,
        "cpuMsPerReading": round(1e3 * cpu / readings, 4),
        "wallMsPerReading": round(1e3 * wall / readings, 4),
        # One core's share the poll takes at its period.
        "coreFractionAtPollPeriod": round(cpu / readings / POLL_SECONDS, 5),
    }


def _matmuls(seconds: float) -> float:
    a = np.random.default_rng(1).standard_normal((256, 256), dtype=np.float32)
    done, end = 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        a @ a
        done += 1
    return done * 2 * 256**3 / seconds / 1e9  # GFLOP/s


def _launches(seconds: float) -> float:
    def launch(x: int) -> int:
        return x + 1

    done, end = 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(1000):
            launch(done)
        done += 1000
    return done / seconds / 1e6  # million calls per second


def beside_poll(
    work: Callable[[float], float], seconds: float, poll: float | None
) -> tuple[float, float]:
    """The work's figure, and the CPU the process's other threads (the poll) took meanwhile as
    a share of one core."""
    backend = _backend()
    watch = InUseWatch(backend, poll_seconds=poll)
    watch.take_baseline()
    with watch.during():
        backend.foreign.starts(LoadCheck.BURN, list(range(8)))
        process, thread, wall = time.process_time(), time.thread_time(), time.perf_counter()
        figure = work(seconds)
        others = (time.process_time() - process) - (time.thread_time() - thread)
        return figure, others / (time.perf_counter() - wall)


def burn_cost(seconds: float, repeats: int) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    for name, work, unit in (
        ("matmulFloat32", _matmuls, "GFLOP/s"),
        ("pythonCalls", _launches, "M calls/s"),
    ):
        on: list[tuple[float, float]] = []
        off: list[tuple[float, float]] = []
        for _ in range(repeats):
            off.append(beside_poll(work, seconds, None))
            on.append(beside_poll(work, seconds, POLL_SECONDS))
        figures[name] = {
            "unit": unit,
            "pollOff": [round(v, 2) for v, _ in off],
            "pollOn": [round(v, 2) for v, _ in on],
            "medianRatioOnOff": round(
                statistics.median(v for v, _ in on) / statistics.median(v for v, _ in off), 4
            ),
        }
        if name == "pythonCalls":  # numpy's BLAS threads would count as others for matmuls
            figures[name]["otherThreadsCoreShareOff"] = round(
                statistics.median(c for _, c in off), 5
            )
            figures[name]["otherThreadsCoreShareOn"] = round(statistics.median(c for _, c in on), 5)
    return figures


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--readings", type=int, default=2000)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    found = {
        "pollSeconds": POLL_SECONDS,
        "reading": reading_cost(args.readings),
        "burn": burn_cost(args.seconds, args.repeats),
    }
    text = json.dumps(found, indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
