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
majority) within a relative tolerance, and the message says so. `compare_losses` also says how
each group of nodes was compared (`ComparedGroup`), and names the stacks it could not decide: two
nodes (or a tie) that differ with no majority to tell which is right.

On one machine there is no peer: a GpuBaseline holds the losses its stack computed
(`LossBaseline`, per experiment and stack), and `against_baseline` compares a node with them, bit
for bit on the same stack, within the tolerance on another, and says which and why.
"""

from __future__ import annotations

import hashlib
import math
import struct
import sys
import weakref
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
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
_DIGEST_PATTERN = r"^[0-9a-f]{16}$"
# A baseline keeps the losses themselves (for the comparison across stacks) up to this many steps;
# past it only the digest (the default run records 65).
MAX_BASELINE_LOSSES = 1024
# Loss baselines a GpuBaseline holds (one per experiment and stack).
MAX_LOSS_BASELINES = 16
# Lines status.training of a GpuValidation lists (one per stack compared, one per undecided).
MAX_STATUS_LINES = 16


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


class LossBaseline(_Model):
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
    baseline: str | None = None  # set when compared with a GpuBaseline's losses, not with peers

    @property
    def field(self) -> str:
        return FIELD

    def message(self) -> str:
        difference = self.value - self.expected
        relative = _relative(self.value, self.expected)
        if self.baseline is not None:
            return self._baseline_message(difference, relative)
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

    def _baseline_message(self, difference: float, relative: float) -> str:
        if self.reference_stack is None:
            where = (
                f"from step {self.step} of {self.steps} on: {shown(self.value)} where "
                f"{shown(self.expected)} was learned (a difference of {difference:+.3g}, "
                f"{relative:.2e} relative)"
                if self.step
                else "(the baseline keeps only the digest: no step to name)"
            )
            return (
                f"training loss digest {self.digest} differs from {self.reference}, which "
                f"{self.baseline} learned from {self.peers} nodes of the same stack "
                f"({self.stack}), {where}; fixed seeds and deterministic settings give every "
                "node of one stack bit-identical losses"
            )
        return (
            f"training loss at step {self.step} of {self.steps} is {shown(self.value)}, "
            f"{_percent(relative)} from {shown(self.expected)} that {self.baseline} holds for "
            f"another stack ({self.reference_stack}; largest difference {_percent(self.worst)}); "
            f"bit-exactness cannot hold across stacks (this node: {self.stack}), so the losses "
            f"were compared within a relative tolerance of {_percent(self.tolerance or 0.0)} "
            "(train.lossTolerance)"
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
    return compare_losses(nodes, tolerance).mismatches


@dataclass(frozen=True, slots=True)
class Undecided:
    """Nodes of one stack and experiment that computed different losses with no majority among
    them (two nodes, or a tie): which is right cannot be told, so none is failed."""

    stack: str
    nodes: tuple[str, ...]
    step: int  # 1-based: the first step at which two of their sequences differ
    steps: int

    def message(self) -> str:
        return (
            f"undecided: {_names(self.nodes)} ({len(self.nodes)} nodes of one stack: "
            f"{self.stack}) computed different training losses from step {self.step} of "
            f"{self.steps} on, and no majority tells which is right, so neither is failed; a "
            "third node of this stack, or a GpuBaseline holding its losses, decides"
        )


@dataclass(frozen=True, slots=True)
class LossComparison:
    """The comparison's outcome: the nodes that differ, one line per stack saying how its nodes
    were compared and why, and the stacks that could not be decided."""

    mismatches: list[LossMismatch]
    compared: list[str]
    undecided: list[Undecided]


def _names(nodes: Sequence[str], limit: int = 5) -> str:
    shown = ", ".join(nodes[:limit])
    return shown + (f" and {len(nodes) - limit} more" if len(nodes) > limit else "")


def compare_losses(nodes: Mapping[str, NodeLosses], tolerance: float) -> LossComparison:
    """`loss_mismatches`, with how each stack was compared and what could not be decided."""
    experiments: dict[str, dict[str, _Stack]] = {}
    for node, losses in nodes.items():
        stacks = experiments.setdefault(losses.experiment, {})
        stack = stacks.setdefault(losses.stack, _Stack(losses.stack))
        sequence = losses.sequence
        stack.sequences.setdefault(sequence.digest, sequence)
        stack.nodes.setdefault(sequence.digest, []).append(node)
    outcome = LossComparison([], [], [])
    for stacks in experiments.values():
        _compare_experiment(list(stacks.values()), tolerance, outcome)
    outcome.mismatches.sort(key=lambda m: m.node)
    outcome.undecided.sort(key=lambda u: u.nodes)
    return outcome


def _compare_experiment(stacks: list[_Stack], tolerance: float, outcome: LossComparison) -> None:
    majorities = {s.name: m for s in stacks if (m := s.majority()) is not None}
    reference_stack = max(
        (s for s in stacks if s.name in majorities),
        key=lambda s: (majorities[s.name][1], s.size, s.name),
        default=None,
    )
    for stack in sorted(stacks, key=lambda s: s.name):
        majority = majorities.get(stack.name)
        if majority is not None:
            sequence, peers = majority
            outcome.mismatches.extend(_exact(stack, sequence, peers))
            candidates = {sequence.digest: sequence}
        else:
            candidates = dict(stack.sequences)
            if len(candidates) > 1:
                outcome.undecided.append(_undecided(stack))
        across = reference_stack is not None and reference_stack is not stack
        outcome.compared.append(
            _how(stack, majority, reference_stack if across else None, tolerance)
        )
        if reference_stack is None or not across:
            continue
        reference, peers = majorities[reference_stack.name]
        for digest, sequence in candidates.items():
            outcome.mismatches.extend(
                _tolerance(
                    stack,
                    nodes=stack.nodes[digest],
                    sequence=sequence,
                    reference_stack=reference_stack,
                    reference=reference,
                    peers=peers,
                    tolerance=tolerance,
                )
            )


def _undecided(stack: _Stack) -> Undecided:
    sequences = list(stack.sequences.values())
    first = min(
        (
            index
            for other in sequences[1:]
            if (index := first_difference(other.losses, sequences[0].losses)) is not None
        ),
        default=0,
    )
    nodes = tuple(sorted(n for names in stack.nodes.values() for n in names))
    return Undecided(stack.name, nodes, first + 1, max(len(s.losses) for s in sequences))


def _how(
    stack: _Stack,
    majority: tuple[LossSequence, int] | None,
    reference: _Stack | None,
    tolerance: float,
) -> str:
    """One line: how the nodes of `stack` were compared, and why."""
    names = sorted(n for nodes in stack.nodes.values() for n in nodes)
    who = f"{stack.size} nodes of {stack.name}" if stack.size > 1 else f"{names[0]} ({stack.name})"
    across = (
        f"compared within {_percent(tolerance)} (train.lossTolerance) with {reference.name}"
        " (another stack: bit-exactness cannot hold across stacks)"
        if reference is not None
        else ""
    )
    if majority is not None:
        exact = (
            f"{who}: bit for bit with the losses {majority[1]} of them computed (same stack: "
            "fixed seeds and deterministic settings give bit-identical losses)"
        )
        return f"{exact}; their majority {across}" if across else exact
    if stack.size > 1:
        said = (
            f"{who} ({_names(names)}): undecided, they differ and no majority tells which is right"
        )
        return f"{said}; each {across}" if across else said
    if across:
        return f"{who}: no peer of its stack, so {across}"
    return (
        f"{who}: not compared, no other node of its experiment (a GpuBaseline holding its "
        "stack's losses compares it on the node)"
    )


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


@dataclass(frozen=True, slots=True)
class AgainstBaseline:
    """A node's losses against its GpuBaseline's: `mismatch` when they differ (bit for bit on its
    stack, beyond the tolerance on another), and `how`: one line saying how they were compared
    and why, or why they were not."""

    how: str
    mismatch: LossMismatch | None = None
    exact: bool = False


def against_baseline(
    record: TrainingRecord, baseline: str, entries: Sequence[LossBaseline], tolerance: float
) -> AgainstBaseline:
    """The node's losses against `baseline`'s (its name) loss baselines of the same experiment:
    the one of its stack bit for bit (fixed seeds and deterministic settings), else the one with
    the most nodes within `tolerance` (bit-exactness cannot hold across stacks)."""
    determinants = record.determinants
    experiment, stack = determinants.experiment(), determinants.stack()
    mine = [e for e in entries if e.experiment == experiment]
    if not mine:
        known = "; ".join(sorted({e.experiment for e in entries})) or "none"
        return AgainstBaseline(
            f"not compared: {baseline} holds no losses of this experiment ({experiment}; it "
            f"holds: {known})"
        )
    digest = loss_digest(record.losses)
    same = next((e for e in mine if e.stack == stack), None)
    if same is not None:
        return _exact_baseline(record, digest, baseline, same)
    reference = max((e for e in mine if e.losses), key=lambda e: (e.nodes, e.stack), default=None)
    if reference is None:
        return AgainstBaseline(
            f"not compared: {baseline} holds only the digests of this experiment's losses "
            f"(more than {MAX_BASELINE_LOSSES} steps), none of this stack ({stack})"
        )
    index, worst = beyond_tolerance(record.losses, reference.losses, tolerance)
    how = (
        f"compared within {_percent(tolerance)} (train.lossTolerance) with the losses {baseline} "
        f"holds for another stack ({reference.stack}; {reference.nodes} nodes), largest "
        f"difference {_percent(worst)}: bit-exactness cannot hold across stacks, and {baseline} "
        f"holds none of this one ({stack})"
    )
    if index is None:
        return AgainstBaseline(how)
    mismatch = LossMismatch(
        node="",
        step=index + 1,
        value=_value(record.losses, index),
        expected=_value(reference.losses, index),
        peers=reference.nodes,
        stack=stack,
        digest=digest,
        reference=reference.digest,
        reference_stack=reference.stack,
        tolerance=tolerance,
        worst=worst,
        steps=len(reference.losses),
        baseline=baseline,
    )
    return AgainstBaseline(how, mismatch)


def _exact_baseline(
    record: TrainingRecord, digest: str, baseline: str, entry: LossBaseline
) -> AgainstBaseline:
    how = (
        f"compared bit for bit with the loss digest {entry.digest} that {baseline} holds for "
        f"this stack ({entry.nodes} nodes): same stack, fixed seeds and deterministic settings"
    )
    if digest == entry.digest:
        return AgainstBaseline(f"{how}: equal", exact=True)
    index = first_difference(record.losses, entry.losses) if entry.losses else None
    mismatch = LossMismatch(
        node="",
        step=index + 1 if index is not None else 0,
        value=_value(record.losses, index) if index is not None else math.nan,
        expected=_value(entry.losses, index) if index is not None else math.nan,
        peers=entry.nodes,
        stack=entry.stack,
        digest=digest,
        reference=entry.digest,
        steps=len(record.losses),
        baseline=baseline,
    )
    return AgainstBaseline(f"{how}: differs", mismatch, exact=True)


def learn_losses(nodes: Iterable[NodeLosses | None], source: str = "") -> list[LossBaseline]:
    """The loss baselines a learned GpuBaseline holds: per experiment and stack, the sequence a
    clear majority of the nodes kept computed (MIN_MAJORITY or more, no tie); the stacks with
    most nodes first, at most MAX_LOSS_BASELINES. A stack whose nodes disagree learns nothing:
    which of them is right cannot be told."""
    groups: dict[tuple[str, str], _Stack] = {}
    for losses in nodes:
        if losses is None:
            continue
        stack = groups.setdefault((losses.experiment, losses.stack), _Stack(losses.stack))
        sequence = losses.sequence
        stack.sequences.setdefault(sequence.digest, sequence)
        stack.nodes.setdefault(sequence.digest, []).append("")
    learned: list[LossBaseline] = []
    for (experiment, name), stack in groups.items():
        majority = stack.majority()
        if majority is None:
            continue
        sequence, peers = majority
        kept = list(sequence.losses) if len(sequence.losses) <= MAX_BASELINE_LOSSES else []
        learned.append(
            LossBaseline(
                experiment=experiment,
                stack=name,
                digest=sequence.digest,
                losses=kept,
                nodes=peers,
                source=source[:512],
            )
        )
    learned.sort(key=lambda e: (-e.nodes, e.experiment, e.stack))
    return learned[:MAX_LOSS_BASELINES]


class TrainingRunStatus(_Model):
    """`status.training` of a GpuValidation: how the run's training losses were compared, stack
    by stack, and the stacks that could not be decided."""

    compared: list[Annotated[str, Field(max_length=1024)]] = Field(
        default_factory=list,
        max_length=MAX_STATUS_LINES,
        description=(
            "One line per stack: how its nodes were compared and why (bit for bit with their "
            "majority; within train.lossTolerance with another stack's; not at all, alone), the "
            "largest stacks first, at most 16."
        ),
    )
    compared_omitted: int = Field(default=0, ge=0, description="Stacks beyond the listed.")
    undecided: list[Annotated[str, Field(max_length=1024)]] = Field(
        default_factory=list,
        max_length=MAX_STATUS_LINES,
        description=(
            "Stacks whose nodes differ with no majority (two nodes, a tie), naming them "
            "(TrainingUndecided): none of them is failed, at most 16."
        ),
    )
    undecided_omitted: int = Field(default=0, ge=0, description="Undecided beyond the listed.")

    @classmethod
    def of(cls, comparison: LossComparison) -> TrainingRunStatus | None:
        """None when no node of the run trained."""
        if not comparison.compared:
            return None
        undecided = [u.message()[:1024] for u in comparison.undecided]
        return cls(
            compared=[line[:1024] for line in comparison.compared[:MAX_STATUS_LINES]],
            compared_omitted=max(0, len(comparison.compared) - MAX_STATUS_LINES),
            undecided=undecided[:MAX_STATUS_LINES],
            undecided_omitted=max(0, len(undecided) - MAX_STATUS_LINES),
        )
