"""Timing an all-reduce as nccl-tests does, from Python (imported only where torch is).

At small messages a host-launched loop of `dist.all_reduce` measures the launch path, not NCCL:
each Python call costs tens of microseconds, more than a 1 MiB all-reduce takes on NVLink (the
agent saw 18 GB/s busbw at 1 MiB where nccl-tests sees 40 on the same 2 H200s). So the timed
all-reduces are captured once into a CUDA graph and replayed back to back, and small messages
get more replays, until the timed span is long enough for CUDA events to measure well. Every
replay is ended by a synchronize before any non-captured collective runs, which is what lets the
ranks run with NCCL_GRAPH_MIXING_SUPPORT=0 (ranks.TIMING_NCCL_ENV).
"""

from __future__ import annotations

import math
from typing import Any

import torch  # type: ignore[import-not-found,unused-ignore]
import torch.distributed as dist  # type: ignore[import-not-found,unused-ignore]

WARMUP = 5
# Replays are added until the timed span reaches this long, at most MAX_REPLAYS of them.
TIMED_SECONDS = 0.02
MAX_REPLAYS = 64


def _capture(view: torch.Tensor, iterations: int, group: Any) -> torch.cuda.CUDAGraph | None:
    """A graph of `iterations` all-reduces of `view`, or None where capture is refused."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(WARMUP):
            dist.all_reduce(view, group=group)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            for _ in range(iterations):
                dist.all_reduce(view, group=group)
    except RuntimeError:
        return None
    return graph


def _timed(run: Any, replays: int) -> float:
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        run()
    end.record()
    end.synchronize()
    return float(start.elapsed_time(end)) / 1000


def seconds_per_all_reduce(view: torch.Tensor, iterations: int, group: Any = None) -> float:
    """Seconds one all-reduce of `view` takes on this rank, every rank calling it alike (the
    replay count is agreed on, so the ranks stay in step); the caller takes the slowest rank's."""
    graph = _capture(view, iterations, group)

    def eager() -> None:
        for _ in range(iterations):
            dist.all_reduce(view, group=group)

    run = graph.replay if graph is not None else eager
    once = torch.tensor([_timed(run, 1)], device=view.device)
    dist.all_reduce(once, op=dist.ReduceOp.MAX, group=group)
    replays = max(1, min(MAX_REPLAYS, math.ceil(TIMED_SECONDS / max(float(once.item()), 1e-9))))
    seconds = _timed(run, replays) / (replays * iterations)
    del graph
    return seconds
