"""The fabric double's training phase: a TEST DOUBLE's part (gpuval_agent.fabric.simulated). It
trains nothing.

Each node tells its group, when it joins, how fast its GPUs train (`trainSpeed`: the product of
its fabric-train-slow and train-slow factors, 0.7 each by default) and from which step its losses
go wrong (train-wrong-loss). A data-parallel run over some nodes (the group, or a pair) then takes,
every step, the slowest member's compute time (a healthy simulated GPU's rate, as the per-node
double's train check: backends/simulated/train.simulated_rate) plus one ring all-reduce of the bf16
gradients at the members' busbw (the same model as the all-reduce phases). Each node computes its
own GPUs' losses: a smooth curve with a jitter hashed from the experiment, the stack, the run's
GPU count and the GPU's rank in it, so every run of one stack and size computes bit-identical
losses, as real ones do; a node with train-wrong-loss has its GPUs' losses a part in a thousand
off from the fault's step on, so every run it is in differs.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from typing import Any

from gpuval_agent.allreduce import bus_bandwidth
from gpuval_agent.backends.simulated.config import FaultKind, SimulationConfig
from gpuval_agent.backends.simulated.foreign import MEMORY_TOTAL
from gpuval_agent.backends.simulated.train import simulated_rate, simulated_versions
from gpuval_agent.fabric.steps import TrainFigures
from gpuval_agent.parts import figures_for
from gpuval_agent.training import TrainPlan
from gpuval_api.training import encode_loss

SLOW_TRAINING = 0.7  # fabric-train-slow's and train-slow's default factor
_WRONG_FROM_STEP = 10
_WRONG_BY = 1e-3
_GRADIENT_BYTES = 2  # bf16


def train_info(simulation: SimulationConfig) -> dict[str, Any]:
    """What a simulated node tells its group for the training phase."""
    speed = 1.0
    for fault in simulation.faults:
        if fault.kind in (FaultKind.FABRIC_TRAIN_SLOW, FaultKind.TRAIN_SLOW):
            speed *= fault.factor or SLOW_TRAINING
    wrong = next(
        (
            f.step or _WRONG_FROM_STEP
            for f in simulation.faults
            if f.kind is FaultKind.TRAIN_WRONG_LOSS
        ),
        None,
    )
    return {
        "memoryBytes": MEMORY_TOTAL,
        "product": simulation.product,
        "driver": simulation.driver,
        "trainSpeed": speed,
        "trainWrongFrom": wrong,
    }


def _loss(plan: TrainPlan, simulation: SimulationConfig, world: int, rank: int, step: int) -> float:
    key = (
        f"{plan.describe()}|{plan.seed}|{simulation.product}|{simulation.driver}|"
        f"{simulation.cuda}|world {world}|{rank}"
    )
    digest = hashlib.sha256(f"{key}|{step}".encode()).digest()
    jitter = int.from_bytes(digest[:4], "big") / 2**32 - 0.5
    return math.log(plan.shape.vocab) * (0.55 + 0.45 * math.exp(-step / 30)) + 0.004 * jitter


def simulated_figures(
    plan: TrainPlan,
    simulation: SimulationConfig,
    *,
    infos: Sequence[Mapping[str, Any]],
    members: list[int],
    rank: int,
    busbw_gbps: float,
    slower: float = 1.0,
    pair: tuple[int, int] | None = None,
) -> TrainFigures:
    """This node's (`rank`'s) figures of one data-parallel run over `members` (node ranks, in
    order), whose ring all-reduce reaches `busbw_gbps`; `slower`: this node's collectives take
    that many times longer (another process computing on one of its GPUs)."""
    gpus = [int(infos[m].get("gpus") or 1) for m in members]
    world = sum(gpus)
    speed = min(float(infos[m].get("trainSpeed") or 1.0) for m in members)
    compute = plan.tokens_per_step / (simulated_rate(plan, figures_for(simulation.product)) * speed)
    gradient = 0.0
    if world > 1:
        algbw = busbw_gbps / bus_bandwidth(1.0, world)
        gradient = _GRADIENT_BYTES * plan.shape.parameters / (algbw * 1e9)
    step_seconds = (compute + gradient) * slower
    position = members.index(rank)
    offset, mine = sum(gpus[:position]), gpus[position]
    wrong = infos[rank].get("trainWrongFrom")
    losses = []
    for local in range(mine):
        values = []
        for step in range(plan.total_steps):
            loss = _loss(plan, simulation, world, offset + local, step)
            if wrong is not None and step >= int(wrong) - 1:
                loss *= 1 + _WRONG_BY
            values.append(encode_loss(loss))
        losses.append(values)
    return TrainFigures(
        pair=pair,
        losses=losses,
        step_seconds=[step_seconds] * plan.steps,
        tokens=plan.tokens_per_step * mine * plan.steps,
        versions=simulated_versions(simulation),
    )
