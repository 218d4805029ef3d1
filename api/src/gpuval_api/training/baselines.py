"""One node's training losses against a GpuBaseline's (`against_baseline`: bit for bit on its
stack, within the tolerance on another), and the loss baselines a run's nodes teach
(`learn_losses`). Pure."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gpuval_api.training.compare import LossStack
from gpuval_api.training.mismatch import (
    LossMismatch,
    beyond_tolerance,
    first_difference,
    percent,
    value_at,
)
from gpuval_api.training.record import (
    MAX_BASELINE_LOSSES,
    MAX_LOSS_BASELINES,
    LossBaseline,
    NodeLosses,
    TrainingRecord,
    loss_digest,
)


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
        f"compared within {percent(tolerance)} (train.lossTolerance) with the losses {baseline} "
        f"holds for another stack ({reference.stack}; {reference.nodes} nodes), largest "
        f"difference {percent(worst)}: bit-exactness cannot hold across stacks, and {baseline} "
        f"holds none of this one ({stack})"
    )
    if index is None:
        return AgainstBaseline(how)
    mismatch = LossMismatch(
        node="",
        step=index + 1,
        value=value_at(record.losses, index),
        expected=value_at(reference.losses, index),
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
        value=value_at(record.losses, index) if index is not None else math.nan,
        expected=value_at(entry.losses, index) if index is not None else math.nan,
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
    groups: dict[tuple[str, str], LossStack] = {}
    for losses in nodes:
        if losses is None:
            continue
        stack = groups.setdefault((losses.experiment, losses.stack), LossStack(losses.stack))
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
