"""Plain cuBLAS throughput by matrix size, both GPUs at once: what the burn's size choice costs.

python benchmarks/size_probe.py --out probe.json [--seconds 5]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from agent_bench import plain_matmul  # the same reference loop as the benchmark
from gpuval_api.checks import Precision


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    import torch  # noqa: PLC0415 - after agent_bench has set the NCCL/CUDA environment

    gpus = list(range(torch.cuda.device_count()))
    rows = []
    for precision in (Precision.FP64, Precision.TF32):
        for n in (8192, 12288, 16384):
            for label, chosen in (("allGpus", gpus), ("gpu0", gpus[:1])):
                figures = plain_matmul(chosen, precision, n, args.seconds)
                worst = min(figures.values())
                rows.append({"precision": str(precision), "n": n, "gpus": label, "tflops": worst})
                print(f"{precision} n={n:<6} {label:<8} {worst:8.2f} TFLOP/s", flush=True)
    Path(args.out).write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
