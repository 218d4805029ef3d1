"""The training check's plan and figures, kept free of torch: the model shapes and the rule that
sizes them from the GPUs' memory, the FLOP count MFU uses, what the ranks report and how the node's
figures and losses are made from it (docs/agent.md, "The training step").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuval_api.checks import TrainAttention, TrainCheck, TrainModel
from gpuval_api.training import decode_loss, encode_loss

GIB = 1 << 30


@dataclass(frozen=True, slots=True)
class ModelShape:
    """A decoder-only transformer: token embedding tied to the LM head, `layers` blocks of
    pre-norm causal self-attention and a 4x MLP, a final norm."""

    model: TrainModel
    d_model: int
    layers: int
    heads: int
    vocab: int
    sequence: int

    @property
    def parameters(self) -> int:
        """Every parameter, the tied embedding once: per block the attention's 4 d^2 and the
        MLP's 8 d^2 and two norm weights, then the embedding and the final norm."""
        d = self.d_model
        return self.layers * (12 * d * d + 2 * d) + self.vocab * d + d

    @property
    def flops_per_token(self) -> float:
        """Training FLOPs per token: 6 N (forward 2, backward 4 for every weight, the tied LM
        head's matmul counted through the embedding) + 12 L d S for attention's two matmuls,
        forward and backward, with no discount for the causal mask (PaLM's appendix B count, as
        nanoGPT's estimate_mfu)."""
        return 6.0 * self.parameters + 12.0 * self.layers * self.d_model * self.sequence

    def to_spec(self) -> dict[str, int]:
        return {
            "dModel": self.d_model,
            "layers": self.layers,
            "heads": self.heads,
            "vocab": self.vocab,
            "sequence": self.sequence,
        }


SHAPES: dict[TrainModel, ModelShape] = {
    TrainModel.LARGE: ModelShape(TrainModel.LARGE, 2048, 18, 16, 32768, 2048),
    TrainModel.MEDIUM: ModelShape(TrainModel.MEDIUM, 1024, 16, 8, 32768, 2048),
    TrainModel.SMALL: ModelShape(TrainModel.SMALL, 768, 12, 6, 32768, 1024),
    TrainModel.TINY: ModelShape(TrainModel.TINY, 256, 4, 2, 8192, 256),
}


def auto_model(memory_bytes: int | None) -> TrainModel:
    """The size rule: large (~1 B) from 60 GiB of GPU memory, medium from 30, small from 12, else
    tiny; unknown memory: tiny."""
    memory = memory_bytes or 0
    if memory >= 60 * GIB:
        return TrainModel.LARGE
    if memory >= 30 * GIB:
        return TrainModel.MEDIUM
    if memory >= 12 * GIB:
        return TrainModel.SMALL
    return TrainModel.TINY


def auto_micro_batch(model: TrainModel, memory_bytes: int | None) -> int:
    """Sequences per GPU and step: the large model's 16 need about 60 GB (activations of 18
    layers at 32k tokens, the logits in fp32, weights, gradients and Adam's moments), so it takes
    16 from 100 GiB and 8 below; the others 8, tiny 4."""
    if model is TrainModel.LARGE:
        return 16 if (memory_bytes or 0) >= 100 * GIB else 8
    return 4 if model is TrainModel.TINY else 8


@dataclass(frozen=True, slots=True)
class TrainPlan:
    """What every rank runs: the shape, the batch, the steps, the settings."""

    shape: ModelShape
    micro_batch: int
    steps: int
    warmup_steps: int
    seed: int
    attention: TrainAttention
    timeout_seconds: float
    # Test hook (GPUVAL_TRAIN_PERTURB): before this 1-based step, `perturb_rank` nudges a weight.
    perturb_step: int | None = None
    perturb_rank: int = 0

    @classmethod
    def of(cls, config: TrainCheck, memory_bytes: int | None) -> TrainPlan:
        model = config.model if config.model is not TrainModel.AUTO else auto_model(memory_bytes)
        batch = config.micro_batch or auto_micro_batch(model, memory_bytes)
        return cls(
            shape=SHAPES[model],
            micro_batch=batch,
            steps=config.steps,
            warmup_steps=config.warmup_steps,
            seed=config.seed,
            attention=config.attention,
            timeout_seconds=config.timeout_seconds,
        )

    @property
    def total_steps(self) -> int:
        return self.warmup_steps + self.steps

    @property
    def tokens_per_step(self) -> int:
        """Tokens one GPU trains on per step."""
        return self.micro_batch * self.shape.sequence

    @property
    def key(self) -> str:
        """The shape and batch an expected figure is measured with ('large/b16')."""
        return f"{self.shape.model}/b{self.micro_batch}"

    def describe(self) -> str:
        s = self.shape
        return (
            f"{s.model} d{s.d_model} L{s.layers} H{s.heads} V{s.vocab} S{s.sequence} "
            f"B{self.micro_batch}"
        )

    def to_command(self, command_id: int) -> dict[str, Any]:
        """The rank process's `train` command."""
        return {
            "op": "train",
            "id": command_id,
            "shape": self.shape.to_spec(),
            "microBatch": self.micro_batch,
            "steps": self.steps,
            "warmupSteps": self.warmup_steps,
            "seed": self.seed,
            "attention": str(self.attention),
            "perturbStep": self.perturb_step,
            "perturbRank": self.perturb_rank,
        }


@dataclass(frozen=True, slots=True)
class TrainProgress:
    """Reported about once a second while the steps run (the live line)."""

    step: int  # steps done, the warm-up counted
    steps: int  # every step, the warm-up counted
    tokens_per_second: float | None  # the node's, over the timed steps so far
    loss: float | None  # the last finished step's, on rank 0


TrainProgressCallback = Callable[[TrainProgress], None]


@dataclass(slots=True)
class RankTraining:
    """One GPU's run: its losses (its own shard of each step's tokens), its timed steps."""

    gpu: int
    losses: list[str] = field(default_factory=list)
    step_seconds: list[float] = field(default_factory=list)
    timed_seconds: float = 0.0
    tokens: int = 0  # trained in the timed steps
    peak_memory_bytes: int = 0
    # What the rank ran with: torch, its CUDA runtime, its NCCL (the losses' determinants).
    versions: dict[str, str | None] = field(default_factory=dict)

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.timed_seconds if self.timed_seconds > 0 else 0.0

    @classmethod
    def parse(cls, gpu: int, event: dict[str, Any]) -> RankTraining:
        return cls(
            gpu=gpu,
            losses=[str(v) for v in event.get("losses") or []],
            step_seconds=[float(v) for v in event.get("stepSeconds") or []],
            timed_seconds=float(event.get("timedSeconds") or 0.0),
            tokens=int(event.get("tokens") or 0),
            peak_memory_bytes=int(event.get("peakMemoryBytes") or 0),
            versions={
                str(k): None if v is None else str(v)
                for k, v in (event.get("versions") or {}).items()
            },
        )


@dataclass(slots=True)
class TrainOutcome:
    """Every rank's run, or why it did not finish."""

    ranks: list[RankTraining] = field(default_factory=list)
    error: str | None = None
    timed_out: bool = False
    log_tail: str | None = None

    @property
    def node_tokens_per_second(self) -> float:
        """Every GPU's tokens over the slowest GPU's time: the node's training rate."""
        if not self.ranks:
            return 0.0
        seconds = max(rank.timed_seconds for rank in self.ranks)
        return sum(rank.tokens for rank in self.ranks) / seconds if seconds > 0 else 0.0

    def node_step_seconds(self) -> list[float]:
        """Each timed step's time on the slowest GPU (data-parallel ranks wait for each other)."""
        counts = {len(rank.step_seconds) for rank in self.ranks}
        if len(counts) != 1:
            return []
        return [max(times) for times in zip(*(r.step_seconds for r in self.ranks), strict=True)]


def node_losses(ranks: Sequence[RankTraining]) -> list[str]:
    """The node's loss per step: the mean of its GPUs' losses (each over its own shard of the
    step's tokens): `mean_losses`."""
    return mean_losses([rank.losses for rank in ranks])


def mean_losses(ranks: Sequence[Sequence[str]]) -> list[str]:
    """The loss per step of data-parallel ranks (each rank's losses, in rank order): their mean,
    summed in rank order in double precision and rounded to float32, so the same rank losses
    give the same bits everywhere (a node's GPUs; a fabric group's, every node's)."""
    if not ranks:
        return []
    steps = min(len(losses) for losses in ranks)
    return [
        encode_loss(sum(decode_loss(losses[step]) for losses in ranks) / len(ranks))
        for step in range(steps)
    ]


def percentile(values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile (0.5: the median of an odd count; 0.99 of 60 values: the largest)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def non_finite_step(losses: Sequence[str]) -> int | None:
    """The 1-based step of the first NaN or Inf loss, None when every loss is finite."""
    for index, text in enumerate(losses):
        if not math.isfinite(decode_loss(text)):
            return index + 1
    return None
