"""The training step: a small transformer trained data-parallel over the node's GPUs, its speed
judged against a minimum, its loss at every step recorded exactly for the operator to compare
across the run's nodes (docs/agent.md, "The training step")."""

from __future__ import annotations

import time

from gpuval_agent.checks.common import CheckBuilder, CheckContext
from gpuval_agent.training import (
    TrainOutcome,
    TrainPlan,
    TrainProgress,
    node_losses,
    non_finite_step,
    percentile,
)
from gpuval_api import Reason, Verdict
from gpuval_api.result import CheckResult, Environment, TrainMetric
from gpuval_api.training import (
    TrainingDeterminants,
    TrainingRecord,
    decode_loss,
    loss_digest,
)

_LOG_TAIL_CHARS = 8000
# Seconds between two progress updates (the ranks report every second; a line a second would
# flood a log, as in the memory check).
_PROGRESS_SECONDS = 2.0
CHECK = "train"


def memory_of(environment: Environment, gpus: list[int]) -> int | None:
    """The smallest total memory of `gpus` (the shape must fit every one of them)."""
    sizes = [
        g.memory_total_bytes
        for g in environment.gpus
        if g.index in gpus and g.memory_total_bytes is not None
    ]
    return min(sizes) if sizes else None


def prepare_train(context: CheckContext) -> None:
    """Let the backend start the training step's ranks now, for the GPUs usable now (a check in
    between that changes them makes the step start its own)."""
    gpus = context.usable_gpus
    if gpus:
        plan = TrainPlan.of(context.config.train, memory_of(context.environment, gpus))
        context.backend.prepare_train(gpus, plan)


def run_train(context: CheckContext) -> CheckResult:
    builder = CheckBuilder(CHECK, context)
    config = context.config.train
    gpus = context.usable_gpus
    context.note_excluded(builder)
    if not gpus:
        return builder.finish(message="skipped: no usable GPU", verdict=Verdict.SKIPPED)
    plan = TrainPlan.of(config, memory_of(context.environment, gpus))
    context.reporter.check_progress(
        CHECK, 0.0, f"{plan.describe()} on {len(gpus)} GPUs: starting the ranks"
    )

    last = [0.0]

    def progress(update: TrainProgress) -> None:
        now = time.monotonic()
        if now - last[0] < _PROGRESS_SECONDS and update.step < update.steps:
            return
        last[0] = now
        rate = f", {update.tokens_per_second:,.0f} tok/s" if update.tokens_per_second else ""
        loss = f", loss {update.loss:.4f}" if update.loss is not None else ""
        context.reporter.check_progress(
            CHECK, update.step / update.steps, f"step {update.step}/{update.steps}{rate}{loss}"
        )

    outcome = context.backend.train(gpus, plan, on_progress=progress, stop=context.stop)
    if outcome.log_tail:
        builder.log_tail = outcome.log_tail[-_LOG_TAIL_CHARS:]
    if outcome.timed_out:
        builder.add(
            Reason.CHECK_ERROR,
            f"training on {len(gpus)} GPUs did not finish within {plan.timeout_seconds:.0f} s "
            "(train.timeoutSeconds); the ranks' output is kept in logTail",
        )
        return builder.finish()
    if outcome.error is not None or not outcome.ranks:
        builder.add(
            Reason.CHECK_ERROR,
            f"training on {len(gpus)} GPUs failed: {outcome.error or 'no rank answered'}",
        )
        return builder.finish()
    builder.log_tail = None
    _figures(builder, context, plan, outcome)
    losses = node_losses(outcome.ranks)
    if losses:
        builder.metrics[TrainMetric.LOSS_FIRST] = round(decode_loss(losses[0]), 6)
        builder.metrics[TrainMetric.LOSS_LAST] = round(decode_loss(losses[-1]), 6)
    builder.training = _record(context, plan, outcome, losses)
    _judge(builder, context, plan, outcome)
    if builder.failed:
        return builder.finish()
    return builder.finish(message=_summary(builder, plan, len(gpus), losses))


def _figures(
    builder: CheckBuilder, context: CheckContext, plan: TrainPlan, outcome: TrainOutcome
) -> None:
    flops = plan.shape.flops_per_token
    peak = context.part.dense_bf16_tflops
    for rank in outcome.ranks:
        rate = rank.tokens_per_second
        builder.gpu_metric(rank.gpu, TrainMetric.TOKENS_PER_SECOND, rate)
        builder.gpu_metric(rank.gpu, TrainMetric.MODEL_TFLOPS, rate * flops / 1e12)
        if peak:
            builder.gpu_metric(rank.gpu, TrainMetric.MFU, rate * flops / 1e12 / peak)
        builder.gpu_metric(rank.gpu, TrainMetric.PEAK_MEMORY, float(rank.peak_memory_bytes))
        builder.gpu_metric(rank.gpu, TrainMetric.STEP_MEDIAN, percentile(rank.step_seconds, 0.5))
    node_rate = outcome.node_tokens_per_second
    steps = outcome.node_step_seconds()
    metrics = builder.metrics
    metrics[TrainMetric.TOKENS_PER_SECOND] = round(node_rate, 1)
    metrics[TrainMetric.MODEL_TFLOPS] = round(node_rate * flops / 1e12, 2)
    if peak:
        metrics[TrainMetric.PEAK_TFLOPS] = peak
        metrics[TrainMetric.MFU] = round(node_rate * flops / 1e12 / peak / len(outcome.ranks), 4)
    metrics[TrainMetric.STEP_MEDIAN] = round(percentile(steps, 0.5), 5)
    metrics[TrainMetric.STEP_P99] = round(percentile(steps, 0.99), 5)
    metrics[TrainMetric.PEAK_MEMORY] = float(max(r.peak_memory_bytes for r in outcome.ranks))
    metrics[TrainMetric.PARAMETERS] = float(plan.shape.parameters)
    metrics[TrainMetric.FLOPS_PER_TOKEN] = float(flops)
    metrics[TrainMetric.TOKENS_PER_STEP] = float(plan.tokens_per_step * len(outcome.ranks))
    metrics[TrainMetric.STEPS] = float(plan.steps)
    metrics[TrainMetric.WARMUP_STEPS] = float(plan.warmup_steps)


def _record(
    context: CheckContext, plan: TrainPlan, outcome: TrainOutcome, losses: list[str]
) -> TrainingRecord:
    environment = context.environment
    versions = outcome.ranks[0].versions
    product = next(
        (g.name for g in environment.gpus if g.index == outcome.ranks[0].gpu and g.name), "?"
    )
    return TrainingRecord(
        losses=losses,
        digest=loss_digest(losses),
        determinants=TrainingDeterminants(
            gpu_product=product,
            gpu_count=len(outcome.ranks),
            driver=environment.driver_version,
            cuda=versions.get("cuda") or environment.cuda_runtime_version,
            torch=versions.get("torch") or environment.torch_version,
            nccl=versions.get("nccl") or environment.nccl_version,
            model=plan.describe(),
            seed=plan.seed,
            steps=plan.total_steps,
            attention=str(plan.attention),
        ),
    )


def _judge(
    builder: CheckBuilder, context: CheckContext, plan: TrainPlan, outcome: TrainOutcome
) -> None:
    for rank in outcome.ranks:
        step = non_finite_step(rank.losses)
        if step is not None:
            builder.add(
                Reason.TRAINING_LOSS_NOT_FINITE,
                f"GPU {rank.gpu}: the training loss was "
                f"{decode_loss(rank.losses[step - 1])} at step {step} of {plan.total_steps}",
                gpu=rank.gpu,
            )
    expected = context.part.train_tokens_per_second.get(plan.key)
    minimum = context.config.train.min_tokens_per_second.minimum(expected)
    ranks = outcome.ranks
    per_gpu = outcome.node_tokens_per_second / len(ranks)
    if minimum is None or per_gpu >= minimum:
        return
    # Data-parallel ranks wait for each other every step: one slow GPU slows them all, so the
    # node's rate is judged, naming a GPU only when it trained alone.
    where = f"GPU {ranks[0].gpu}" if len(ranks) == 1 else f"{len(ranks)} GPUs data-parallel"
    builder.add(
        Reason.LOW_TRAINING_THROUGHPUT,
        f"{where}: trained {per_gpu:,.0f} tokens/s per GPU ({plan.describe()}), below the "
        f"minimum {minimum:,.0f} (train.minTokensPerSecond)",
        gpu=ranks[0].gpu if len(ranks) == 1 else None,
    )


def _summary(builder: CheckBuilder, plan: TrainPlan, gpus: int, losses: list[str]) -> str:
    metrics = builder.metrics
    mfu = metrics.get(TrainMetric.MFU)
    said = f", MFU {mfu:.1%}" if mfu is not None else ""
    loss = f", loss {decode_loss(losses[0]):.4f} -> {decode_loss(losses[-1]):.4f}" if losses else ""
    return (
        f"{gpus} GPUs, {plan.describe()} ({plan.shape.parameters / 1e9:.2f} B parameters): "
        f"{metrics[TrainMetric.TOKENS_PER_SECOND]:,.0f} tokens/s{said}, step "
        f"{metrics[TrainMetric.STEP_MEDIAN] * 1e3:.0f} ms median / "
        f"{metrics[TrainMetric.STEP_P99] * 1e3:.0f} ms p99{loss}"
    )
