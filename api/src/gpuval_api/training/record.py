"""The training check's loss record: each step's float32 loss as the 8 hex digits of its bits
(`encode_loss`), their digest, what fixes them (`TrainingDeterminants`: the experiment and the
stack), the losses a GpuBaseline holds for one experiment and stack (`LossBaseline`), and what the
comparison keeps of one node (`NodeLosses`, its sequence shared by every node that computed it).
Pure."""

from __future__ import annotations

import hashlib
import struct
import sys
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from gpuval_api.checks import camel

_LOSS_PATTERN = r"^[0-9a-f]{8}$"
_DIGEST_PATTERN = r"^[0-9a-f]{16}$"
# A baseline keeps the losses themselves (for the comparison across stacks) up to this many steps;
# past it only the digest (the default run records 65).
MAX_BASELINE_LOSSES = 1024
# Loss baselines a GpuBaseline holds (one per experiment and stack).
MAX_LOSS_BASELINES = 16


class TrainingModel(BaseModel):
    model_config = ConfigDict(alias_generator=camel, populate_by_name=True, extra="forbid")


def encode_loss(value: float) -> str:
    """A loss as the 8 hex digits of its float32 bits (exact: no decimal rounding)."""
    return struct.pack(">f", value).hex()


def decode_loss(text: str) -> float:
    """The float32 value of `encode_loss`'s digits."""
    value: float = struct.unpack(">f", bytes.fromhex(text))[0]
    return value


def loss_digest(losses: Sequence[str]) -> str:
    """A short digest of a loss sequence: equal digests, equal sequences."""
    return hashlib.sha256(",".join(losses).encode()).hexdigest()[:16]


def shown(value: float) -> str:
    """A float32 loss with the 9 significant digits that identify it."""
    return f"{value:.9g}"


class TrainingDeterminants(TrainingModel):
    """What fixes a training step's losses besides the code."""

    gpu_product: str = Field(description="GPU model as NVML names it.")
    gpu_count: int = Field(ge=0, description="GPUs the step ran data-parallel on.")
    driver: str | None = None
    cuda: str | None = Field(default=None, description="The CUDA runtime (torch's).")
    torch: str | None = None
    nccl: str | None = None
    model: str = Field(description="The model shape, e.g. 'large d2048 L18 H16 V32768 S2048 B16'.")
    seed: int
    steps: int = Field(description="Steps whose losses are recorded, the warm-up included.")
    attention: str = Field(description="The scaled_dot_product_attention backend.")

    def experiment(self) -> str:
        """What must match for two losses to compare at all."""
        return f"{self.model}|gpus {self.gpu_count}|seed {self.seed}|steps {self.steps}"

    def stack(self) -> str:
        """What must match, besides the experiment, for the losses to be bit-identical."""
        return (
            f"{self.gpu_product}, driver {self.driver}, CUDA {self.cuda}, torch {self.torch}, "
            f"NCCL {self.nccl}, {self.attention} attention"
        )


class TrainingRecord(TrainingModel):
    """The training check's loss at every step (the node's mean over its GPUs) and what fixes it."""

    losses: list[Annotated[str, Field(pattern=_LOSS_PATTERN)]] = Field(
        max_length=110_000,
        description="Per step (the warm-up included), the float32 loss's bits as 8 hex digits.",
    )
    digest: str = Field(description="loss_digest(losses): equal digests, equal losses.")
    determinants: TrainingDeterminants


class LossBaseline(TrainingModel):
    """The losses healthy nodes of one stack computed in one experiment, as a GpuBaseline holds
    them: a lone node of that stack must compute them bit for bit, one of another stack within
    train.lossTolerance (`against_baseline`)."""

    experiment: str = Field(
        max_length=256,
        description="Model shape, GPU count, seed and steps (TrainingDeterminants.experiment).",
    )
    stack: str = Field(
        max_length=512,
        description="GPU model, driver, CUDA, torch, NCCL and attention backend (.stack()).",
    )
    digest: str = Field(
        pattern=_DIGEST_PATTERN, max_length=16, description="loss_digest of the losses."
    )
    losses: list[Annotated[str, Field(pattern=_LOSS_PATTERN, max_length=8)]] = Field(
        default_factory=list,
        max_length=MAX_BASELINE_LOSSES,
        description=(
            "Per step, the float32 loss's bits as 8 hex digits (for the comparison across "
            "stacks); empty past 1024 steps, where only the digest is kept."
        ),
    )
    nodes: int = Field(ge=1, le=100_000, description="Nodes (or runs) that computed them.")
    source: str = Field(default="", max_length=512, description="Where they came from.")

    @classmethod
    def of(cls, record: TrainingRecord, nodes: int, source: str = "") -> LossBaseline:
        losses = record.losses if len(record.losses) <= MAX_BASELINE_LOSSES else []
        return cls(
            experiment=record.determinants.experiment(),
            stack=record.determinants.stack(),
            digest=loss_digest(record.losses),
            losses=list(losses),
            nodes=nodes,
            source=source,
        )


@dataclass(frozen=True, slots=True, weakref_slot=True)
class LossSequence:
    """One distinct loss sequence, shared by every node that computed it (`intern_losses`)."""

    digest: str
    losses: tuple[str, ...]


_INTERNED: weakref.WeakValueDictionary[str, LossSequence] = weakref.WeakValueDictionary()


def intern_losses(losses: Sequence[str]) -> LossSequence:
    """The one LossSequence of these losses: 10,000 nodes of one stack hold one copy, and it goes
    when the last node that holds it does."""
    digest = loss_digest(losses)
    found = _INTERNED.get(digest)
    if found is None or found.losses != tuple(losses):
        found = LossSequence(digest, tuple(losses))
        _INTERNED[digest] = found
    return found


@dataclass(frozen=True, slots=True)
class NodeLosses:
    """What the comparison keeps of one node: its experiment and stack keys and its sequence."""

    experiment: str
    stack: str
    sequence: LossSequence

    @classmethod
    def of(cls, record: TrainingRecord) -> NodeLosses:
        determinants = record.determinants
        return cls(
            sys.intern(determinants.experiment()),
            sys.intern(determinants.stack()),
            intern_losses(record.losses),
        )
