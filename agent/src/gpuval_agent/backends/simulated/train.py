"""The simulated backend's training step: a TEST DOUBLE's part. It trains nothing.

Its losses are a smooth curve from ln(vocabulary) down, with a small jitter drawn from a hash of
the experiment, the stack and the step: deterministic, so every simulated node of one stack and
experiment computes bit-identical losses, as real ones do. Its speed is the part's expected
tokens per second (or, for a part with none, 45 % of the part's dense bf16 peak), at the double's
healthy fraction. Faults: train-slow (the node trains at `factor`, 0.7, of that: its
data-parallel ranks wait for the slow GPU) and train-wrong-loss (the GPU's losses are a part in a
thousand off from the 1-based `step`, 10, on: the node passes on its own).
"""

from __future__ import annotations

import hashlib
import math
import threading
from collections.abc import Callable

from gpuval_agent.backends.simulated.config import Fault, SimulationConfig
from gpuval_agent.parts import PartFigures
from gpuval_agent.training import (
    RankTraining,
    TrainOutcome,
    TrainPlan,
    TrainProgress,
    TrainProgressCallback,
)
from gpuval_api.training import encode_loss

_HEALTHY = 0.97  # as the double's other figures: this share of the part's expected figure
_FALLBACK_MFU = 0.45
_SLOW_FACTOR = 0.7
_WRONG_FROM_STEP = 10
_WRONG_BY = 1e-3
_PROGRESS_UPDATES = 5


def simulated_versions(config: SimulationConfig) -> dict[str, str | None]:
    """What the double's ranks say they ran with (the stack part of the losses' determinants)."""
    return {"torch": "simulated", "cuda": config.cuda_runtime or config.cuda, "nccl": config.nccl}


def simulated_loss(plan: TrainPlan, config: SimulationConfig, rank: int, step: int) -> float:
    """Rank `rank`'s loss at 0-based `step`: the same for the same experiment and stack."""
    key = f"{plan.describe()}|{plan.seed}|{config.product}|{config.driver}|{config.cuda}|{rank}"
    digest = hashlib.sha256(f"{key}|{step}".encode()).digest()
    jitter = int.from_bytes(digest[:4], "big") / 2**32 - 0.5
    start = math.log(plan.shape.vocab)
    return start * (0.55 + 0.45 * math.exp(-step / 30)) + 0.004 * jitter


def simulated_rate(plan: TrainPlan, part: PartFigures) -> float:
    """A healthy simulated GPU's tokens per second."""
    expected = part.train_tokens_per_second.get(plan.key)
    if expected is None:
        peak = part.dense_bf16_tflops or 989.4
        expected = _FALLBACK_MFU * peak * 1e12 / plan.shape.flops_per_token
    return expected * _HEALTHY


def simulated_train(
    config: SimulationConfig,
    part: PartFigures,
    gpus: list[int],
    plan: TrainPlan,
    *,
    slow: Fault | None,
    wrong: list[Fault],
    share: dict[int, float],
    on_progress: TrainProgressCallback,
    stop: threading.Event,
    sleep: Callable[[float, threading.Event | None], None],
) -> TrainOutcome:
    """Every rank's run (module docstring); `share` is each GPU's share beside another process."""
    factor = 1.0
    if slow is not None and slow.gpu in gpus:
        factor = slow.factor if slow.factor is not None else _SLOW_FACTOR
    rate = simulated_rate(plan, part) * factor * min(share.values(), default=1.0)
    step_seconds = plan.tokens_per_step / rate
    for update in range(1, _PROGRESS_UPDATES + 1):
        if stop.is_set():
            return TrainOutcome(error="stopped by a signal")
        sleep(step_seconds * plan.total_steps / _PROGRESS_UPDATES, stop)
        step = plan.total_steps * update // _PROGRESS_UPDATES
        loss = simulated_loss(plan, config, 0, step - 1)
        on_progress(TrainProgress(step, plan.total_steps, rate * len(gpus), loss))
    versions = simulated_versions(config)
    ranks = []
    for rank, gpu in enumerate(gpus):
        fault = next((f for f in wrong if f.gpu == gpu), None)
        first_wrong = (fault.step or _WRONG_FROM_STEP) - 1 if fault is not None else None
        losses = []
        for step in range(plan.total_steps):
            loss = simulated_loss(plan, config, rank, step)
            if first_wrong is not None and step >= first_wrong:
                loss *= 1 + _WRONG_BY
            losses.append(encode_loss(loss))
        ranks.append(
            RankTraining(
                gpu=gpu,
                losses=losses,
                step_seconds=[step_seconds] * plan.steps,
                timed_seconds=step_seconds * plan.steps,
                tokens=plan.tokens_per_step * plan.steps,
                peak_memory_bytes=_peak_memory(plan),
                versions=versions,
            )
        )
    return TrainOutcome(ranks=ranks)


def _peak_memory(plan: TrainPlan) -> int:
    """A plausible peak: 8 bytes a parameter (bf16 weights, gradients, Adam's two moments) and
    ~34 bytes of activations per token, layer and model dimension, in bf16."""
    shape = plan.shape
    activations = 34 * plan.tokens_per_step * shape.d_model * shape.layers
    return 8 * shape.parameters + activations
