"""The training phase's evidence (fabric.train): from the group's gathered reports to its figures,
its loss record and its training pairs, and what they say against this node. Pure: no I/O, no
clock.

The group's run and each pair's are data-parallel: their ranks wait for each other every step, so
a step takes the slowest GPU's time, and the run's rate is every GPU's tokens over the sum of those
steps. The figure judged is tokens per second per GPU (with a fixed micro-batch per GPU, the
inverse of the step time): the pairs of a group are judged as the all-reduce pairs are
(gpuval_api.fabric.isolation, its TRAINING measure), against the median over the group's nodes of
each one's best training pair; comparing the group with the run's other groups is the operator's.

This node's verdict from them, once the all-reduce phases found nothing against it: the training
pairs name it (slow: FabricTrainSlowNode, FabricSlowLink or FabricSlowPair; its pairs hung or
crashed: NcclTimeout, NcclError); the group's run failed and no training pair named anyone (every
node fails with its reason); else Passed, the message saying the training figures.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuval_agent.fabric.analysis import (
    REASON_OF,
    Conclusion,
    PairRecord,
    blamed,
    problems,
    worst,
)
from gpuval_agent.fabric.steps import StepReport, StepStatus, TrainFigures
from gpuval_agent.training import TrainPlan, mean_losses, percentile
from gpuval_api import Verdict
from gpuval_api.fabric.isolation import TRAINING, blame, reference
from gpuval_api.fabric.train import FabricTrain, FabricTrainPair, FabricTrainResult
from gpuval_api.training import TrainingDeterminants, TrainingRecord, loss_digest


@dataclass
class TrainGroupRecord:
    status: StepStatus
    result: FabricTrainResult
    summary: str = ""  # what went wrong, one line naming the nodes


@dataclass
class TrainPhase:
    """The whole training phase: the group's run and every training pair."""

    group: TrainGroupRecord
    pairs: list[PairRecord[FabricTrainPair]] = field(default_factory=list)

    @property
    def troubled(self) -> bool:
        return self.group.status is not StepStatus.OK or any(
            p.status is not StepStatus.OK for p in self.pairs
        )

    def result(self) -> FabricTrainResult:
        return self.group.result.model_copy(update={"pairs": [p.pair for p in self.pairs]})


def train_plan(config: FabricTrain, infos: Sequence[Mapping[str, Any]]) -> TrainPlan:
    """What every node of the group trains: the shape from the smallest GPU memory any node told
    the group (DDP needs the same model on every rank)."""
    sizes = [int(i["memoryBytes"]) for i in infos if isinstance(i.get("memoryBytes"), int)]
    return TrainPlan.of(config.check(), min(sizes) if sizes else None)


@dataclass(frozen=True, slots=True)
class _Run:
    """One data-parallel run from its nodes' figures."""

    tokens_per_second: float | None
    step_median: float | None
    step_p99: float | None
    losses: list[str]


def _run(figures: Sequence[TrainFigures]) -> _Run:
    counts = {len(f.step_seconds) for f in figures}
    if not figures or len(counts) != 1 or counts == {0}:
        return _Run(None, None, None, [])
    steps = [max(times) for times in zip(*(f.step_seconds for f in figures), strict=True)]
    seconds = sum(steps)
    tokens = sum(f.tokens for f in figures)
    rate = tokens / seconds if seconds > 0 else None
    losses = mean_losses([rank for f in figures for rank in f.losses])
    return _Run(rate, percentile(steps, 0.5), percentile(steps, 0.99), losses)


def _joined(values: Sequence[object]) -> str | None:
    """The nodes' values of one determinant: one, or every distinct one ('580.1/575.2')."""
    found = sorted({str(v) for v in values if v is not None})
    return "/".join(found) or None


def _record(
    losses: list[str],
    plan: TrainPlan,
    infos: Sequence[Mapping[str, Any]],
    figures: Sequence[TrainFigures],
    gpus: int,
) -> TrainingRecord:
    versions = [f.versions for f in figures]
    return TrainingRecord(
        losses=losses,
        digest=loss_digest(losses),
        determinants=TrainingDeterminants(
            gpu_product=_joined([i.get("product") for i in infos]) or "?",
            gpu_count=gpus,
            driver=_joined([i.get("driver") for i in infos]),
            cuda=_joined([v.get("cuda") for v in versions]),
            torch=_joined([v.get("torch") for v in versions]),
            nccl=_joined([v.get("nccl") for v in versions]),
            model=f"{plan.describe()} across {len(infos)} nodes",
            seed=plan.seed,
            steps=plan.total_steps,
            attention=str(plan.attention),
        ),
    )


def group_train_record(
    reports: Sequence[StepReport],
    nodes: Sequence[str],
    plan: TrainPlan,
    infos: Sequence[Mapping[str, Any]],
) -> TrainGroupRecord:
    """The group's run from every node's report: figures and the loss record when all agree it
    finished."""
    gpus = sum(int(i.get("gpus") or 0) for i in infos)
    result = FabricTrainResult(model=plan.describe(), nodes=len(nodes), gpus=gpus)
    figures = [r.train for r in reports if r.ok and r.train is not None]
    if len(figures) != len(reports):
        if all(r.ok for r in reports):
            missing = [n for n, r in zip(nodes, reports, strict=True) if r.train is None]
            status, summary = StepStatus.ERROR, f"{', '.join(missing)}: no training figures"
        else:
            status, summary = worst([r.status for r in reports]), problems(reports, nodes)
        return TrainGroupRecord(status, result.model_copy(update={"error": summary}), summary)
    run = _run(figures)
    if run.tokens_per_second is not None:
        result.tokens_per_second = round(run.tokens_per_second, 1)
    result.step_median_seconds = run.step_median
    result.step_p99_seconds = run.step_p99
    if run.losses:
        result.record = _record(run.losses, plan, infos, figures, gpus)
    return TrainGroupRecord(StepStatus.OK, result)


def train_pair_record(
    round_number: int,
    ranks: tuple[int, int],
    *,
    reports: Sequence[StepReport],
    nodes: Sequence[str],
    gpus: Sequence[int],
) -> PairRecord[FabricTrainPair]:
    """One training pair of a round, from its two nodes' reports."""
    a, b = ranks
    ends = [reports[a], reports[b]]
    pair = FabricTrainPair(round=round_number, a=nodes[a], b=nodes[b], gpus=gpus[a] + gpus[b])
    if not all(r.ok for r in ends):
        pair.error = problems(ends, [nodes[a], nodes[b]])
        return PairRecord(pair, worst([r.status for r in ends]))
    figures = [r.train for r in ends if r.train is not None and r.train.pair == (a, b)]
    run = _run(figures)
    if len(figures) != 2 or run.tokens_per_second is None:
        pair.error = "its nodes reported no training figures for this pair"
        return PairRecord(pair, StepStatus.ERROR)
    pair.tokens_per_second = round(run.tokens_per_second, 1)
    pair.step_seconds = run.step_median
    return PairRecord(pair, StepStatus.OK)


def train_floor(config: FabricTrain, pairs: Sequence[PairRecord[FabricTrainPair]]) -> float:
    """Below this a training pair is slow: the fraction of the group's reference (the median
    over its nodes of each node's best training pair)."""
    return config.floor(reference(p.pair for p in pairs))


def _described(phase: TrainPhase, floor: float) -> str:
    result = phase.group.result
    parts = []
    figure = result.figure
    if figure is not None and result.step_median_seconds is not None:
        parts.append(
            f"training {figure:,.0f} tokens/s per GPU across {result.nodes} nodes "
            f"({result.model}, step {result.step_median_seconds * 1e3:.3g} ms median)"
        )
    figures = [p.pair.figure for p in phase.pairs if p.pair.figure is not None]
    if figures:
        parts.append(f"training pairs {min(figures):,.0f}-{max(figures):,.0f} (floor {floor:,.0f})")
    return "; ".join(parts)


def with_training(
    conclusion: Conclusion, me: str, config: FabricTrain, phase: TrainPhase
) -> Conclusion:
    """This node's conclusion once the training phase is in (module docstring): what the
    all-reduce phases found against it stands; else the training's evidence speaks."""
    if conclusion.verdict is not Verdict.PASSED:
        return conclusion
    floor = train_floor(config, phase.pairs)
    blames = blame([p.pair for p in phase.pairs], floor, TRAINING)
    mine = next((b for b in blames if b.node == me), None)
    if mine is not None:
        return blamed(me, mine, phase.pairs, TRAINING)
    named = ", ".join(sorted({b.node for b in blames}))
    others = f"; the training pairs name {named}, not this node" if named else ""
    group = phase.group
    if group.status is not StepStatus.OK:
        if named:
            text = f"{conclusion.message}; the group's training run failed ({group.summary})"
            return Conclusion(Verdict.PASSED, None, text + others)
        return Conclusion(
            Verdict.FAILED,
            REASON_OF[group.status],
            f"the training step across the group failed and no training pair named a node: "
            f"{group.summary}",
        )
    said = _described(phase, floor)
    message = f"{conclusion.message}; {said}" if said else conclusion.message
    return Conclusion(Verdict.PASSED, None, message + others)
