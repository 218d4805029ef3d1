"""Agent benchmark on a GPU machine: every check's figure beside a reference from the same run.

    python benchmarks/agent_bench.py --out bench.json [--seconds 10] [--matrix-size 16384]

References (measured here, now, on the same GPUs): a plain torch.matmul loop per precision, a
plain copy_ loop per copy kind, and for NCCL at every size from 1 MiB to 4 GiB the lean
torch.distributed reference (ref_allreduce.py: queued all-reduces in a CUDA graph timed with CUDA
events, as lean as nccl-tests) beside nccl-tests' own figure (--nccl-tests, nccl_tests.py).
Targets are those of shared/targets.md. The JSON format is stable ("format":
"gpuval-agent-bench/1"): one row per figure with name, unit, figure (the agent's check),
reference, ratio, target and whether it is met, so later runs (other machines, 8 GPUs) compare
row by row.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

# NVLink multicast stays off on the shared H200 hosts; NVML and CUDA number GPUs alike.
SAFE_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
    "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
}
for _key, _value in SAFE_ENV.items():
    os.environ.setdefault(_key, _value)

import torch  # noqa: E402 - the environment above must be set before CUDA starts

from gpuval_agent.allreduce import bus_bandwidth  # noqa: E402
from gpuval_agent.backends.cuda import CudaBackend, all_reduce_processes  # noqa: E402
from gpuval_agent.backends.torch import burn as torch_burn  # noqa: E402
from gpuval_agent.backends.torch import copy as torch_copy  # noqa: E402
from gpuval_api.checks import Precision  # noqa: E402

FORMAT = "gpuval-agent-bench/1"
GIB = 1 << 30
# shared/targets.md: (kind, value). 'ratio' = figure/reference >= value; 'min' = figure >= value.
TARGETS: dict[str, tuple[str, float]] = {
    "burn.bf16": ("ratio", 0.95),
    "burn.tf32": ("min", 352.0),
    "burn.fp32": ("min", 51.1),
    "burn.fp64": ("min", 54.0),
    "bandwidth.h2d": ("min", 0.97 * 55.0),
    "bandwidth.d2h": ("min", 0.97 * 55.2),
    "bandwidth.deviceCopy": ("min", 0.97 * 2081),
    "bandwidth.p2p": ("min", 0.97 * 393.7),
    "nccl.busbw.1GiB": ("min", 0.97 * 327.5),
    "nccl.busbw.4GiB": ("min", 0.97 * 343.4),
    "startup.firstCheckSeconds": ("max", 10.0),
}

rows: list[dict[str, Any]] = []


def row(
    name: str,
    unit: str,
    figure: float | None,
    reference: float | None,
    reference_name: str,
    *,
    per_gpu: dict[str, float] | None = None,
) -> None:
    target = TARGETS.get(name)
    met: bool | None = None
    ratio = figure / reference if figure is not None and reference else None
    if target is not None and figure is not None:
        kind, value = target
        if kind == "ratio":
            met = ratio is not None and ratio >= value
        elif kind == "min":
            met = figure >= value
        else:
            met = figure <= value
    entry = {
        "name": name,
        "unit": unit,
        "figure": figure,
        "reference": reference,
        "referenceName": reference_name,
        "ratio": ratio,
        "target": {"kind": target[0], "value": target[1]} if target else None,
        "met": met,
        "perGpu": per_gpu or {},
    }
    rows.append(entry)
    shown = "-" if figure is None else f"{figure:.2f}"
    ref = "-" if reference is None else f"{reference:.2f}"
    rat = "-" if ratio is None else f"{ratio:.3f}"
    tgt = "-" if target is None else f"{target[0]} {target[1]:.3g}"
    print(
        f"{name:<28} {shown:>10} {unit:<8} ref {ref:>10} ratio {rat:>6}  target {tgt:<12} "
        f"{'' if met is None else ('MET' if met else 'MISSED')}",
        flush=True,
    )


def _rounded(figures: dict[int, float]) -> dict[str, float]:
    return {str(gpu): round(value, 2) for gpu, value in figures.items()}


def plain_matmul(gpus: list[int], precision: Precision, n: int, seconds: float) -> dict[int, float]:
    """TFLOP/s per GPU of a plain torch.matmul loop, all GPUs at once (no verification)."""
    torch_burn.set_matmul_precision(precision)
    dtype = torch_burn._DTYPES[precision]
    results: dict[int, float] = {}

    def work(gpu: int) -> None:
        with torch.cuda.device(gpu):
            a = torch.rand(n, n, device="cuda", dtype=dtype)
            b = torch.rand(n, n, device="cuda", dtype=dtype)
            c = torch.empty_like(a)
            for _ in range(3):
                torch.matmul(a, b, out=c)
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            count, deadline = 0, time.monotonic() + seconds
            batch = torch.cuda.Event()
            while time.monotonic() < deadline:
                for _ in range(10):
                    torch.matmul(a, b, out=c)
                count += 10
                batch.synchronize()  # keep at most ~two batches queued
                batch.record()
            end.record()
            end.synchronize()
            results[gpu] = count * 2 * n**3 / (start.elapsed_time(end) / 1000) / 1e12
            del a, b, c

    threads = [threading.Thread(target=work, args=(g,)) for g in gpus]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    torch.cuda.empty_cache()
    return results


def naive_verified(gpu: int, n: int, seconds: float) -> float:
    """bf16 matmul with a host-synchronising torch.equal check after every iteration."""
    with torch.cuda.device(gpu):
        a = torch.rand(n, n, device="cuda", dtype=torch.bfloat16)
        b = torch.rand(n, n, device="cuda", dtype=torch.bfloat16)
        ref = a @ b
        c = torch.empty_like(a)
        torch.cuda.synchronize()
        count, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            torch.matmul(a, b, out=c)
            if not torch.equal(c, ref):
                raise RuntimeError("naive loop saw a mismatch")
            count += 1
        elapsed = time.perf_counter() - start
    return count * 2 * n**3 / elapsed / 1e12


def verified_burn(
    gpus: list[int], precision: Precision, n: int, seconds: float
) -> tuple[dict[int, float], int]:
    measurements = torch_burn.burn(
        gpus, precision, n, seconds, on_progress=lambda _: None, stop=threading.Event()
    )
    bad = sum(len(m.bad) for m in measurements)
    for m in measurements:
        if m.error:
            print(f"  GPU {m.gpu} {precision}: error {m.error}", flush=True)
    return {m.gpu: m.tflops for m in measurements}, bad


def plain_copy(kind: str, gpu: int, peer: int | None, nbytes: int, iterations: int) -> float:
    """Reference copies timed by the host around a synchronised loop (no CUDA events)."""
    if kind in ("h2d", "d2h"):
        host = torch.empty(nbytes, dtype=torch.uint8).pin_memory()
        dev = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{gpu}")
        src, dst = (host, dev) if kind == "h2d" else (dev, host)
    elif kind == "device":
        src = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{gpu}")
        dst = torch.empty_like(src)
    else:
        src = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{gpu}")
        dst = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{peer}")
    with torch.cuda.device(gpu):
        dst.copy_(src, non_blocking=True)
        torch.cuda.synchronize(gpu)
        if peer is not None:
            torch.cuda.synchronize(peer)
        start = time.perf_counter()
        for _ in range(iterations):
            dst.copy_(src, non_blocking=True)
        torch.cuda.synchronize(gpu)
        if peer is not None:
            torch.cuda.synchronize(peer)
        return nbytes * iterations / (time.perf_counter() - start) / 1e9


NCCL_SIZES = [(1 << 20) << i for i in range(13)]  # 1 MiB .. 4 GiB, as all_reduce_perf -b 1M -e 4G
SMALL_TARGET = 0.9  # shared/targets.md: >= 0.9 of a same-run lean reference at every size >= 1 MiB


def _label(size: int) -> str:
    return f"{size >> 30}GiB" if size >= GIB else f"{size >> 20}MiB"


def _lean_reference(gpus: list[int], iterations: int, mode: str) -> dict[int, float]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "ref.json"
        subprocess.run(
            [
                sys.executable,
                str(Path(__file__).with_name("ref_allreduce.py")),
                "--gpus",
                str(len(gpus)),
                "--sizes",
                ",".join(map(str, NCCL_SIZES)),
                "--iterations",
                str(iterations),
                "--mode",
                mode,
                "--out",
                str(out),
            ],
            check=True,
            timeout=600,
        )
        return {r["bytes"]: r["busbwGBps"] for r in json.loads(out.read_text())}


def _nccl_tests(binary: str | None, gpus: int) -> dict[int, float]:
    if not binary:
        return {}
    from nccl_tests import run  # noqa: PLC0415 - beside this file, used only when asked for

    try:
        return {size: f["inPlaceBusbw"] for size, f in run(Path(binary), gpus).items()}
    except (RuntimeError, OSError) as error:
        print(f"nccl-tests: {error}", flush=True)
        return {}


def nccl_rows(gpus: list[int], iterations: int, nccl_tests_binary: str | None) -> None:
    """The agent's NCCL check at every size >= 1 MiB beside the lean reference (CUDA graph of
    queued all-reduces, CUDA events) and nccl-tests' in-place figure, all in this run."""
    outcome = all_reduce_processes(gpus, NCCL_SIZES, iterations, 600)
    if outcome.timed_out or outcome.error:
        raise RuntimeError(
            f"agent all-reduce: timed_out={outcome.timed_out} "
            f"error={outcome.error} log={outcome.log_tail}"
        )
    agent = {s.bytes: bus_bandwidth(s.bytes / s.seconds / 1e9, len(gpus)) for s in outcome.sizes}
    lean = _lean_reference(gpus, iterations, "graph")
    plain = _lean_reference(gpus, iterations, "eager")
    tests = _nccl_tests(nccl_tests_binary, len(gpus))
    print(
        f"{'size':>8} {'agent':>8} {'lean ref':>9} {'eager ref':>9} {'nccl-tests':>10} "
        f"{'agent/lean':>10} {'tests/lean':>10}",
        flush=True,
    )
    for size in NCCL_SIZES:
        figure, reference, test = agent.get(size), lean.get(size), tests.get(size)
        TARGETS[f"nccl.busbw.{_label(size)}.lean"] = ("ratio", SMALL_TARGET)
        row(
            f"nccl.busbw.{_label(size)}.lean",
            "GB/s",
            figure,
            reference,
            f"lean torch.distributed reference (CUDA graph, CUDA events), {len(gpus)} processes; "
            f"eager {plain.get(size)}; nccl-tests in-place {test}",
        )
        rows[-1]["ncclTests"] = test
        rows[-1]["eagerReference"] = plain.get(size)
        shown = [
            f"{v:>9.1f}" if v is not None else f"{'-':>9}"
            for v in (figure, reference, plain.get(size), test)
        ]
        ratios = [
            f"{a / b:>10.3f}" if a and b else f"{'-':>10}"
            for a, b in ((figure, reference), (test, reference))
        ]
        print(f"{_label(size):>8} {' '.join(shown)} {' '.join(ratios)}", flush=True)
    for size in (GIB, 4 * GIB):
        row(
            f"nccl.busbw.{_label(size)}",
            "GB/s",
            agent.get(size),
            lean.get(size),
            f"lean torch.distributed reference, {len(gpus)} processes",
        )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--matrix-size", type=int, default=16384)
    parser.add_argument("--precisions", default="bf16,fp16,tf32,fp32,fp64")
    parser.add_argument("--transfer-mib", type=int, default=1024)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--skip", default="", help="comma-separated: burn,bandwidth,nccl,startup")
    parser.add_argument("--nccl-tests", help="all_reduce_perf to run beside (nccl_tests.py build)")
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    gpus = list(range(torch.cuda.device_count()))
    started = datetime.now(UTC)
    backend = CudaBackend()
    environment = backend.environment()
    print(
        f"{len(gpus)} x {environment.gpus[0].name}, driver {environment.driver_version}, CUDA "
        f"{environment.cuda_driver_version}/{environment.cuda_runtime_version}, torch "
        f"{environment.torch_version}, NCCL {environment.nccl_version}",
        flush=True,
    )
    n = args.matrix_size

    def worst(figures: dict[int, float]) -> float | None:
        return min(figures.values()) if figures else None

    def safely(label: str, step: Any) -> None:
        try:
            step()
        except Exception as error:  # the run goes on; the row records the failure
            print(f"{label}: FAILED: {type(error).__name__}: {error}", flush=True)
            rows.append({"name": label, "error": f"{type(error).__name__}: {error}"})

    if "burn" not in skip:
        for text in args.precisions.split(","):
            precision = Precision(text)

            def burn_pair(precision: Precision = precision) -> None:
                plain = plain_matmul(gpus, precision, n, args.seconds)
                verified, bad = verified_burn(gpus, precision, n, args.seconds)
                row(
                    f"burn.{precision}",
                    "TFLOP/s",
                    worst(verified),
                    worst(plain),
                    f"plain torch.matmul {precision} {n}^3, all GPUs at once",
                    per_gpu={str(g): round(v, 2) for g, v in verified.items()},
                )
                if bad:
                    print(f"  burn.{precision}: {bad} bad iterations on a healthy machine!")

            safely(f"burn.{precision}", burn_pair)
        if n != 8192:

            def burn_8192() -> None:
                plain = plain_matmul(gpus, Precision.BF16, 8192, args.seconds)
                verified, _ = verified_burn(gpus, Precision.BF16, 8192, args.seconds)
                row(
                    "burn.bf16.8192",
                    "TFLOP/s",
                    worst(verified),
                    worst(plain),
                    "plain torch.matmul bf16 8192^3, all GPUs at once",
                )
                naive = naive_verified(0, 8192, args.seconds / 2)
                row(
                    "burn.bf16.8192.naive",
                    "TFLOP/s",
                    naive,
                    worst(plain),
                    "naive verify-every-iteration loop (torch.equal), GPU 0 alone",
                )

            safely("burn.bf16.8192", burn_8192)

    nbytes = args.transfer_mib << 20
    if "bandwidth" not in skip:

        def bandwidth() -> None:
            for kind, name in (("h2d", "h2d"), ("d2h", "d2h")):
                figures = {
                    g: torch_copy.host_device(kind, [g], nbytes, args.iterations)[g] for g in gpus
                }
                refs = {g: plain_copy(kind, g, None, nbytes, args.iterations) for g in gpus}
                row(
                    f"bandwidth.{name}",
                    "GB/s",
                    worst(figures),
                    worst(refs),
                    "plain pinned copy_ loop, host-timed",
                    per_gpu=_rounded(figures),
                )
                together = torch_copy.host_device(kind, gpus, nbytes, args.iterations)
                row(
                    f"bandwidth.{name}.allGpus",
                    "GB/s",
                    worst(together),
                    worst(figures),
                    "same copy, one GPU at a time",
                    per_gpu=_rounded(together),
                )
            local = {g: torch_copy.device_local(g, nbytes, args.iterations) for g in gpus}
            refs = {g: plain_copy("device", g, None, nbytes, args.iterations) for g in gpus}
            row(
                "bandwidth.deviceCopy",
                "GB/s",
                worst(local),
                worst(refs),
                "plain device copy_ loop, host-timed",
                per_gpu=_rounded(local),
            )
            pairs = {
                f"{s}->{d}": torch_copy.peer(s, d, nbytes, args.iterations)
                for s in gpus
                for d in gpus
                if s != d
            }
            refs_p = {
                f"{s}->{d}": plain_copy("peer", s, d, nbytes, args.iterations)
                for s in gpus
                for d in gpus
                if s != d
            }
            if pairs:
                row(
                    "bandwidth.p2p",
                    "GB/s",
                    min(pairs.values()),
                    min(refs_p.values()),
                    "plain peer copy_ loop, host-timed",
                    per_gpu={k: round(v, 2) for k, v in pairs.items()},
                )
            torch_copy.release()

        safely("bandwidth", bandwidth)

    if "nccl" not in skip and len(gpus) > 1:
        safely("nccl", lambda: nccl_rows(gpus, args.iterations, args.nccl_tests))

    if "startup" not in skip:

        def startup() -> None:
            with tempfile.TemporaryDirectory() as tmp:
                out = Path(tmp) / "r.json"
                begun = time.perf_counter()
                subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "gpuval_agent.cli",
                        "run",
                        "--checks",
                        "driver,health",
                        "--quiet",
                        "--json",
                        str(out),
                    ],
                    check=False,
                    timeout=120,
                    stdout=subprocess.DEVNULL,
                )
                wall = time.perf_counter() - begun
                document = json.loads(out.read_text())
            row(
                "startup.firstCheckSeconds",
                "s",
                document.get("startupSeconds"),
                None,
                "process start to the first check running (agent's own clock)",
            )
            row(
                "startup.driverAndHealthWallSeconds",
                "s",
                wall,
                None,
                "wall time of `gpuval-agent run --checks driver,health`",
            )

        safely("startup", startup)

    backend.close()
    document = {
        "format": FORMAT,
        "startedAt": started.isoformat(),
        "completedAt": datetime.now(UTC).isoformat(),
        "settings": {
            "seconds": args.seconds,
            "matrixSize": n,
            "transferMiB": args.transfer_mib,
            "iterations": args.iterations,
        },
        "environment": environment.model_dump(mode="json", by_alias=True),
        "rows": rows,
    }
    Path(args.out).write_text(json.dumps(document, indent=2) + "\n")
    missed = [r["name"] for r in rows if r.get("met") is False or "error" in r]
    print(f"wrote {args.out}; targets missed or errors: {missed or 'none'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
