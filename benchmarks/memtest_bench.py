"""Memory-test benchmark on a GPU machine: the check beside a plain fill-and-compare loop over the
same memory in the same run, and injected flips.

    python benchmarks/memtest_bench.py --out memtest.json [--gpu 0] [--flips 20] [--variants]

1. The check as the agent runs it (backends/torch/memtest.py, memtest_gpu: every pattern, one
   pass): bytes tested and their fraction of the GPU's memory, GB/s over all steps and per
   pattern, wall time with the kernels' compile and the allocation.
2. The plain loop over the same memory (the same blocks, allocated again): for each of the first
   `--plain-values` walking-ones words p, `block.fill_(p)` on every block, then
   `(block != p).any()` on every block, OR-ed on the GPU and read once at the end; CUDA events
   around it. GB/s as the check counts it: tested bytes per step per second (each byte written
   once and read once).
3. Context: a device-local copy_ between two 2 GiB blocks (bytes copied per second, as
   nvbandwidth counts; the memory moves twice that).
4. --variants: one step of each kind (constant, address, random) per launch setting (words per
   tile, warps, programs per SM), to choose the kernels' defaults.
5. Flips: `--flips` cases, each one step (a seeded random step of the 131, all four patterns
   among them) with one bit flipped at a seeded random offset (the first case the first word, the
   second the last) between its write and its check; a case is found when exactly that step is
   named, with the flip's address, offset and bit.

Targets (shared/targets.md): >= 90 % of the GPU's memory covered, >= 0.9 of the plain loop's
GB/s, every flip found. JSON format "gpuval-memtest-bench/1".
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

# NVLink multicast stays off on the shared H200 hosts; NVML and CUDA number GPUs alike.
for _key, _value in {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
    "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
}.items():
    os.environ.setdefault(_key, _value)

import torch  # noqa: E402 - the environment above must be set before CUDA starts
import triton  # noqa: E402

from gpuval_agent.backends.torch import memtest as torch_memtest  # noqa: E402
from gpuval_agent.memtest import (  # noqa: E402
    WORD,
    MemoryFlip,
    MemoryMeasurement,
    MemoryPlan,
    pattern_steps,
    plan_steps,
    size_text,
)
from gpuval_api.checks import MemoryPattern  # noqa: E402

FORMAT = "gpuval-memtest-bench/1"
ALL = tuple(MemoryPattern)
VARIANTS = [(4096, 8, 4), (2048, 8, 4), (4096, 4, 8), (8192, 8, 2), (2048, 4, 8), (4096, 8, 2)]


def _events() -> tuple[Any, Any]:
    return torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)


def plain_loop(tensors: list[Any], values: list[int]) -> tuple[float, bool]:
    """Seconds of fill-then-compare over every block for each value, and whether any differed."""
    bad = torch.zeros((), dtype=torch.bool, device=tensors[0].device)
    for tensor in tensors:  # warm-up: allocator, kernels
        tensor.fill_(values[0])
        bad |= (tensor != values[0]).any()
    start, end = _events()
    start.record()
    for value in values:
        for tensor in tensors:
            tensor.fill_(value)
        for tensor in tensors:
            bad |= (tensor != value).any()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1000, bool(bad.item())


def copy_gbps(tensors: list[Any], iterations: int = 10) -> float | None:
    if len(tensors) < 2 or tensors[0].numel() != tensors[1].numel():
        return None
    src, dst = tensors[0], tensors[1]
    dst.copy_(src)
    start, end = _events()
    start.record()
    for _ in range(iterations):
        dst.copy_(src)
    end.record()
    end.synchronize()
    return src.numel() * WORD * iterations / (start.elapsed_time(end) / 1000) / 1e9


def variants(region: Any) -> list[dict[str, Any]]:
    steps = [
        pattern_steps(MemoryPattern.WALKING_ONES)[0],
        pattern_steps(MemoryPattern.ADDRESS)[0],
        pattern_steps(MemoryPattern.RANDOM)[0],
    ]
    found = []
    for tile, warps, per_sm in VARIANTS:
        launch = torch_memtest.Launch(tile=tile, warps=warps, programs_per_sm=per_sm)
        began = time.perf_counter()
        torch_memtest.warm_up(region.device, launch)
        compile_seconds = time.perf_counter() - began
        measurement = MemoryMeasurement(gpu=region.device.index or 0, tested_bytes=region.nbytes)
        torch_memtest.run_steps(region, steps, measurement, launch=launch)
        figures = {str(s.pattern): measurement.pattern_gbps(str(s.pattern)) for s in steps}
        found.append(
            {
                "tile": tile,
                "warps": warps,
                "programsPerSm": per_sm,
                "compileSeconds": round(compile_seconds, 2),
                "gbps": {k: round(v or 0.0, 1) for k, v in figures.items()},
                "clean": measurement.miscompares == [],
            }
        )
        print(f"variant tile {tile} warps {warps} programs/SM {per_sm}: {found[-1]['gbps']}")
    return found


def flip_cases(region: Any, count: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    steps = plan_steps(ALL, 1)
    tested = region.nbytes
    # The first four cases take one step of each pattern; the rest any step.
    firsts = [next(i for i, s in enumerate(steps) if s.pattern is p) for p in ALL]
    cases = []
    for case in range(count):
        position = firsts[case] if case < len(firsts) else rng.randrange(len(steps))
        if case < len(firsts):
            position += rng.randrange(sum(s.pattern is ALL[case] for s in steps))
        step = steps[position]
        offset = (0, tested - WORD)[case] if case < 2 else rng.randrange(tested // WORD) * WORD
        flip = MemoryFlip(
            offset=offset, bit=rng.randrange(64), pattern=step.pattern, step=step.index
        )
        measurement = MemoryMeasurement(gpu=region.device.index or 0)
        torch_memtest.run_steps(region, [step], measurement, flips=[flip])
        named = measurement.miscompares
        found = (
            len(named) == 1
            and named[0].step == step
            and named[0].words == 1
            and named[0].first_offset == offset
            and named[0].flipped_bits == 1 << flip.bit
        )
        cases.append(
            {
                "step": step.label,
                "offset": offset,
                "bit": flip.bit,
                "found": found,
                "message": named[0].describe(measurement.gpu, tested) if named else None,
            }
        )
        verdict = "found" if found else "MISSED"
        print(f"flip {case + 1:2}: {step.label:<24} offset {offset:>14} bit {flip.bit:2} {verdict}")
    return cases


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--gpu", type=int, default=0)
    parser.add_argument("--flips", type=int, default=20)
    parser.add_argument("--plain-values", type=int, default=16)
    parser.add_argument("--variants", action="store_true")
    parser.add_argument("--seed", type=int, default=19)
    parser.add_argument(
        "--patterns", default=",".join(ALL), help="the check's patterns (default: all)"
    )
    parser.add_argument("--coverage-fraction", type=float, default=0.98)
    parser.add_argument("--reserve-mib", type=int, default=512)
    args = parser.parse_args()
    device = torch.device("cuda", args.gpu)
    props = torch.cuda.get_device_properties(device)
    report: dict[str, Any] = {
        "format": FORMAT,
        "at": datetime.now(UTC).isoformat(),
        "machine": {
            "gpu": props.name,
            "sms": props.multi_processor_count,
            "torch": torch.__version__,
            "triton": triton.__version__,
            "memGetInfoBytes": list(torch.cuda.mem_get_info(device)),
        },
    }
    plan = MemoryPlan(
        tuple(MemoryPattern(p) for p in args.patterns.split(",")),
        coverage_fraction=args.coverage_fraction,
        reserve_bytes=args.reserve_mib << 20,
    )
    began = time.perf_counter()
    check = torch_memtest.memtest_gpu(args.gpu, plan)
    wall = time.perf_counter() - began
    coverage = check.tested_bytes / check.total_bytes
    report["check"] = {
        "totalBytes": check.total_bytes,
        "freeBytes": check.free_bytes,
        "testedBytes": check.tested_bytes,
        "coverage": coverage,
        "blocks": check.blocks,
        "steps": check.steps_done,
        "gpuSeconds": check.seconds,
        "wallSeconds": wall,
        "gbps": check.gbps,
        "gbpsByPattern": {p: check.pattern_gbps(p) for p in check.seconds_by_pattern},
        "miscompares": [m.describe(args.gpu, check.tested_bytes) for m in check.miscompares],
        "shortfall": check.shortfall,
    }
    print(
        f"check: {size_text(check.tested_bytes)} of {size_text(check.total_bytes)} "
        f"({coverage:.2%}) in {check.blocks} blocks, {check.steps_done} steps in "
        f"{check.seconds:.2f} s GPU / {wall:.2f} s wall: {check.gbps:.1f} GB/s; by pattern "
        + ", ".join(f"{p} {g:.1f}" for p, g in report["check"]["gbpsByPattern"].items())
        + f"; miscompares {len(check.miscompares)}",
        flush=True,
    )
    region = torch_memtest.Region.allocate(device, check.tested_bytes)
    values = [s.value for s in pattern_steps(MemoryPattern.WALKING_ONES)[: args.plain_values]]
    plain_seconds, plain_bad = plain_loop(region.tensors, values)
    plain_gbps = len(values) * region.nbytes / plain_seconds / 1e9
    copy = copy_gbps(region.tensors)
    walking = check.pattern_gbps(str(MemoryPattern.WALKING_ONES)) or 0.0
    report["plain"] = {
        "testedBytes": region.nbytes,
        "values": len(values),
        "seconds": plain_seconds,
        "gbps": plain_gbps,
        "anyDiffered": plain_bad,
        "deviceCopyGBps": copy,
    }
    print(
        f"plain fill_ + (t != p).any(): {plain_gbps:.1f} GB/s over {size_text(region.nbytes)} "
        f"({len(values)} values, differed: {plain_bad}); device copy_ {copy or 0:.1f} GB/s "
        f"copied ({2 * (copy or 0):.0f} GB/s moved)",
        flush=True,
    )
    if args.variants:
        report["variants"] = variants(region)
    cases = flip_cases(region, args.flips, args.seed)
    region.release()
    torch.cuda.empty_cache()
    found = sum(c["found"] for c in cases)
    report["flips"] = cases
    report["targets"] = {
        "coverage": {"figure": coverage, "target": 0.9, "met": coverage >= 0.9},
        "speedRatio": {
            "figure": check.gbps / plain_gbps,
            "target": 0.9,
            "met": check.gbps / plain_gbps >= 0.9,
            "check": check.gbps,
            "plain": plain_gbps,
            "walkingOnesRatio": walking / plain_gbps,
        },
        "flipsFound": {"figure": found, "of": len(cases), "met": found == len(cases)},
    }
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(
        f"TARGETS coverage {coverage:.2%} (>= 90 %: {coverage >= 0.9}); speed check "
        f"{check.gbps:.1f} / plain {plain_gbps:.1f} GB/s = {check.gbps / plain_gbps:.3f} "
        f"(>= 0.9: {check.gbps / plain_gbps >= 0.9}; walking-ones alone {walking / plain_gbps:.3f})"
        f"; flips found {found}/{len(cases)}",
        flush=True,
    )
    return 0 if found == len(cases) and not check.miscompares and not plain_bad else 1


if __name__ == "__main__":
    raise SystemExit(main())
