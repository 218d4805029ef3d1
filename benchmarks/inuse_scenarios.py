"""Issue 17, part 3 on a real GPU: a GPU another process uses is named, not blamed.

On the H200 machine (one GPU is enough), with the agent's real backend:
  (a) another process computing on GPU 0 when `gpuval-agent run` starts;
  (b) another process holding most of GPU 0's memory (135 GiB of ~140);
  (c) two agents started on one GPU at once;
  (d) a clean run of the same checks;
then the NCCL check's rank process on one GPU (a world of one: start, checked sum, sweep);
  (f) what one reading of the GPUs' processes costs through NVML (the watch's poll reads every
      0.1 s while a check runs);
  (g) the clean run again with the poll off (`--test-inuse-poll 0`): its burn beside d's.
Each of a-c must end NotRun with GpuInUse naming the other process, exit 3 ("not tested"), and
no LowThroughput, LowBandwidth or CheckError; d and g must pass (exit 0). One line per scenario
on stdout; every agent's table and stderr in --out/inuse.log, the figures in --out/inuse.json.
`--only c,d,f,g` runs some of them; `--repeat N` runs (c) N times (its outcome hangs on timing).

  python benchmarks/inuse_scenarios.py --out DIR [--duration 10] [--only c,d] [--repeat 3]
  python benchmarks/inuse_scenarios.py hog compute|memory [GIB]   (the other process)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BLAME = {"LowThroughput", "LowBandwidth", "CheckError"}
NOT_TESTED = 3
_GIB = 1 << 30


def hog(kind: str, gib: float) -> None:
    """The other process: computes bf16 matmuls on GPU 0, or holds `gib` GiB of its memory."""
    import torch  # type: ignore[import-not-found,unused-ignore]  # noqa: PLC0415 - GPU machine only

    torch.cuda.set_device(0)
    if kind == "memory":
        held = torch.empty(int(gib * _GIB), dtype=torch.uint8, device="cuda")
        held.fill_(1)
        torch.cuda.synchronize()
        print(f"ready {os.getpid()}", flush=True)
        while True:
            time.sleep(1)
    a = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
    (a @ b).sum().item()
    print(f"ready {os.getpid()}", flush=True)
    while True:
        for _ in range(50):
            c = a @ b
        c.sum().item()


def _start_hog(kind: str, gib: float) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, __file__, "hog", kind, str(gib)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    if line != f"ready {process.pid}":
        process.kill()
        raise RuntimeError(
            f"the {kind} hog did not start: {line!r} {process.stdout.read()[-2000:]}"
        )
    return process


def _agent(out: Path, name: str, duration: float, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpuval_agent.cli",
            "run",
            "--quiet",
            "--duration",
            str(duration),
            "--json",
            str(out / f"{name}.json"),
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _finish(process: subprocess.Popen[str], out: Path, name: str, log: list[str]) -> dict[str, Any]:
    output, _ = process.communicate(timeout=240)
    log.append(f"===== {name}: pid {process.pid}, exit {process.returncode}\n{output}")
    path = out / f"{name}.json"
    document = json.loads(path.read_text()) if path.exists() else {}
    checks = document.get("checks") or []
    return {
        "pid": process.pid,
        "exit": process.returncode,
        "verdict": document.get("verdict"),
        "reason": document.get("reason"),
        "message": document.get("message"),
        "reasons": sorted({f["reason"] for c in checks for f in c["findings"]}),
        "checks": {
            c["name"]: {
                "verdict": c["verdict"],
                "seconds": c["elapsedSeconds"],
                "message": c["message"],
                "occupants": c.get("occupants") or [],
                "gpus": [{"index": g["index"], **g["metrics"]} for g in c["gpus"]],
            }
            for c in checks
        },
    }


def _names(run: dict[str, Any], other: int) -> bool:
    pids = {o["pid"] for c in run["checks"].values() for o in c["occupants"]}
    return other in pids and str(other) in (run["message"] or "")


def _judge_in_use(run: dict[str, Any], other: int) -> list[str]:
    problems = []
    if run["exit"] != NOT_TESTED:
        problems.append(f"exit {run['exit']}, not {NOT_TESTED}")
    if (run["verdict"], run["reason"]) != ("NotRun", "GpuInUse"):
        problems.append(f"verdict {run['verdict']}/{run['reason']}")
    if not _names(run, other):
        problems.append(f"PID {other} not named")
    if blamed := BLAME & set(run["reasons"]):
        problems.append(f"blamed: {sorted(blamed)}")
    return problems


def _with_hog(out: Path, kind: str, gib: float, duration: float, log: list[str]) -> dict[str, Any]:
    hog_process = _start_hog(kind, gib)
    try:
        time.sleep(2)  # it computes (or holds) before the agent starts
        run = _finish(_agent(out, kind, duration), out, kind, log)
    finally:
        hog_process.kill()
        hog_process.wait()
    run["other"] = hog_process.pid
    run["problems"] = _judge_in_use(run, hog_process.pid)
    return run


def _two_agents(out: Path, duration: float, log: list[str]) -> dict[str, Any]:
    first, second = _agent(out, "agent-1", duration), _agent(out, "agent-2", duration)
    runs = [_finish(first, out, "agent-1", log), _finish(second, out, "agent-2", log)]
    runs[0]["problems"] = _judge_in_use(runs[0], second.pid)
    runs[1]["problems"] = _judge_in_use(runs[1], first.pid)
    return {"agents": runs, "problems": runs[0]["problems"] + runs[1]["problems"]}


def _clean(out: Path, duration: float, log: list[str], *extra: str) -> dict[str, Any]:
    name = "clean-no-poll" if extra else "clean"
    run = _finish(_agent(out, name, duration, *extra), out, name, log)
    run["problems"] = [] if (run["exit"], run["verdict"]) == (0, "Passed") else ["did not pass"]
    return run


def _poll_cost(readings: int = 500) -> dict[str, Any]:
    """One reading of every GPU's processes through NVML, as the watch's poll takes it."""
    from gpuval_agent.backends.nvml.reader import Nvml  # noqa: PLC0415
    from gpuval_agent.watch import POLL_SECONDS, InUseWatch  # noqa: PLC0415

    nvml = Nvml()
    try:
        cpu, wall = time.thread_time(), time.perf_counter()
        for _ in range(readings):
            nvml.gpu_use()
        cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall

        class _Source:
            gpu_use = nvml.gpu_use

            def host_pid_namespace(self) -> bool:
                return True

            def agent_gpu_processes(self) -> dict[int, int]:
                return dict.fromkeys(range(nvml.count), 1)

        watch = InUseWatch(_Source(), poll_seconds=None)
        watch.take_baseline()
        with watch.during():
            judged = time.perf_counter()
            for _ in range(readings):
                watch.tick()
            judged = time.perf_counter() - judged
    finally:
        nvml.close()
    return {
        "gpus": nvml.count,
        "readings": readings,
        "nvmlCpuMsPerReading": round(1e3 * cpu / readings, 3),
        "nvmlWallMsPerReading": round(1e3 * wall / readings, 3),
        "watchWallMsPerReading": round(1e3 * judged / readings, 3),
        "coreFractionAtPollPeriod": round(cpu / readings / POLL_SECONDS, 5),
        "problems": [],
    }


def _wait_idle(seconds: float = 30.0) -> list[int]:
    """Until NVML lists no compute process on any GPU (an ended process's context can take a
    moment to go); the PIDs still listed when the time is up."""
    import pynvml  # type: ignore[import-untyped,unused-ignore]  # noqa: PLC0415

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return []
    try:
        deadline = time.monotonic() + seconds
        while True:
            listed = [
                int(p.pid)
                for i in range(pynvml.nvmlDeviceGetCount())
                for p in pynvml.nvmlDeviceGetComputeRunningProcesses(
                    pynvml.nvmlDeviceGetHandleByIndex(i)
                )
            ]
            if not listed or time.monotonic() >= deadline:
                return listed
            time.sleep(0.5)
    finally:
        pynvml.nvmlShutdown()


def _rank_process() -> dict[str, Any]:
    """The NCCL check's rank process on one GPU: the unified rank path (start, sum, sweep)."""
    from gpuval_agent.backends.cuda import all_reduce_processes  # noqa: PLC0415
    from gpuval_agent.checks.nccl import sweep_sizes  # noqa: PLC0415

    began = time.monotonic()
    outcome = all_reduce_processes([0], sweep_sizes(1 << 20, 256 << 20), 5, 120)
    figures = [
        {"bytes": s.bytes, "algbwGBps": round(s.bytes / s.seconds / 1e9, 1)} for s in outcome.sizes
    ]
    problems = [] if outcome.error is None and not outcome.timed_out and figures else ["failed"]
    return {
        "seconds": round(time.monotonic() - began, 2),
        "error": outcome.error,
        "timedOut": outcome.timed_out,
        "sizes": figures,
        "problems": problems,
        "logTail": (outcome.log_tail or "")[-2000:] or None,
    }


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "hog":
        hog(sys.argv[2], float(sys.argv[3]) if len(sys.argv) > 3 else 0)
        return 0
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--hold-gib", type=float, default=135.0)
    parser.add_argument("--only", help="letters of the scenarios to run, e.g. c,d,f,g")
    parser.add_argument("--repeat", type=int, default=1, help="times to run (c)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="inuse-"))  # the agents' documents (few files come back)
    log: list[str] = []
    results: dict[str, Any] = {}
    scenarios: dict[str, Any] = {
        "a_compute": lambda: _with_hog(work, "compute", 0, args.duration, log),
        "b_memory": lambda: _with_hog(work, "memory", args.hold_gib, args.duration, log),
    }
    for attempt in range(1, args.repeat + 1):
        suffix = f"_{attempt}" if args.repeat > 1 else ""
        scenarios[f"c_two_agents{suffix}"] = lambda: _two_agents(work, args.duration, log)
    scenarios |= {
        "d_clean": lambda: _clean(work, args.duration, log),
        "e_rank_worker": _rank_process,  # the key of the results kept in benchmarks/results
        "f_poll_cost": _poll_cost,
        "g_clean_no_poll": lambda: _clean(work, args.duration, log, "--test-inuse-poll", "0"),
    }
    if args.only:
        wanted = {letter.strip() for letter in args.only.split(",")}
        scenarios = {k: v for k, v in scenarios.items() if k.split("_", 1)[0] in wanted}
    for name, scenario in scenarios.items():
        if leftover := _wait_idle():
            print(f"{name}: GPU not idle before it: PIDs {leftover}", flush=True)
        began = time.monotonic()
        try:
            results[name] = scenario()
        except Exception as error:  # one broken scenario must not lose the others
            results[name] = {"problems": [f"{type(error).__name__}: {error}"]}
        results[name]["wallSeconds"] = round(time.monotonic() - began, 1)
        problems = results[name]["problems"]
        print(f"{name}: {'PASS' if not problems else 'FAIL ' + '; '.join(problems)}", flush=True)
        (args.out / "inuse.json").write_text(json.dumps(results, indent=2) + "\n")
        (args.out / "inuse.log").write_text("\n".join(log))
    return 0 if all(not r["problems"] for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
