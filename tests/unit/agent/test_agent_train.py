"""The training check through the simulated backend: its figures and loss record, the faults
train-slow and train-wrong-loss, the size rule and the FLOP count, and its test hook's input."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from gpuval_agent.backends import cuda
from gpuval_agent.backends.simulated.backend import SimulatedBackend, SimulationConfig
from gpuval_agent.backends.simulated.config import FaultKind
from gpuval_agent.errors import AgentError
from gpuval_agent.parts import figures_for
from gpuval_agent.runner import run_checks
from gpuval_agent.training import (
    GIB,
    SHAPES,
    RankTraining,
    TrainPlan,
    auto_micro_batch,
    auto_model,
    node_losses,
    percentile,
)
from gpuval_api.checks import CheckName, ChecksConfig, TrainCheck, TrainModel
from gpuval_api.env import AgentEnv
from gpuval_api.reasons import Reason
from gpuval_api.result import AgentResult, CheckResult, TrainMetric, Verdict
from gpuval_api.training import NodeLosses, decode_loss, encode_loss, loss_mismatches
from tests.unit.agent.test_agent_checks import Recorder

TRAIN_ONLY = ChecksConfig.model_validate({"train": {"enabled": True}}).only([CheckName.TRAIN])


def _train(simulation: dict[str, object], node: str = "sim-a") -> CheckResult:
    document = {"timeScale": 0.0, "gpus": 2} | simulation
    backend = SimulatedBackend(SimulationConfig.parse(json.dumps(document)))
    backend._node = node
    result: AgentResult = run_checks(TRAIN_ONLY, backend, Recorder(), sample_interval=0.01)
    check = result.check(CheckName.TRAIN)
    assert check is not None
    return check


def test_a_healthy_simulated_node_trains_and_records_its_figures_and_losses() -> None:
    check = _train({})
    assert check.verdict is Verdict.PASSED, check.message
    metrics = check.metrics
    assert metrics[TrainMetric.PARAMETERS] == 973_154_304
    assert metrics[TrainMetric.TOKENS_PER_STEP] == 2 * 16 * 2048
    assert metrics[TrainMetric.PEAK_TFLOPS] == 989.4
    per_gpu = metrics[TrainMetric.TOKENS_PER_SECOND] / 2
    assert per_gpu == pytest.approx(0.97 * 79_000, rel=1e-3)  # the double's healthy share
    assert metrics[TrainMetric.MFU] == pytest.approx(
        per_gpu * metrics[TrainMetric.FLOPS_PER_TOKEN] / 989.4e12, abs=1e-4
    )
    assert metrics[TrainMetric.STEP_P99] >= metrics[TrainMetric.STEP_MEDIAN] > 0
    assert metrics[TrainMetric.LOSS_LAST] < metrics[TrainMetric.LOSS_FIRST]
    assert [g.index for g in check.gpus] == [0, 1]
    assert all(g.metrics[TrainMetric.PEAK_MEMORY] > 0 for g in check.gpus)
    assert check.training is not None and len(check.training.losses) == 65
    determinants = check.training.determinants
    assert (determinants.gpu_product, determinants.gpu_count) == ("NVIDIA H200", 2)
    assert determinants.model == "large d2048 L18 H16 V32768 S2048 B16"
    assert (determinants.torch, determinants.nccl, determinants.attention) == (
        "simulated",
        "2.28.9",
        "flash",
    )
    assert "tokens/s, MFU" in check.message and "loss 1" in check.message


def test_two_healthy_simulated_nodes_of_one_stack_compute_bit_identical_losses() -> None:
    first, second = _train({}, "sim-a"), _train({}, "sim-b")
    assert first.training is not None and second.training is not None
    assert first.training.losses == second.training.losses
    assert first.training.digest == second.training.digest


def test_a_slow_node_fails_low_training_throughput_against_the_parts_figure() -> None:
    check = _train({"faults": [{"kind": "train-slow"}]})
    assert check.verdict is Verdict.FAILED and check.reason is Reason.LOW_TRAINING_THROUGHPUT
    [finding] = check.findings
    assert finding.gpu is None  # data-parallel ranks wait for the slowest: the node is named
    assert "2 GPUs data-parallel: trained 53,641 tokens/s per GPU" in finding.message
    assert "below the minimum 63,200 (train.minTokensPerSecond)" in finding.message
    assert "clocks under load" in finding.hint


def test_a_slow_factor_and_an_absolute_minimum_are_both_honoured() -> None:
    check = _train({"faults": [{"kind": "train-slow", "factor": 0.95}]})
    assert check.verdict is Verdict.PASSED  # 0.92 of the expected figure, above 0.8
    # An absolute minimum alone (no fraction): above the healthy double's 76,630 tokens/s.
    config = ChecksConfig.model_validate(
        {"train": {"enabled": True, "minTokensPerSecond": {"absolute": 77_000}}}
    ).only([CheckName.TRAIN])
    backend = SimulatedBackend(SimulationConfig.parse('{"timeScale": 0, "gpus": 1}'))
    result = run_checks(config, backend, Recorder())
    train = result.check(CheckName.TRAIN)
    assert train is not None and train.reason is Reason.LOW_TRAINING_THROUGHPUT
    [finding] = train.findings
    assert finding.gpu == 0 and "GPU 0: trained 76,630 tokens/s per GPU" in finding.message
    assert "below the minimum 77,000" in finding.message


def test_a_wrong_loss_passes_on_its_own_and_is_named_at_its_step_by_the_comparison() -> None:
    healthy = [_train({}, f"ok-{i}") for i in range(3)]
    wrong = _train({"faults": [{"kind": "train-wrong-loss"}]}, "bad")
    later = _train({"faults": [{"kind": "train-wrong-loss", "gpu": 1, "step": 40}]}, "later")
    assert wrong.verdict is Verdict.PASSED and later.verdict is Verdict.PASSED
    records = {f"ok-{i}": c.training for i, c in enumerate(healthy)}
    records |= {"bad": wrong.training, "later": later.training}
    nodes = {n: NodeLosses.of(r) for n, r in records.items() if r is not None}
    found = {m.node: m for m in loss_mismatches(nodes, 0.02)}
    assert sorted(found) == ["bad", "later"]
    assert found["bad"].step == 10 and found["later"].step == 40
    assert found["bad"].value == pytest.approx(found["bad"].expected * (1 + 0.5e-3), rel=1e-4)


def test_a_process_computing_on_a_gpu_while_the_node_trains_is_not_blamed_on_the_node() -> None:
    check = _train(
        {
            "faults": [
                {"kind": "foreign-compute", "gpu": 1, "during": "train"},
                {"kind": "train-slow"},
            ]
        }
    )
    assert check.verdict is Verdict.NOT_RUN and check.reason is Reason.GPU_IN_USE
    assert all(f.reason is not Reason.LOW_TRAINING_THROUGHPUT for f in check.findings)


@pytest.mark.parametrize(
    ("fault", "said"),
    [
        ({"kind": "train-wrong-loss", "step": 0}, "1-based"),
        ({"kind": "memory-flip", "step": 64}, "0-63"),
        ({"kind": "train-slow", "factor": 1.5}, "factor"),
    ],
)
def test_a_bad_training_fault_is_refused_naming_its_field(
    fault: dict[str, object], said: str
) -> None:
    with pytest.raises(AgentError) as refused:
        SimulationConfig.parse(json.dumps({"faults": [fault]}))
    assert said in str(refused.value)
    assert FaultKind(str(fault["kind"]))


@pytest.mark.parametrize(
    ("memory_gib", "model", "batch"),
    [
        (141, "large", 16),
        (94, "large", 8),
        (80, "large", 8),
        (48, "medium", 8),
        (24, "small", 8),
        (8, "tiny", 4),
    ],
)
def test_the_size_rule_picks_the_shape_by_the_gpus_memory(
    memory_gib: int, model: str, batch: int
) -> None:
    memory = memory_gib * GIB
    assert auto_model(memory) == TrainModel(model)
    assert auto_micro_batch(auto_model(memory), memory) == batch
    plan = TrainPlan.of(TrainCheck(), memory)
    assert (plan.shape.model, plan.micro_batch) == (TrainModel(model), batch)


def test_the_flop_count_is_6n_plus_attention_for_the_large_model() -> None:
    large = SHAPES[TrainModel.LARGE]
    assert large.parameters == 18 * (12 * 2048**2 + 2 * 2048) + 32768 * 2048 + 2048
    assert large.flops_per_token == 6 * large.parameters + 12 * 18 * 2048 * 2048
    assert figures_for("NVIDIA H200").dense_bf16_tflops == 989.4


def test_the_nodes_loss_is_the_mean_of_its_gpus_in_rank_order_rounded_to_float32() -> None:
    ranks = [
        RankTraining(gpu=0, losses=[encode_loss(1.0), encode_loss(3.0)]),
        RankTraining(gpu=1, losses=[encode_loss(2.0), encode_loss(math.nan)]),
    ]
    losses = node_losses(ranks)
    assert decode_loss(losses[0]) == 1.5 and math.isnan(decode_loss(losses[1]))
    assert percentile([0.4, 0.5, 0.41, 0.42], 0.5) == 0.41
    assert percentile([float(i) for i in range(60)], 0.99) == 59.0


def test_a_nan_loss_on_a_gpu_fails_the_check_naming_it() -> None:
    from gpuval_agent.checks.common import CheckBuilder  # noqa: PLC0415
    from gpuval_agent.checks.train import _judge  # noqa: PLC0415 - the judgement alone
    from gpuval_agent.training import TrainOutcome  # noqa: PLC0415

    plan = TrainPlan.of(TrainCheck(steps=2, warmup_steps=0), 141 * GIB)
    outcome = TrainOutcome(
        ranks=[
            RankTraining(
                gpu=3,
                losses=[encode_loss(10.0), encode_loss(math.inf)],
                tokens=1,
                timed_seconds=1e-6,
            )
        ]
    )
    builder = CheckBuilder("train")

    class Context:
        part = figures_for("NVIDIA H200")
        config = ChecksConfig()

    _judge(builder, Context(), plan, outcome)  # type: ignore[arg-type]
    [finding] = builder.findings
    assert finding.reason is Reason.TRAINING_LOSS_NOT_FINITE and finding.gpu == 3
    assert "the training loss was inf at step 2 of 2" in finding.message


@pytest.mark.parametrize("text", ["0", "x", "3:-1", "-2"])
def test_the_perturbation_hook_refuses_a_bad_value_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, text: str
) -> None:
    monkeypatch.setenv(AgentEnv.TRAIN_PERTURB, text)
    with pytest.raises(AgentError) as refused:
        cuda._train_perturbation()
    assert f"{AgentEnv.TRAIN_PERTURB}={text!r}" in str(refused.value)


def test_the_perturbation_hook_reads_a_step_and_a_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(AgentEnv.TRAIN_PERTURB, "10:1")
    assert cuda._train_perturbation() == (10, 1)
    monkeypatch.delenv(AgentEnv.TRAIN_PERTURB)
    assert cuda._train_perturbation() == (None, 0)


class _Starting(SimulatedBackend):
    """The double, recording when the training ranks were asked to start and with what."""

    def __init__(self, config: SimulationConfig) -> None:
        super().__init__(config)
        self.started: list[tuple[list[int], TrainPlan, bool]] = []
        self.trained: list[TrainPlan] = []
        self._burned = False

    def burn(self, *args: Any, **kwargs: Any) -> Any:
        self._burned = True
        return super().burn(*args, **kwargs)

    def prepare_train(self, gpus: list[int], plan: TrainPlan) -> None:
        self.started.append((gpus, plan, self._burned))

    def train(self, gpus: list[int], plan: TrainPlan, **kwargs: Any) -> Any:
        self.trained.append(plan)
        return super().train(gpus, plan, **kwargs)


def test_the_training_ranks_start_as_the_burn_does_with_the_plan_the_step_trains() -> None:
    """The full profile ran 122 s on one H200 against its 120 s: the training step's ranks spent
    15 s starting (interpreter, torch, CUDA) after the burn. They start as the burn starts, once
    the memory test has given back its memory, and the step trains with the same plan."""
    config = ChecksConfig.model_validate({"profile": "full", "burn": {"durationSeconds": 1}})
    backend = _Starting(SimulationConfig.parse('{"timeScale": 0, "gpus": 2}'))
    result = run_checks(config, backend, Recorder(), sample_interval=0.01)
    assert result.check(CheckName.TRAIN) is not None
    assert [(gpus, burned) for gpus, _, burned in backend.started] == [([0, 1], False)]
    assert backend.trained == [backend.started[0][1]]
    alone = _Starting(SimulationConfig.parse('{"timeScale": 0, "gpus": 2}'))
    run_checks(TRAIN_ONLY, alone, Recorder(), sample_interval=0.01)
    assert alone.started == [], "no burn to hide it behind: the step starts its own"
