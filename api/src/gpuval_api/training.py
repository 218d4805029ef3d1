"""The training check's loss fingerprint, and its comparison across nodes. Pure: nothing here
calls the API, torch or a GPU.

With fixed seeds and deterministic settings, a training step computes the same loss at every step
on every node of one GPU stack: the losses are a fingerprint of the whole path (attention,
optimizer, all-reduce). The agent records them exactly (each step's float32 loss as the 8 hex
digits of its bits) with what fixes them: the experiment (model shape, GPU count, seed, steps),
which must match for two nodes' losses to compare at all, and the stack (GPU model, driver, CUDA,
torch, NCCL, attention backend), which must match for them to be bit-identical.

`loss_mismatches` is the one comparison: the agent's benchmark, the operator and the tests call
it. Within a stack, a node whose losses differ from a clear majority of its peers is named, with
the first step that differs and by how much. Across stacks bit-exactness cannot hold: a stack
without a clear majority of its own (a lone node of a newer driver, say), and the majority of every
other stack, is compared with the reference stack (the one with the most nodes behind a clear
majority) within a relative tolerance, and the message says so.
"""

from __future__ import annotations

import hashlib
import math
import struct
import sys
import weakref
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from gpuval_api.checks import camel

# A majority must have at least this many nodes before a node that differs from it is blamed
# (as for the burn fingerprints).
MIN_MAJORITY = 2
# The result document's field the operator names in its outliers.
FIELD = "trainingLoss"
_LOSS_PATTERN = r"^[0-9a-f]{8}$"


class _Model(BaseModel):
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


class TrainingDeterminants(_Model):
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


class TrainingRecord(_Model):
    """The training check's loss at every step (the node's mean over its GPUs) and what fixes it."""

    losses: list[Annotated[str, Field(pattern=_LOSS_PATTERN)]] = Field(
        max_length=110_000,
        description="Per step (the warm-up included), the float32 loss's bits as 8 hex digits.",
    )
    digest: str = Field(description="loss_digest(losses): equal digests, equal losses.")
    determinants: TrainingDeterminants


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


@dataclass(frozen=True, slots=True)
class LossMismatch:
    """A node whose losses differ from its reference: its stack's majority (bit for bit), or
    another stack's (`tolerance` set: beyond it)."""

    node: str
    step: int  # 1-based, the warm-up's steps counted
    value: float
    expected: float
    peers: int  # nodes that computed the reference sequence
    stack: str
    digest: str
    reference: str  # the reference sequence's digest
    reference_stack: str | None = None  # set when compared across stacks
    tolerance: float | None = None
    worst: float = 0.0  # across stacks: the largest relative difference of any step
    steps: int = 0

    @property
    def field(self) -> str:
        return FIELD

    def message(self) -> str:
        difference = self.value - self.expected
        relative = _relative(self.value, self.expected)
        if self.reference_stack is None:
            return (
                f"training loss differs from step {self.step} of {self.steps} on: "
                f"{shown(self.value)} where {self.peers} nodes of the same stack "
                f"({self.stack}) computed {shown(self.expected)} (a difference of "
                f"{difference:+.3g}, {relative:.2e} relative); fixed seeds and deterministic "
                "settings give every node of one stack bit-identical losses"
            )
        return (
            f"training loss at step {self.step} of {self.steps} is {shown(self.value)}, "
            f"{_percent(relative)} from {shown(self.expected)} that {self.peers} nodes of another "
            f"stack computed (largest difference {_percent(self.worst)}); bit-exactness cannot "
            f"hold across stacks (this node: {self.stack}; reference: {self.reference_stack}), so "
            f"the losses were compared within a relative tolerance of "
            f"{_percent(self.tolerance or 0.0)} (train.lossTolerance)"
        )


def _percent(fraction: float) -> str:
    return f"{fraction * 100:.3g} %"


def _relative(value: float, expected: float) -> float:
    if math.isnan(value) or math.isnan(expected) or math.isinf(value) or math.isinf(expected):
        return math.inf
    return abs(value - expected) / max(abs(expected), 1e-12)


def first_difference(losses: Sequence[str], reference: Sequence[str]) -> int | None:
    """The 0-based index of the first step whose bits differ (a shorter sequence differs where
    it ends); None when equal."""
    for index, (mine, theirs) in enumerate(zip(losses, reference, strict=False)):
        if mine != theirs:
            return index
    if len(losses) != len(reference):
        return min(len(losses), len(reference))
    return None


def beyond_tolerance(
    losses: Sequence[str], reference: Sequence[str], tolerance: float
) -> tuple[int | None, float]:
    """The first step whose loss is further than `tolerance` (relative) from the reference's, and
    the largest relative difference of any step."""
    first: int | None = None
    worst = 0.0
    for index, (mine, theirs) in enumerate(zip(losses, reference, strict=False)):
        relative = _relative(decode_loss(mine), decode_loss(theirs))
        worst = max(worst, relative)
        if relative > tolerance and first is None:
            first = index
    if len(losses) != len(reference) and first is None:
        first = min(len(losses), len(reference))
    return first, worst


@dataclass(slots=True)
class _Stack:
    """The nodes of one experiment and stack, by sequence."""

    name: str
    sequences: dict[str, LossSequence] = field(default_factory=dict)
    nodes: dict[str, list[str]] = field(default_factory=dict)  # digest -> nodes

    @property
    def size(self) -> int:
        return sum(len(nodes) for nodes in self.nodes.values())

    def majority(self) -> tuple[LossSequence, int] | None:
        """The sequence a clear majority computed, and how many nodes did; None on a tie or
        with fewer than MIN_MAJORITY nodes behind it."""
        counts = Counter({digest: len(nodes) for digest, nodes in self.nodes.items()})
        ranked = counts.most_common()
        digest, peers = ranked[0]
        if peers < MIN_MAJORITY or (len(ranked) > 1 and ranked[1][1] == peers):
            return None
        return self.sequences[digest], peers


def _value(losses: Sequence[str], index: int) -> float:
    return decode_loss(losses[index]) if index < len(losses) else math.nan


def loss_mismatches(nodes: Mapping[str, NodeLosses], tolerance: float) -> list[LossMismatch]:
    """Every node whose losses differ from its reference (module docstring), by node. Cost:
    one pass over the nodes, then one comparison per distinct sequence."""
    experiments: dict[str, dict[str, _Stack]] = {}
    for node, losses in nodes.items():
        stacks = experiments.setdefault(losses.experiment, {})
        stack = stacks.setdefault(losses.stack, _Stack(losses.stack))
        sequence = losses.sequence
        stack.sequences.setdefault(sequence.digest, sequence)
        stack.nodes.setdefault(sequence.digest, []).append(node)
    found: list[LossMismatch] = []
    for stacks in experiments.values():
        found += _compare_experiment(list(stacks.values()), tolerance)
    return sorted(found, key=lambda m: m.node)


def _compare_experiment(stacks: list[_Stack], tolerance: float) -> list[LossMismatch]:
    majorities = {s.name: m for s in stacks if (m := s.majority()) is not None}
    reference_stack = max(
        (s for s in stacks if s.name in majorities),
        key=lambda s: (majorities[s.name][1], s.size, s.name),
        default=None,
    )
    found: list[LossMismatch] = []
    for stack in sorted(stacks, key=lambda s: s.name):
        majority = majorities.get(stack.name)
        if majority is not None:
            sequence, peers = majority
            found += _exact(stack, sequence, peers)
            candidates = {sequence.digest: sequence}
        else:
            candidates = dict(stack.sequences)
        if reference_stack is None or reference_stack is stack:
            continue
        reference, peers = majorities[reference_stack.name]
        for digest, sequence in candidates.items():
            found += _tolerance(
                stack,
                nodes=stack.nodes[digest],
                sequence=sequence,
                reference_stack=reference_stack,
                reference=reference,
                peers=peers,
                tolerance=tolerance,
            )
    return found


def _exact(stack: _Stack, majority: LossSequence, peers: int) -> list[LossMismatch]:
    """The nodes of a stack whose sequence is not its majority's, bit for bit."""
    found = []
    for digest, nodes in stack.nodes.items():
        if digest == majority.digest:
            continue
        losses = stack.sequences[digest].losses
        index = first_difference(losses, majority.losses)
        if index is None:
            continue
        found += [
            LossMismatch(
                node=node,
                step=index + 1,
                value=_value(losses, index),
                expected=_value(majority.losses, index),
                peers=peers,
                stack=stack.name,
                digest=digest,
                reference=majority.digest,
                steps=len(majority.losses),
            )
            for node in nodes
        ]
    return found


def _tolerance(
    stack: _Stack,
    *,
    nodes: list[str],
    sequence: LossSequence,
    reference_stack: _Stack,
    reference: LossSequence,
    peers: int,
    tolerance: float,
) -> list[LossMismatch]:
    """`nodes` (one sequence of another stack than the reference's), when it leaves the
    tolerance at any step."""
    index, worst = beyond_tolerance(sequence.losses, reference.losses, tolerance)
    if index is None:
        return []
    return [
        LossMismatch(
            node=node,
            step=index + 1,
            value=_value(sequence.losses, index),
            expected=_value(reference.losses, index),
            peers=peers,
            stack=stack.name,
            digest=sequence.digest,
            reference=reference.digest,
            reference_stack=reference_stack.name,
            tolerance=tolerance,
            worst=worst,
            steps=len(reference.losses),
        )
        for node in nodes
    ]
