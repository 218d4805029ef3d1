"""The training check on real GPUs: it trains, reports its figures, two runs give bit-identical
losses, and a weight nudged through the test hook is named at its step by the fleet comparison.

A small model (medium shape, 20 steps) keeps it to seconds; benchmarks/train_bench.py measures the
default shape beside its plain-loop reference."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuval_agent.backends.cuda import CudaBackend
from gpuval_agent.display import Display
from gpuval_agent.runner import run_checks
from gpuval_api.baseline.files import shipped, to_yaml
from gpuval_api.checks import CheckName, ChecksConfig
from gpuval_api.crd import GpuBaseline, ObjectMeta
from gpuval_api.env import AgentEnv
from gpuval_api.reasons import Reason
from gpuval_api.result import AgentResult, CheckResult, TrainMetric, Verdict
from gpuval_api.training import LossBaseline, NodeLosses, loss_mismatches

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
GPUS = torch.cuda.device_count()
MODEL = torch.cuda.get_device_name(0) if torch.cuda.is_available() else ""
SHIPPED = [(b.metadata.name, b.spec) for b in shipped() if b.spec.key.gpu_product == MODEL]
CONFIG = ChecksConfig.model_validate(
    {"train": {"enabled": True, "model": "medium", "steps": 12, "warmupSteps": 3}}
).only([CheckName.TRAIN])


def _train(perturb: str | None = None) -> CheckResult:
    if perturb is not None:
        os.environ[AgentEnv.TRAIN_PERTURB] = perturb
    backend = CudaBackend()
    try:
        result = run_checks(CONFIG, backend, Display(quiet=True), inuse_poll=None)
    finally:
        backend.close()
        os.environ.pop(AgentEnv.TRAIN_PERTURB, None)
    check = result.check(CheckName.TRAIN)
    assert check is not None
    return check


def test_the_training_check_trains_on_every_gpu_and_reports_its_figures() -> None:
    check = _train()
    assert check.verdict is Verdict.PASSED, (check.message, check.log_tail)
    assert [g.index for g in check.gpus] == list(range(GPUS))
    assert check.metrics[TrainMetric.TOKENS_PER_SECOND] > 0
    assert 0 < check.metrics[TrainMetric.MFU] < 1
    assert check.metrics[TrainMetric.STEP_P99] >= check.metrics[TrainMetric.STEP_MEDIAN] > 0
    assert check.metrics[TrainMetric.PEAK_MEMORY] > 0
    assert check.training is not None and len(check.training.losses) == 15
    assert check.training.determinants.gpu_count == GPUS
    assert check.training.determinants.torch == torch.__version__
    # The synthetic tokens are learnable: the loss falls within the run.
    assert check.metrics[TrainMetric.LOSS_LAST] < check.metrics[TrainMetric.LOSS_FIRST]


def test_two_runs_give_bit_identical_losses_and_a_nudged_weight_is_named_at_its_step() -> None:
    first, second, nudged = _train(), _train(), _train("7")
    records = {"a": first.training, "b": second.training, "nudged": nudged.training}
    assert all(r is not None for r in records.values())
    assert first.training is not None and second.training is not None
    assert first.training.losses == second.training.losses
    nodes = {name: NodeLosses.of(r) for name, r in records.items() if r is not None}
    [mismatch] = loss_mismatches(nodes, 0.02)
    assert mismatch.node == "nudged" and mismatch.step == 7
    assert "step 7 of 15" in mismatch.message()


def _cli(*args: str, perturb: str | None = None) -> subprocess.CompletedProcess[str]:
    """`gpuval-agent run --checks train` with CONFIG, the test hook set when `perturb` is."""
    environ = dict(os.environ)
    if perturb is not None:
        environ[AgentEnv.TRAIN_PERTURB] = perturb
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuval_agent.cli",
            "run",
            "--checks",
            "train",
            "--config",
            "/dev/stdin",
            *args,
        ],
        input=CONFIG.model_dump_json(by_alias=True),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=environ,
    )


def test_gpuval_agent_run_checks_train_prints_the_live_line_and_exits_0() -> None:
    done = _cli("--baseline", "none")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "gpuval: train: step 15/15" in done.stderr
    assert "tok/s, loss " in done.stderr
    assert "train      Passed" in done.stdout


@pytest.mark.skipif(not SHIPPED, reason="gpuval ships no baseline for this GPU model")
def test_one_machine_is_held_to_the_losses_its_baseline_holds(tmp_path: Path) -> None:
    # Issue 42 part 6: alone, a nudged weight changes the digest and nobody sees it; with the
    # losses of this stack in the baseline, the nudge before the last step fails the check.
    clean = _train()
    assert clean.training is not None
    name, spec = SHIPPED[0]
    spec = spec.model_copy(update={"training": [LossBaseline.of(clean.training, 1, "this test")]})
    path = tmp_path / "with-losses.yaml"
    path.write_text(to_yaml([GpuBaseline(metadata=ObjectMeta(name=f"{name}-losses"), spec=spec)]))
    last = CONFIG.train.warmup_steps + CONFIG.train.steps

    again = _cli("--baseline", str(path))
    out = tmp_path / "nudged.json"
    nudged = _cli("--baseline", str(path), "--json", str(out), perturb=str(last))

    assert again.returncode == 0, again.stdout + again.stderr
    assert "training losses: compared bit for bit with the loss digest" in again.stdout
    assert nudged.returncode == 1, nudged.stdout + nudged.stderr
    # The table cuts the message; the result document holds it whole.
    train = AgentResult.model_validate_json(out.read_text()).check(CheckName.TRAIN)
    assert train is not None and train.reason is Reason.TRAINING_MISMATCH, train
    assert f"from step {last} of {last} on" in train.message
