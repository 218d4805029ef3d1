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
each group of nodes was compared (`LossComparison.compared`), and names the stacks it could not
decide: two nodes (or a tie) that differ with no majority to tell which is right.

On one machine there is no peer: a GpuBaseline holds the losses its stack computed
(`LossBaseline`, per experiment and stack), and `against_baseline` compares a node with them, bit
for bit on the same stack, within the tolerance on another, and says which and why.

The modules: `record` (the losses, their digest, what fixes them, a GpuBaseline's
`LossBaseline`), `mismatch` (a node that differs, and where), `compare` (across nodes),
`baselines` (against a GpuBaseline, and learned for one), `runstatus` (status.training).
"""

from __future__ import annotations

from gpuval_api.training.baselines import AgainstBaseline, against_baseline, learn_losses
from gpuval_api.training.compare import (
    MIN_MAJORITY,
    LossComparison,
    LossStack,
    Undecided,
    compare_losses,
    loss_mismatches,
)
from gpuval_api.training.mismatch import FIELD, LossMismatch, beyond_tolerance, first_difference
from gpuval_api.training.record import (
    MAX_BASELINE_LOSSES,
    MAX_LOSS_BASELINES,
    LossBaseline,
    LossSequence,
    NodeLosses,
    TrainingDeterminants,
    TrainingRecord,
    decode_loss,
    encode_loss,
    intern_losses,
    loss_digest,
    shown,
)
from gpuval_api.training.runstatus import MAX_STATUS_LINES, TrainingRunStatus

__all__ = [
    "FIELD",
    "MAX_BASELINE_LOSSES",
    "MAX_LOSS_BASELINES",
    "MAX_STATUS_LINES",
    "MIN_MAJORITY",
    "AgainstBaseline",
    "LossBaseline",
    "LossComparison",
    "LossMismatch",
    "LossSequence",
    "LossStack",
    "NodeLosses",
    "TrainingDeterminants",
    "TrainingRecord",
    "TrainingRunStatus",
    "Undecided",
    "against_baseline",
    "beyond_tolerance",
    "compare_losses",
    "decode_loss",
    "encode_loss",
    "first_difference",
    "intern_losses",
    "learn_losses",
    "loss_digest",
    "loss_mismatches",
    "shown",
]
