"""The training losses compared across nodes (`compare_losses`, `loss_mismatches`: the package's
docstring says how): within a stack bit for bit with its majority, across stacks within the
tolerance, and the stacks that cannot be decided (`Undecided`). Pure."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpuval_api.training.mismatch import (
    LossMismatch,
    beyond_tolerance,
    first_difference,
    percent,
    value_at,
)
from gpuval_api.training.record import LossSequence, NodeLosses

# A majority must have at least this many nodes before a node that differs from it is blamed
# (as for the burn fingerprints).
MIN_MAJORITY = 2


@dataclass(slots=True)
class LossStack:
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
    experiments: dict[str, dict[str, LossStack]] = {}
    for node, losses in nodes.items():
        stacks = experiments.setdefault(losses.experiment, {})
        stack = stacks.setdefault(losses.stack, LossStack(losses.stack))
        sequence = losses.sequence
        stack.sequences.setdefault(sequence.digest, sequence)
        stack.nodes.setdefault(sequence.digest, []).append(node)
    outcome = LossComparison([], [], [])
    for stacks in experiments.values():
        _compare_experiment(list(stacks.values()), tolerance, outcome)
    outcome.mismatches.sort(key=lambda m: m.node)
    outcome.undecided.sort(key=lambda u: u.nodes)
    return outcome


def _compare_experiment(stacks: list[LossStack], tolerance: float, outcome: LossComparison) -> None:
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


def _undecided(stack: LossStack) -> Undecided:
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
    stack: LossStack,
    majority: tuple[LossSequence, int] | None,
    reference: LossStack | None,
    tolerance: float,
) -> str:
    """One line: how the nodes of `stack` were compared, and why."""
    names = sorted(n for nodes in stack.nodes.values() for n in nodes)
    who = f"{stack.size} nodes of {stack.name}" if stack.size > 1 else f"{names[0]} ({stack.name})"
    across = (
        f"compared within {percent(tolerance)} (train.lossTolerance) with {reference.name}"
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


def _exact(stack: LossStack, majority: LossSequence, peers: int) -> list[LossMismatch]:
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
                value=value_at(losses, index),
                expected=value_at(majority.losses, index),
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
    stack: LossStack,
    *,
    nodes: list[str],
    sequence: LossSequence,
    reference_stack: LossStack,
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
            value=value_at(sequence.losses, index),
            expected=value_at(reference.losses, index),
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
