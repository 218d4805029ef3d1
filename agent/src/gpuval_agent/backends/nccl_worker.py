"""One rank of the NCCL all-reduce sweep (run as `python -m gpuval_agent.backends.nccl_worker`).

Measures like nccl-tests: in-place all-reduce of float32, warm-up then `iterations` queued back
to back and timed with CUDA events (gpuval_agent.backends.torch_collective: captured in a CUDA
graph, so small messages are not paced by Python); each size's time is the slowest rank's. Rank 0
writes the JSON result to --out. Before timing, one all-reduce's sum is checked on every rank.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import timedelta

import torch  # type: ignore[import-not-found,unused-ignore]
import torch.distributed as dist  # type: ignore[import-not-found,unused-ignore]

from gpuval_agent.backends.torch_collective import seconds_per_all_reduce


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world", type=int, required=True)
    parser.add_argument("--device", type=int, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--sizes", required=True, help="comma-separated byte counts")
    parser.add_argument("--iterations", type=int, required=True)
    parser.add_argument("--timeout", type=float, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument(
        "--hang-rank",
        type=int,
        default=None,
        help="fault injection for the GPU tests: this rank never joins the timed all-reduces",
    )
    parser.add_argument(
        "--gated", action="store_true", help="wait for 'go' on stdin before starting (prestart)"
    )
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    device = torch.device("cuda", args.device)
    torch.cuda.set_device(device)
    dist.init_process_group(
        "nccl",
        init_method=f"tcp://127.0.0.1:{args.port}",
        rank=args.rank,
        world_size=args.world,
        timeout=timedelta(seconds=args.timeout),
        device_id=device,
    )
    check = torch.full((1 << 20,), float(args.rank + 1), device=device)
    dist.all_reduce(check)
    expected = args.world * (args.world + 1) / 2
    sum_ok = bool((check == expected).all())
    flag = torch.tensor([0 if sum_ok else 1], device=device)
    dist.all_reduce(flag)
    # A prestarted group has its communicator up and checked by now (during the burn), and
    # waits here: the sweep starts the moment the agent says go.
    if args.gated and sys.stdin.readline().strip() != "go":
        dist.destroy_process_group()
        return 0  # the agent did not need this prestarted rank
    buffer = torch.zeros(max(sizes) // 4, dtype=torch.float32, device=device)
    results = []
    if args.hang_rank == args.rank:
        time.sleep(args.timeout * 10)
    for size in sizes:
        view = buffer[: size // 4]
        measured = seconds_per_all_reduce(view, args.iterations)
        seconds = torch.tensor([measured], device=device)
        dist.all_reduce(seconds, op=dist.ReduceOp.MAX)
        results.append({"bytes": size, "seconds": float(seconds.item())})
        print(f"gpuval: rank {args.rank} size {size} {seconds.item() * 1e6:.1f} us", flush=True)
    if args.rank == 0:
        with open(args.out, "w") as out:
            json.dump({"sumOk": int(flag.item()) == 0, "sizes": results}, out)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
