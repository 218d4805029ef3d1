"""`status.training` of a GpuValidation (`TrainingRunStatus`): how the run's training losses
were compared, stack by stack, and the stacks that could not be decided. Pure."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from gpuval_api.training.compare import LossComparison
from gpuval_api.training.record import TrainingModel

# Lines status.training of a GpuValidation lists (one per stack compared, one per undecided).
MAX_STATUS_LINES = 16


class TrainingRunStatus(TrainingModel):
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
