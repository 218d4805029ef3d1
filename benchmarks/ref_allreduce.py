"""Reference for the NCCL check: a plain torch.distributed all-reduce loop, one process per GPU.

Run by agent_bench.py (`python benchmarks/ref_allreduce.py --gpus 2 --sizes ... --out FILE`); it
times in-place float32 all-reduces like nccl-tests (5 warm-up, N timed, slowest rank's time) with
host timers around a synchronised loop, so it shares no timing code with the agent's worker.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _worker(rank: int, settings: tuple[int, int, list[int], int, str]) -> None:
    world, port, sizes, iterations, out = settings
    torch.cuda.set_device(rank)
    dist.init_process_group(
        "nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
        device_id=torch.device("cuda", rank),
    )  # fmt: skip
    results = []
    buffer = torch.zeros(max(sizes) // 4, dtype=torch.float32, device="cuda")
    for size in sizes:
        view = buffer[: size // 4]
        for _ in range(5):
            dist.all_reduce(view)
        torch.cuda.synchronize()
        dist.barrier()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(iterations):
            dist.all_reduce(view)
        torch.cuda.synchronize()
        seconds = torch.tensor([(time.perf_counter() - start) / iterations], device="cuda")
        dist.all_reduce(seconds, op=dist.ReduceOp.MAX)
        algbw = size / seconds.item() / 1e9
        results.append({"bytes": size, "seconds": seconds.item(), "algbwGBps": algbw,
                        "busbwGBps": algbw * 2 * (world - 1) / world})  # fmt: skip
    if rank == 0:
        with open(out, "w") as sink:
            json.dump(results, sink)
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpus", type=int, required=True)
    parser.add_argument("--sizes", required=True)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    for key, value in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
                       ("NVSHMEM_DISABLE_NVLS", "1")):  # fmt: skip
        os.environ.setdefault(key, value)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    sizes = [int(s) for s in args.sizes.split(",")]
    mp.spawn(_worker, args=((args.gpus, port, sizes, args.iterations, args.out),), nprocs=args.gpus)


if __name__ == "__main__":
    main()
