"""The fabric's training phase in the agent (fabric.train): the group's figures and loss record from
every node's report, the training pairs, this node's verdict from them, the real rank processes'
events read without torch, the double's model, and `gpuval-agent fabric --train` by hand on four
simulated machines meeting over TCP."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuval_agent.backends.simulated.config import SimulationConfig
from gpuval_agent.cli import build_parser
from gpuval_agent.fabric.analysis import Conclusion
from gpuval_agent.fabric.frontend import plan_from_args
from gpuval_agent.fabric.simtraining import simulated_figures, train_info
from gpuval_agent.fabric.steps import StepReport, StepStatus, TrainFigures
from gpuval_agent.fabric.torchfabric import train_report
from gpuval_agent.fabric.trainanalysis import (
    TrainPhase,
    group_train_record,
    train_pair_record,
    train_plan,
    with_training,
)
from gpuval_api.checks import TrainModel
from gpuval_api.fabric import pair_rounds
from gpuval_api.fabric.train import FabricTrain
from gpuval_api.reasons import Reason
from gpuval_api.result import Verdict
from gpuval_api.training import decode_loss, encode_loss
from tests.unit.agent.test_agent_fabric_cli import _group

GIB = 1 << 30
CONFIG = FabricTrain(enabled=True, model=TrainModel.TINY, steps=4, warmup_steps=1)
PLAN = train_plan(CONFIG, [{"gpus": 2}])
INFOS = [{"gpus": 2, "product": "NVIDIA H200", "driver": "580.159.04"}] * 2


def figures(step: float, loss: float, pair: tuple[int, int] | None = None) -> TrainFigures:
    return TrainFigures(
        pair=pair,
        losses=[[encode_loss(loss)] * 5, [encode_loss(loss + 1.0)] * 5],
        step_seconds=[step] * 4,
        tokens=1000 * 4,
        versions={"torch": "2.9.1", "cuda": "12.8", "nccl": "2.28.9"},
    )


def test_the_groups_run_takes_the_slowest_nodes_steps_and_every_gpus_loss() -> None:
    reports = [StepReport(train=figures(0.1, 2.0)), StepReport(train=figures(0.2, 4.0))]
    record = group_train_record(reports, ["a", "b"], PLAN, INFOS)
    result = record.result
    assert record.status is StepStatus.OK
    assert result.tokens_per_second == pytest.approx(8000 / 0.8)  # every GPU's, the slower's steps
    assert result.figure == pytest.approx(8000 / 0.8 / 4)
    assert result.step_median_seconds == pytest.approx(0.2)
    assert result.record is not None
    assert [decode_loss(v) for v in result.record.losses] == [pytest.approx(3.5)] * 5
    determinants = result.record.determinants
    assert determinants.model == f"{PLAN.describe()} across 2 nodes"
    assert (determinants.gpu_count, determinants.torch) == (4, "2.9.1")


def test_a_node_that_failed_the_groups_run_is_named_in_its_summary() -> None:
    reports = [
        StepReport(train=figures(0.1, 2.0)),
        StepReport(status=StepStatus.TIMEOUT, error="no result within 600 s: hung"),
    ]
    record = group_train_record(reports, ["a", "b"], PLAN, INFOS)
    assert record.status is StepStatus.TIMEOUT and record.result.record is None
    assert record.summary == "b: no result within 600 s: hung" == record.result.error


def test_a_training_pair_without_both_nodes_figures_is_an_error() -> None:
    reports = [StepReport(train=figures(0.1, 2.0, pair=(0, 1))), StepReport()]
    record = train_pair_record(1, (0, 1), reports=reports, nodes=["a", "b"], gpus=[2, 2])
    assert record.status is StepStatus.ERROR and record.pair.figure is None
    reports[1] = StepReport(train=figures(0.2, 2.0, pair=(0, 1)))
    record = train_pair_record(1, (0, 1), reports=reports, nodes=["a", "b"], gpus=[2, 2])
    assert record.status is StepStatus.OK and record.pair.figure == pytest.approx(8000 / 0.8 / 4)


def _phase(slow: str | None) -> TrainPhase:
    """A group of four whose training pairs run at 1.0 (0.7 with the slow node)."""
    nodes = ["a", "b", "c", "d"]
    pairs = []
    for number, rnd in enumerate(pair_rounds(4), start=1):
        for x, y in rnd:
            step = 0.1 / (0.7 if slow in (nodes[x], nodes[y]) else 1.0)
            ends = [StepReport(), StepReport(), StepReport(), StepReport()]
            ends[x] = ends[y] = StepReport(train=figures(step, 2.0, pair=(x, y)))
            pairs.append(train_pair_record(number, (x, y), reports=ends, nodes=nodes, gpus=[2] * 4))
    group = group_train_record([StepReport(train=figures(0.1, 2.0))] * 4, nodes, PLAN, INFOS * 2)
    return TrainPhase(group, pairs)


def test_a_node_slow_in_both_its_training_pairs_is_named_and_the_others_pass() -> None:
    fine = Conclusion(Verdict.PASSED, None, "group busbw 380.0 GB/s")
    phase = _phase("c")
    named = with_training(fine, "c", CONFIG, phase)
    assert (named.verdict, named.reason) == (Verdict.FAILED, Reason.FABRIC_TRAIN_SLOW_NODE)
    assert "slow in every training pair it was in" in named.message
    other = with_training(fine, "a", CONFIG, phase)
    assert other.verdict is Verdict.PASSED
    assert other.message.startswith("group busbw 380.0 GB/s; training ")
    assert other.message.endswith("the training pairs name c, not this node")


def test_what_the_all_reduce_found_against_a_node_stands_over_its_training() -> None:
    slow = Conclusion(Verdict.FAILED, Reason.FABRIC_SLOW_NODE, "slow in every pair")
    assert with_training(slow, "c", CONFIG, _phase("c")) is slow


def test_a_group_whose_run_failed_and_whose_pairs_name_no_one_fails_every_node() -> None:
    phase = _phase(None)
    phase.group = group_train_record(
        [StepReport(status=StepStatus.ERROR, error="NCCL error")] + [StepReport()] * 3,
        ["a", "b", "c", "d"],
        PLAN,
        INFOS * 2,
    )
    found = with_training(Conclusion(Verdict.PASSED, None, "fine"), "b", CONFIG, phase)
    assert (found.verdict, found.reason) == (Verdict.FAILED, Reason.NCCL_ERROR)
    assert "the training step across the group failed" in found.message


def test_the_group_trains_the_shape_its_smallest_gpu_memory_holds() -> None:
    auto = FabricTrain(enabled=True)
    plan = train_plan(auto, [{"memoryBytes": 141 * GIB}, {"memoryBytes": 40 * GIB}, {}])
    assert plan.shape.model is TrainModel.MEDIUM
    assert train_plan(auto, [{"gpus": 8}]).shape.model is TrainModel.TINY


def test_the_real_ranks_training_events_become_this_nodes_figures() -> None:
    events = [
        {"id": 3, "pair": [0, 2], "losses": ["40000000"], "stepSeconds": [0.1, 0.3], "tokens": 10},
        {"id": 3, "pair": [0, 2], "losses": ["40400000"], "stepSeconds": [0.2, 0.2], "tokens": 10},
    ]
    report = train_report(events)
    assert report.ok and report.train is not None
    assert report.train.pair == (0, 2) and report.train.step_seconds == [0.2, 0.3]
    assert report.train.losses == [["40000000"], ["40400000"]] and report.train.tokens == 20
    assert train_report([{"id": 3, "idle": True}]).train is None
    crashed = train_report([{"id": 3, "error": "OutOfMemoryError: CUDA out of memory"}])
    assert crashed.status is StepStatus.ERROR and crashed.error is not None


def test_the_doubles_groups_of_one_size_and_stack_train_bit_identical_losses() -> None:
    healthy = SimulationConfig(gpus=2)
    fault = {"kind": "train-wrong-loss", "step": 2}
    wrong = SimulationConfig.model_validate({"gpus": 2, "faults": [fault]})
    infos = [{"gpus": 2, **train_info(healthy)}, {"gpus": 2, **train_info(healthy)}]

    def run(simulation: SimulationConfig, rank: int) -> TrainFigures:
        mine = [dict(i) for i in infos]
        mine[rank] |= train_info(simulation)
        return simulated_figures(
            PLAN, simulation, infos=mine, members=[0, 1], rank=rank, busbw_gbps=380.0
        )

    assert run(healthy, 0) == run(healthy, 0)
    assert run(healthy, 1).losses != run(healthy, 0).losses  # each GPU its own shard
    assert run(wrong, 1).losses[0][:1] == run(healthy, 1).losses[0][:1]
    assert run(wrong, 1).losses[0][1:] != run(healthy, 1).losses[0][1:]
    slow = SimulationConfig.model_validate({"gpus": 2, "faults": [{"kind": "fabric-train-slow"}]})
    assert run(slow, 1).step_seconds[0] > run(healthy, 1).step_seconds[0]


def test_the_training_flags_go_into_the_fabric_configuration(tmp_path: Path) -> None:
    config = tmp_path / "fabric.json"
    config.write_text(json.dumps({"train": {"seed": 7, "steps": 9}}))
    by_hand = ["fabric", "--rank", "0", "--world", "2", "--master", "127.0.0.1:29500"]
    args = build_parser().parse_args(
        [*by_hand, "--config", str(config), "--train", "--train-model", "tiny"]
    )
    train = plan_from_args(args).config.train
    assert (train.enabled, train.model, train.seed, train.steps) == (True, TrainModel.TINY, 7, 9)


def test_by_hand_a_node_slow_in_the_training_phase_is_named_and_the_others_pass(
    tmp_path: Path,
) -> None:
    config = {
        "timeouts": {"initSeconds": 10, "phaseSeconds": 10},
        "maxBytes": 1 << 30,
        "train": {"enabled": True, "model": "tiny", "steps": 4, "warmupSteps": 1},
    }
    nodes = _group(tmp_path, 4, faults={2: [{"kind": "fabric-train-slow"}]}, config=config)
    verdicts = [(n.code, n.result.verdict, n.result.reason) for n in nodes]
    assert verdicts == [
        (0, Verdict.PASSED, None),
        (0, Verdict.PASSED, None),
        (1, Verdict.FAILED, Reason.FABRIC_TRAIN_SLOW_NODE),
        (0, Verdict.PASSED, None),
    ]
    trains = [n.result.train for n in nodes]
    assert all(t is not None and t.record is not None for t in trains)
    digests = {t.record.digest for t in trains if t is not None and t.record is not None}
    assert len(digests) == 1, "every node reports the group's one loss sequence"
    first = trains[0]
    assert first is not None and len(first.pairs) == 5  # two rounds of two, one confirmation
    assert "TRAINING (tiny" in nodes[0].output and "node-c - " in nodes[0].output
    assert "the training pairs name node-c, not this node" in nodes[0].result.message
