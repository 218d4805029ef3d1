"""The fabric's training phase (`spec.fabric.train`): the agent's training step (the `train`
check's model and loop, gpuval_agent.training) run data-parallel across a group's nodes, its
gradients all-reduced over the fabric, then in the same pair rounds as the all-reduce (every node
in two pairs with different partners, one confirmation round); docs/agent.md, "The fabric's
training phase".

What a group is asked (FabricTrain, in gpuval_api.fabric.FabricConfig) and what its agents report
(FabricTrainResult, in gpuval_api.fabric.FabricResult). A group's figure is its tokens per second
per GPU (with a fixed micro-batch per GPU, the inverse of its step time, so it compares across
groups and pairs of any size); its losses are its fingerprint (gpuval_api.training), the same for
every group of one GPU stack and size. Below gpuval_api.fabric: imports nothing of it.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpuval_api.checks import TrainAttention, TrainCheck, TrainModel, camel
from gpuval_api.training.record import TrainingRecord


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=camel, populate_by_name=True, extra="forbid")


class FabricTrain(_Model):
    """`spec.fabric.train`: the training step across each group's nodes; off unless enabled."""

    enabled: bool = Field(
        default=False,
        description="Run the training phase after the all-reduce phases (off by default).",
    )
    model: TrainModel = Field(
        default=TrainModel.AUTO,
        description="Model shape: auto (by the smallest GPU memory of the group's nodes, as the "
        "train check's size rule), or one of large, medium, small, tiny.",
    )
    micro_batch: int | None = Field(
        default=None,
        ge=1,
        le=1024,
        description="Sequences per GPU and step. Unset: by the model and the GPUs' memory.",
    )
    steps: int = Field(
        default=20,
        ge=1,
        le=100_000,
        description="Timed steps after the warm-up, in the group's run and in each pair's.",
    )
    warmup_steps: int = Field(
        default=3,
        ge=0,
        le=10_000,
        description="Untimed steps first; their losses are part of the fingerprint too.",
    )
    seed: int = Field(
        default=1234, ge=0, le=2**31 - 1, description="Seed of the weights and the tokens."
    )
    attention: TrainAttention = Field(
        default=TrainAttention.FLASH,
        description="scaled_dot_product_attention backend, pinned (checks.train.attention).",
    )
    fraction_of_median: float = Field(
        default=0.9,
        gt=0,
        le=1,
        description="A training pair below this fraction of the run's reference (the median "
        "over nodes of each node's best training pair, tokens/s per GPU) is slow, and a group "
        "below this fraction of the median of the run's groups of its size.",
    )
    loss_tolerance: float = Field(
        default=0.02,
        gt=0,
        le=1,
        description="Across GPU stacks, where bit-identical losses cannot be expected: the "
        "largest relative difference of a group's loss from the reference stack's.",
    )
    timeout_seconds: int = Field(
        default=600,
        ge=10,
        le=86400,
        description="Each training phase (the group's run, each pair round), its rank processes' "
        "start-up included; past it the phase is a hang (NcclTimeout).",
    )

    def check(self) -> TrainCheck:
        """The train check's settings these stand for (gpuval_agent.training.TrainPlan.of)."""
        return TrainCheck(
            enabled=self.enabled,
            model=self.model,
            micro_batch=self.micro_batch,
            steps=self.steps,
            warmup_steps=self.warmup_steps,
            seed=self.seed,
            attention=self.attention,
            timeout_seconds=float(self.timeout_seconds),
        )

    def floor(self, median: float | None) -> float:
        """The figure (tokens/s per GPU) below which a training pair or group is slow."""
        return self.fraction_of_median * median if median is not None else 0.0


class FabricTrainPair(_Model):
    """One pair's data-parallel training run (a pair round's, or the confirmation's)."""

    round: int = Field(description="1, 2 (and 3 for an odd group): pair rounds; 0: confirmation.")
    a: str
    b: str
    gpus: int = Field(ge=0, description="GPUs of the two nodes.")
    tokens_per_second: float | None = Field(
        default=None, description="The pair's tokens per second, all its GPUs; None: it failed."
    )
    step_seconds: float | None = Field(
        default=None, description="Its median step time, the slowest GPU's."
    )
    error: str | None = None

    @property
    def figure(self) -> float | None:
        """Tokens per second per GPU: what the pair rounds judge."""
        if self.tokens_per_second is None or self.gpus < 1:
            return None
        return self.tokens_per_second / self.gpus


class FabricTrainResult(_Model):
    """The group's training phase, as each of its agents reports it (`FabricResult.train`)."""

    model: str = Field(
        description="The model shape and batch, e.g. 'tiny d256 L4 H2 V8192 S256 B4'."
    )
    nodes: int = Field(ge=0, description="Nodes of the group's run.")
    gpus: int = Field(ge=0, description="GPUs of the group's run, every node's.")
    tokens_per_second: float | None = Field(
        default=None, description="The group's tokens per second over its timed steps."
    )
    step_median_seconds: float | None = Field(
        default=None, description="Median step time, the slowest GPU's."
    )
    step_p99_seconds: float | None = Field(default=None, description="p99 step time.")
    record: TrainingRecord | None = Field(
        default=None,
        description="The group's loss at every step (the mean over every GPU of the group) and "
        "what fixes it: the group's fingerprint.",
    )
    pairs: list[FabricTrainPair] = Field(default_factory=list, description="Every pair's run.")
    error: str | None = Field(default=None, description="Why the group's run gave no figure.")

    @property
    def figure(self) -> float | None:
        """Tokens per second per GPU."""
        if self.tokens_per_second is None or self.gpus < 1:
            return None
        return self.tokens_per_second / self.gpus

    @property
    def key(self) -> str:
        """What must match for two groups' figures to compare: the shape and batch, the
        nodes and the GPUs."""
        return f"{self.model}|{self.nodes} nodes|{self.gpus} GPUs"


def read_train(result: object) -> FabricTrainResult | None:
    """The training phase of a fabric agent's result document (a report's status.fabric.result);
    None without one, or in a shape this version cannot read."""
    train = result.get("train") if isinstance(result, Mapping) else None
    if not isinstance(train, Mapping):
        return None
    try:
        return FabricTrainResult.model_validate(train)
    except ValidationError:
        return None
