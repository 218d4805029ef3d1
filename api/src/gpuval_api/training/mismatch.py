"""A node whose training losses differ from its reference (`LossMismatch`, and the words that
say so), and the step-by-step readings the comparisons share: where two sequences first differ,
bit for bit or beyond a relative tolerance. Pure."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from gpuval_api.training.record import decode_loss, shown

# The result document's field the operator names in its outliers.
FIELD = "trainingLoss"


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
        relative = relative_difference(self.value, self.expected)
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
            f"{percent(relative)} from {shown(self.expected)} that {self.peers} nodes of another "
            f"stack computed (largest difference {percent(self.worst)}); bit-exactness cannot "
            f"hold across stacks (this node: {self.stack}; reference: {self.reference_stack}), so "
            f"the losses were compared within a relative tolerance of "
            f"{percent(self.tolerance or 0.0)} (train.lossTolerance)"
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
            f"{percent(relative)} from {shown(self.expected)} that {self.baseline} holds for "
            f"another stack ({self.reference_stack}; largest difference {percent(self.worst)}); "
            f"bit-exactness cannot hold across stacks (this node: {self.stack}), so the losses "
            f"were compared within a relative tolerance of {percent(self.tolerance or 0.0)} "
            "(train.lossTolerance)"
        )


def percent(fraction: float) -> str:
    return f"{fraction * 100:.3g} %"


def relative_difference(value: float, expected: float) -> float:
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
        relative = relative_difference(decode_loss(mine), decode_loss(theirs))
        worst = max(worst, relative)
        if relative > tolerance and first is None:
            first = index
    if len(losses) != len(reference) and first is None:
        first = min(len(losses), len(reference))
    return first, worst


def value_at(losses: Sequence[str], index: int) -> float:
    return decode_loss(losses[index]) if index < len(losses) else math.nan
