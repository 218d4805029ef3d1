"""`gpuval-agent run --baseline` with the simulated backend: a slowed GPU is named BelowBaseline
against a baseline file, the table says "0.98 of the H200 baseline", the shipped H200 baseline
is the default, and a bad file or fraction is refused before any check runs."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpuval_agent.baseline import from_env, judge
from gpuval_agent.cli import main
from gpuval_api.baseline.files import read_file, to_document, to_yaml
from gpuval_api.baseline.learn import learn
from gpuval_api.crd import GpuBaseline, ObjectMeta
from gpuval_api.env import AgentEnv
from gpuval_api.reasons import Reason
from gpuval_api.result import AgentResult, Verdict
from gpuval_api.training import LossBaseline
from tests.support.baselines import measured, node_figures

TWO_GPUS = '{"gpus": 2, "timeScale": 0.001}'
SLOW_GPU_1 = '{"gpus": 2, "timeScale": 0.001, "faults": [{"kind": "slow-gpu", "gpu": 1}]}'


def baseline_file(tmp_path: Path) -> Path:
    """A baseline learned from six healthy simulated 2-GPU nodes, exported as a file."""
    nodes = [node_figures(measured(f"n{i}", gpus=2)) for i in range(6)]
    key = nodes[0].key
    assert key is not None
    outcome = learn(nodes, key, fraction=0.1, min_nodes=5)
    assert outcome.spec is not None
    path = tmp_path / "team.yaml"
    baseline = GpuBaseline(metadata=ObjectMeta(name="team-h200"), spec=outcome.spec)
    path.write_text(to_yaml([baseline]))
    return path


def run(*args: str) -> int:
    return main(["run", "--backend", "simulated", "--quiet", *args])


def test_a_slowed_gpu_is_named_below_the_baseline_of_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "result.json"

    code = run(
        "--simulate", SLOW_GPU_1, "--baseline", str(baseline_file(tmp_path)), "--json", str(out)
    )

    assert code == 1
    table = capsys.readouterr().out
    assert (
        "FAIL burn: BelowBaseline: GPU 1: burn.bf16 659.6 TFLOP/s is 0.85 of the H200 baseline "
        "776.0 (below 0.90 of it: fraction 0.1)"
    ) in table
    assert "LowThroughput" not in table  # slow, yet above the absolute threshold
    assert "BASELINE team-h200: NVIDIA H200 x2, 700 W, PCIe gen5x16" in table
    assert "burn.bf16        659.6     776.0  0.85 of the H200 baseline (GPU 1): 1 below" in table
    result = AgentResult.model_validate_json(out.read_text())
    assert result.verdict is Verdict.FAILED and result.reason is Reason.BELOW_BASELINE
    assert result.baseline is not None and result.baseline.name == "team-h200"
    burn = next(f for f in result.baseline.figures if f.figure == "burn.bf16")
    assert (burn.ratio, burn.where, burn.below) == (0.85, "GPU 1", 1)


def test_a_healthy_machine_is_one_of_its_baseline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = run("--simulate", TWO_GPUS, "--baseline", str(baseline_file(tmp_path)))

    assert code == 0
    table = capsys.readouterr().out
    assert "burn.bf16        776.0     776.0  1.00 of the H200 baseline (GPU 0)" in table
    assert "nccl.4GiB" in table and "nccl.512MiB" not in table  # judged sizes only


def test_the_shipped_h200_baseline_is_the_default(capsys: pytest.CaptureFixture[str]) -> None:
    code = run("--simulate", TWO_GPUS)

    assert code == 0
    table = capsys.readouterr().out
    assert "BASELINE nvidia-h200-x2-700w-gen5x16: NVIDIA H200 x2, 700 W, PCIe gen5x16" in table
    # The simulated GPUs run at 0.97 of the part's figures: 776 TFLOP/s against 706.4 measured.
    assert "burn.bf16        776.0     706.4  1.10 of the H200 baseline" in table


def test_an_eight_gpu_machine_is_compared_on_per_gpu_figures_only(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = run("--simulate", '{"gpus": 8, "timeScale": 0.001}')

    assert code == 0
    table = capsys.readouterr().out
    assert "this machine: NVIDIA H200 x8, 700 W, PCIe gen5x16 (per-GPU figures only)" in table
    assert "p2p              381.9         -  the baseline is for 2 GPUs" in table


def test_baseline_none_turns_the_rule_off(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "result.json"

    code = run("--simulate", SLOW_GPU_1, "--baseline", "none", "--json", str(out))

    assert code == 0
    assert "BASELINE" not in capsys.readouterr().out
    assert AgentResult.model_validate_json(out.read_text()).baseline is None


def test_a_bad_baseline_file_is_refused_before_any_check_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (good,) = read_file(baseline_file(tmp_path))
    document = to_document(good)
    document["spec"]["figures"][0]["centre"] = -5.0
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(document))

    code = run("--simulate", TWO_GPUS, "--baseline", str(bad))

    assert code == 2
    captured = capsys.readouterr()
    assert "CHECK" not in captured.out  # no check ran
    assert (
        f"--baseline: {bad}: document 1 (team-h200): spec.figures[0].centre = -5.0" in captured.err
    )


def test_a_fraction_out_of_bounds_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        run("--simulate", TWO_GPUS, "--baseline-fraction", "0.7")

    assert raised.value.code == 2
    assert "--baseline-fraction: '0.7': Input should be less than or equal to 0.5" in (
        capsys.readouterr().err
    )


def test_a_node_labelled_another_gpu_model_than_its_gpus_are_is_named_not_passed() -> None:
    # The operator gives the pod the baselines of the node's label and the label itself.
    environ = {AgentEnv.NODE_GPU_PRODUCT: "NVIDIA-H100-80GB-HBM3"}
    given = from_env(environ)
    assert given is not None and given.candidates == [] and given.fraction == 0.1
    result = measured("gpu-node-7", gpus=2).model_copy(update={"node": "gpu-node-7"})

    judged = judge(result, *given)

    driver = judged.check("driver")
    assert driver is not None and driver.verdict is Verdict.FAILED
    assert driver.reason is Reason.GPU_PRODUCT_MISMATCH
    assert driver.message == (
        "gpu-node-7: its nvidia.com/gpu.product label says 'NVIDIA-H100-80GB-HBM3', its GPUs "
        "are NVIDIA H200: it was given the baselines of the label's model"
    )
    assert judged.verdict is Verdict.FAILED
    assert judged.baseline is not None and judged.baseline.note.startswith("gpu-node-7: its")
    # The label of its own GPUs, shared or as a MIG profile, names nothing.
    for label in ("NVIDIA-H200", "NVIDIA-H200-SHARED", "nvidia-h200-MIG-1g.18gb"):
        assert judge(result, [], 0.1, label).verdict is Verdict.PASSED, label


# -- issue 42 part 6: one machine's training losses against its GpuBaseline's --

TRAIN_TWO_GPUS = '{"gpus": 2, "timeScale": 0.001%s}'


def _trained(tmp_path: Path, name: str, simulate: str, *args: str) -> tuple[int, AgentResult]:
    out = tmp_path / f"{name}.json"
    code = run("--simulate", simulate, "--checks", "train", "--json", str(out), *args)
    return code, AgentResult.model_validate_json(out.read_text())


def baseline_with_losses(tmp_path: Path) -> Path:
    """The team's baseline, with the losses two healthy runs of this stack computed."""
    _, healthy = _trained(tmp_path, "healthy", TRAIN_TWO_GPUS % "", "--baseline", "none")
    check = healthy.check("train")
    assert check is not None and check.training is not None
    path = baseline_file(tmp_path)
    [baseline] = read_file(path)
    baseline.spec.training = [LossBaseline.of(check.training, 2, "two healthy runs")]
    path.write_text(to_yaml([baseline]))
    return path


def test_one_machine_with_a_nudged_loss_fails_against_the_losses_of_its_baseline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = baseline_with_losses(tmp_path)
    nudged = TRAIN_TWO_GPUS % ', "faults": [{"kind": "train-wrong-loss", "step": 65}]'

    healthy_code, healthy = _trained(
        tmp_path, "again", TRAIN_TWO_GPUS % "", "--baseline", str(path)
    )
    code, result = _trained(tmp_path, "nudged", nudged, "--baseline", str(path))

    assert healthy_code == 0 and healthy.baseline is not None
    assert "bit for bit with the loss digest" in healthy.baseline.training
    assert healthy.baseline.training.endswith(": equal")
    assert code == 1 and result.verdict is Verdict.FAILED
    train = result.check("train")
    assert train is not None and train.reason is Reason.TRAINING_MISMATCH
    assert "which team-h200 learned from 2 nodes of the same stack" in train.message
    assert "from step 65 of 65 on" in train.message
    assert result.baseline is not None and result.baseline.training.endswith(": differs")
    assert "training losses: compared bit for bit" in capsys.readouterr().out


def test_another_stack_is_compared_with_the_baselines_losses_within_the_tolerance(
    tmp_path: Path,
) -> None:
    path = baseline_with_losses(tmp_path)
    newer = TRAIN_TWO_GPUS % ', "driver": "590.10.01"'

    code, result = _trained(tmp_path, "newer", newer, "--baseline", str(path))

    assert code == 0 and result.baseline is not None
    how = result.baseline.training
    assert "compared within 2 % (train.lossTolerance) with the losses team-h200 holds" in how
    assert "driver 580.159.04" in how and "driver 590.10.01" in how
    assert "bit-exactness cannot hold across stacks" in how
