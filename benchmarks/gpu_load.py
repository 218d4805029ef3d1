"""A co-running load on one GPU for the baseline's GPU check (issue 18): plain bf16 matmuls for a
while, after a delay, so that `gpuval-agent run` started beside it burns that GPU slower on
purpose and names it BelowBaseline against the shipped H200 baseline.

    python3 benchmarks/gpu_load.py --gpu 0 --delay 8 --seconds 45 &
    gpuval-agent run --duration 30

The delay puts the load inside the agent's burn, after its start-up checks. Prints one JSON line:
what the load itself reached, so the slowdown it caused can be read beside the agent's figure.
"""

from __future__ import annotations

import argparse
import json
import time

import torch  # type: ignore[import-not-found,unused-ignore]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", type=int, default=0)
    parser.add_argument("--delay", type=float, default=8.0, help="seconds before the load starts")
    parser.add_argument("--seconds", type=float, default=45.0, help="how long it runs")
    parser.add_argument("--size", type=int, default=8192, help="matmul size n (n x n x n)")
    args = parser.parse_args()
    device = torch.device(f"cuda:{args.gpu}")
    a = torch.rand(args.size, args.size, dtype=torch.bfloat16, device=device)
    b = torch.rand(args.size, args.size, dtype=torch.bfloat16, device=device)
    time.sleep(args.delay)
    started = time.monotonic()
    count = 0
    while time.monotonic() - started < args.seconds:
        for _ in range(20):
            torch.matmul(a, b)
        torch.cuda.synchronize(device)
        count += 20
    elapsed = time.monotonic() - started
    tflops = 2 * args.size**3 * count / elapsed / 1e12
    print(json.dumps({"gpu": args.gpu, "seconds": round(elapsed, 2), "tflops": round(tflops, 1)}))


if __name__ == "__main__":
    main()
