"""Where `gpuval-agent run`'s time goes outside the configured burn (issue 9, B7): NVML calls of
the environment record, NVML set-up, CUDA init and torch's import, each timed. Runs on a GPU
machine; prints one line per item, slowest first, and writes them as JSON with --out."""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pynvml  # type: ignore[import-untyped,unused-ignore]

spent: dict[str, float] = defaultdict(float)
calls: dict[str, int] = defaultdict(int)


def _timed(name: str, call: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(call)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        try:
            return call(*args, **kwargs)
        finally:
            spent[name] += time.perf_counter() - began
            calls[name] += 1

    return wrapper


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    for name in dir(pynvml):
        if name.startswith("nvml") and callable(getattr(pynvml, name)):
            setattr(pynvml, name, _timed(name, getattr(pynvml, name)))
    from gpuval_agent.backends.cuda import CudaBackend  # noqa: PLC0415

    phases: dict[str, float] = {}
    began = time.perf_counter()
    backend = CudaBackend()
    phases["CudaBackend()"] = time.perf_counter() - began
    began = time.perf_counter()
    environment = backend.environment()
    phases["environment()"] = time.perf_counter() - began
    began = time.perf_counter()
    backend.cuda_init([g.index for g in environment.gpus])
    phases["cuda_init()"] = time.perf_counter() - began
    began = time.perf_counter()
    backend.torch()
    phases["wait for torch import"] = time.perf_counter() - began
    backend.close()
    rows = sorted(
        [{"item": k, "seconds": round(v, 4), "calls": calls[k]} for k, v in spent.items()]
        + [{"item": k, "seconds": round(v, 4), "calls": 1} for k, v in phases.items()],
        key=lambda r: -float(r["seconds"]),
    )
    for row in rows[:30]:
        print(f"{row['seconds']:9.4f} s  {row['calls']:4d}x  {row['item']}")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
