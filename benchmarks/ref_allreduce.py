"""Reference all-reduce, one process per GPU, as lean as nccl-tests: no code shared with the agent.

    python benchmarks/ref_allreduce.py --gpus 2 --sizes 1048576,1073741824 --out ref.json \
        [--mode graph|eager] [--iterations 20]

In-place float32 all-reduces, 5 warm-up, then many queued back to back and timed with CUDA
events on the stream, the slowest rank's time per all-reduce (nccl-tests' definitions: algbw =
bytes / time, busbw = algbw * 2(n-1)/n).
- graph (default, the lean reference): `iterations` all-reduces captured once in a CUDA graph,
  replayed until the timed span reaches 50 ms (what nccl-tests does with -G; at 1 MiB a Python
  launch costs about what the all-reduce does, so a Python loop would measure Python), with
  NCCL_GRAPH_MIXING_SUPPORT=0 unless set (see main).
- eager: a plain torch.distributed loop, `iterations` launches queued without a sync between them
  (a plain job's all-reduce; at large sizes the launch cost vanishes).
The environment is inherited: the caller sets NCCL_* (transport, algorithm) for both sides alike.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
from collections.abc import Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WARMUP = 5
SPAN_SECONDS = 0.05
MAX_REPLAYS = 200


def _events_seconds(run: Callable[[], object], repeat: int) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeat):
        run()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1000


def _agreed(value: float, device: torch.device) -> float:
    """The same number on every rank (the largest), so the ranks queue the same work."""
    tensor = torch.tensor([value], device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return float(tensor.item())


def _per_all_reduce(view: torch.Tensor, iterations: int, mode: str) -> float:
    for _ in range(WARMUP):
        dist.all_reduce(view)
    torch.cuda.synchronize()

    def eager() -> None:
        for _ in range(iterations):
            dist.all_reduce(view)

    if mode == "eager":
        return _events_seconds(eager, 1) / iterations
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        dist.all_reduce(view)  # NCCL's first use on this stream, outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(iterations):
            dist.all_reduce(view)
    once = _agreed(_events_seconds(graph.replay, 1), view.device)
    replays = max(1, min(MAX_REPLAYS, math.ceil(SPAN_SECONDS / max(once, 1e-9))))
    seconds = _events_seconds(graph.replay, replays) / (replays * iterations)
    del graph
    return seconds


def _worker(rank: int, settings: tuple[int, int, list[int], int, str, str]) -> None:
    world, port, sizes, iterations, mode, out = settings
    device = torch.device("cuda", rank)
    torch.cuda.set_device(device)
    dist.init_process_group(
        "nccl",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        device_id=device,
    )
    buffer = torch.ones(max(sizes) // 4, dtype=torch.float32, device=device)
    results = []
    for size in sizes:
        seconds = _agreed(_per_all_reduce(buffer[: size // 4], iterations, mode), device)
        algbw = size / seconds / 1e9
        results.append(
            {
                "bytes": size,
                "seconds": seconds,
                "algbwGBps": algbw,
                "busbwGBps": algbw * 2 * (world - 1) / world,
            }
        )
    if rank == 0:
        with open(out, "w") as sink:
            json.dump(results, sink)
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpus", type=int, required=True)
    parser.add_argument("--sizes", required=True, help="comma-separated byte counts")
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--mode", choices=("graph", "eager"), default="graph")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    for key, value in (
        ("NCCL_NVLS_ENABLE", "0"),
        ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
        ("NVSHMEM_DISABLE_NVLS", "1"),
    ):
        os.environ.setdefault(key, value)
    if args.mode == "graph":
        # Graph replays each ended by a synchronize never mix with non-captured NCCL work, so
        # NCCL's mixing support (its default; it costs a third of the busbw at 1 MiB on H200s,
        # where this reference then beats nccl-tests' own figure) is off, as in the agent.
        os.environ.setdefault("NCCL_GRAPH_MIXING_SUPPORT", "0")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    sizes = [int(s) for s in args.sizes.split(",")]
    settings = (args.gpus, port, sizes, args.iterations, args.mode, args.out)
    mp.spawn(_worker, args=(settings,), nprocs=args.gpus)


if __name__ == "__main__":
    main()
