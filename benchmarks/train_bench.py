"""The training check on a GPU machine beside its reference, in one process run.

    python benchmarks/train_bench.py --out train_bench.json [--steps 60 --attention flash]
        [--perturb-step 10] [--context]

What it runs, in this order (shared/targets.md, row "training step"):
1. the `train` check (gpuval_agent.runner.run_checks with the check alone, the real backend:
   rank processes, deterministic settings, the live line on stderr);
2. the plain torch loop of the same model and settings (benchmarks/train_reference.py, in its
   own process, so neither holds the other's GPU memory);
3. the check again: its losses must be bit-identical to the first run's;
4. the check with its test hook GPUVAL_TRAIN_PERTURB=STEP (one weight nudged before that step):
   the one comparison the operator uses (gpuval_api.training.loss_mismatches) must name that
   node and that step;
5. with --context, the plain loop once more without the deterministic settings (what
   determinism costs).
It prints each figure with its reference and target, and writes them as JSON ("format":
"gpuval-train-bench/1").
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

SAFE_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
    "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
}
for _key, _value in SAFE_ENV.items():
    os.environ.setdefault(_key, _value)

from gpuval_agent.backends.cuda import CudaBackend  # noqa: E402
from gpuval_agent.display import Display  # noqa: E402
from gpuval_agent.runner import run_checks  # noqa: E402
from gpuval_api.checks import CheckName, ChecksConfig, TrainCheck  # noqa: E402
from gpuval_api.env import AgentEnv  # noqa: E402
from gpuval_api.result import AgentResult, CheckResult, TrainMetric  # noqa: E402
from gpuval_api.training import NodeLosses, decode_loss, loss_mismatches  # noqa: E402

FORMAT = "gpuval-train-bench/1"
REFERENCE = Path(__file__).resolve().parent / "train_reference.py"
TARGET_RATIO = 0.95


def check_once(config: ChecksConfig, perturb: int | None = None) -> tuple[CheckResult, float]:
    """One `gpuval-agent run --checks train` in this process: the check's result and the wall
    time of the whole run."""
    if perturb is None:
        os.environ.pop(AgentEnv.TRAIN_PERTURB, None)
    else:
        os.environ[AgentEnv.TRAIN_PERTURB] = str(perturb)
    backend = CudaBackend()
    display = Display()
    began = time.monotonic()
    try:
        result: AgentResult = run_checks(config, backend, display, inuse_poll=None)
    finally:
        display.close()
        backend.close()
        os.environ.pop(AgentEnv.TRAIN_PERTURB, None)
    wall = time.monotonic() - began
    check = result.check(CheckName.TRAIN)
    assert check is not None
    print(f"check: {check.verdict} in {check.elapsed_seconds:.1f} s: {check.message}", flush=True)
    return check, wall


def reference(train: TrainCheck, deterministic: bool, plan: dict[str, Any]) -> dict[str, Any]:
    """The plain loop in its own process."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        command = [
            sys.executable,
            str(REFERENCE),
            "--json",
            out.name,
            "--model",
            plan["model"],
            "--micro-batch",
            str(plan["microBatch"]),
            "--steps",
            str(train.steps),
            "--warmup",
            str(train.warmup_steps),
            "--seed",
            str(train.seed),
            "--attention",
            str(train.attention),
        ]
        if not deterministic:
            command.append("--no-deterministic")
        subprocess.run(command, check=True)
        figures: dict[str, Any] = json.loads(Path(out.name).read_text())
        return figures


def plan_of(check: CheckResult) -> dict[str, Any]:
    """The shape the check ran, from its determinants ('large d2048 ... B16')."""
    assert check.training is not None
    words = check.training.determinants.model.split()
    return {"model": words[0], "microBatch": int(words[-1].removeprefix("B"))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int)
    parser.add_argument("--warmup", type=int)
    parser.add_argument("--attention")
    parser.add_argument("--perturb-step", type=int, default=10)
    parser.add_argument("--context", action="store_true", help="also the non-deterministic loop")
    args = parser.parse_args()
    overrides: dict[str, Any] = {"enabled": True}
    if args.steps is not None:
        overrides["steps"] = args.steps
    if args.warmup is not None:
        overrides["warmupSteps"] = args.warmup
    if args.attention:
        overrides["attention"] = args.attention
    config = ChecksConfig.model_validate({"train": overrides}).only([CheckName.TRAIN])
    train = config.train

    first, first_wall = check_once(config)
    if first.training is None:
        print(f"the check did not train: {first.message}\n{first.log_tail or ''}", flush=True)
        return 1
    plan = plan_of(first)
    plain = reference(train, True, plan)
    print(f"reference: {plain['tokensPerSecond']:,.0f} tokens/s", flush=True)
    second, second_wall = check_once(config)
    perturbed, perturbed_wall = check_once(config, args.perturb_step)
    loose = reference(train, False, plan) if args.context else None

    runs = {"run-1": first, "run-2": second, "perturbed": perturbed}
    nodes = {n: NodeLosses.of(c.training) for n, c in runs.items() if c.training is not None}
    mismatches = loss_mismatches(nodes, train.loss_tolerance)
    assert second.training is not None
    identical = first.training.losses == second.training.losses
    caught = next((m for m in mismatches if m.node == "perturbed"), None)
    figures = _figures(first, second, plain, loose)
    report = {
        "format": FORMAT,
        "when": datetime.now(UTC).isoformat(),
        "config": train.model_dump(mode="json", by_alias=True),
        "determinants": first.training.determinants.model_dump(mode="json", by_alias=True),
        "figures": figures,
        "identical": identical,
        "losses": {n: c.training.losses if c.training else None for n, c in runs.items()},
        "perturbation": {
            "step": args.perturb_step,
            "caught": caught is not None and caught.step == args.perturb_step,
            "namedStep": caught.step if caught else None,
            "message": caught.message() if caught else None,
            "others": [m.node for m in mismatches if m.node != "perturbed"],
        },
        "wallSeconds": {
            "run-1": round(first_wall, 2),
            "run-2": round(second_wall, 2),
            "perturbed": round(perturbed_wall, 2),
        },
        "checkSeconds": {n: c.elapsed_seconds for n, c in runs.items()},
        "reference": plain,
        "referenceNonDeterministic": loose,
        "metrics": first.metrics,
        "gpus": [g.model_dump(mode="json", by_alias=True) for g in first.gpus],
    }
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    _print(report, first)
    return 0


def _figures(
    first: CheckResult,
    second: CheckResult,
    plain: dict[str, Any],
    loose: dict[str, Any] | None,
) -> dict[str, Any]:
    rates = [c.metrics[TrainMetric.TOKENS_PER_SECOND] for c in (first, second)]
    check_rate = max(rates)
    gpus = max(len(first.gpus), 1)
    return {
        "checkTokensPerSecond": rates,
        "checkTokensPerSecondPerGpu": check_rate / gpus,
        "referenceTokensPerSecond": plain["tokensPerSecond"],
        "ratio": check_rate / plain["tokensPerSecond"],
        "ratioFirstRun": rates[0] / plain["tokensPerSecond"],
        "target": TARGET_RATIO,
        "met": check_rate / plain["tokensPerSecond"] >= TARGET_RATIO,
        "mfu": first.metrics.get(TrainMetric.MFU),
        "peakTflops": first.metrics.get(TrainMetric.PEAK_TFLOPS),
        "stepMedianSeconds": first.metrics.get(TrainMetric.STEP_MEDIAN),
        "stepP99Seconds": first.metrics.get(TrainMetric.STEP_P99),
        "peakMemoryBytes": first.metrics.get(TrainMetric.PEAK_MEMORY),
        "nonDeterministicReferenceTokensPerSecond": loose["tokensPerSecond"] if loose else None,
    }


def _print(report: dict[str, Any], first: CheckResult) -> None:
    f = report["figures"]
    p = report["perturbation"]
    assert first.training is not None
    losses = first.training.losses
    rows = [
        ("check tokens/s (node, best of 2)", f"{max(f['checkTokensPerSecond']):,.0f}"),
        ("plain loop tokens/s", f"{f['referenceTokensPerSecond']:,.0f}"),
        ("ratio (target >= 0.95)", f"{f['ratio']:.3f} {'MET' if f['met'] else 'MISSED'}"),
        ("MFU vs dense bf16 peak", f"{(f['mfu'] or 0):.1%} of {f['peakTflops']} TFLOP/s"),
        (
            "step median / p99",
            f"{f['stepMedianSeconds'] * 1e3:.1f} / {f['stepP99Seconds'] * 1e3:.1f} ms",
        ),
        ("peak memory", f"{(f['peakMemoryBytes'] or 0) / 2**30:.1f} GiB"),
        ("two runs bit-identical", str(report["identical"])),
        ("perturbed at step", str(p["step"])),
        ("caught at step", f"{p['namedStep']} ({'caught' if p['caught'] else 'MISSED'})"),
        ("loss first -> last", f"{decode_loss(losses[0]):.4f} -> {decode_loss(losses[-1]):.4f}"),
        ("check wall (run 1)", f"{report['wallSeconds']['run-1']} s"),
    ]
    if f["nonDeterministicReferenceTokensPerSecond"]:
        rows.append(
            (
                "plain loop, not deterministic",
                f"{f['nonDeterministicReferenceTokensPerSecond']:,.0f}",
            )
        )
    print("", flush=True)
    for name, value in rows:
        print(f"{name:<34} {value}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
