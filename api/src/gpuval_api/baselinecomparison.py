"""A node's figures against a baseline, as the result document records it (`baseline` of the
agent's result: the table's and the HTML page's "0.98 of the H200 baseline"). Types only; the
comparison is made by gpuval_api.baseline.rules. It stands beside the baseline folder, not in it:
the result document holds it, and gpuval_api.baseline imports the result document."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from gpuval_api.baselinemodel import UNIT_SCHEMA, BaselineKey
from gpuval_api.checks import camel
from gpuval_api.figures import Better, Unit


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=camel, populate_by_name=True, extra="forbid")


class Match(StrEnum):
    EXACT = "exact"  # same key: every figure compares
    GPU = "gpu"  # same model, power limit and link, another GPU count: per-GPU figures only


class FigureRatio(_Model):
    """One figure: its worst value against the baseline's centre."""

    figure: str = Field(description="The baseline's figure name, e.g. burn.bf16, nccl.4GiB.")
    unit: Unit = Field(json_schema_extra=UNIT_SCHEMA)
    better: Better = Field(
        default=Better.HIGHER, description="Which way the figure is better (the registry's)."
    )
    value: float = Field(
        description="The worst value measured (worst GPU, pair or size): the lowest, or the "
        "highest where lower is better."
    )
    where: str = Field(default="", description="Where the worst was: 'GPU 3', 'GPU 0 -> GPU 1'.")
    centre: float | None = Field(default=None, description="The baseline's centre; None: none.")
    spread: float | None = None
    floor: float | None = Field(
        default=None, description="(1 - fraction) x centre, where higher is better."
    )
    ceiling: float | None = Field(
        default=None,
        description="(1 + fraction) x centre + the figure's tolerance, where lower is better.",
    )
    ratio: float | None = Field(
        default=None,
        description="How the value stands to the centre, below 1 worse: value / centre, or "
        "centre / value where lower is better.",
    )
    judged: bool = Field(default=False, description="Whether BelowBaseline applies to it.")
    below: int = Field(
        default=0,
        description="Values (GPUs, pairs) worse than the limit: below the floor, or above the "
        "ceiling where lower is better.",
    )
    note: str = Field(default="", description="Why it was not compared or not judged.")


class BaselineComparison(_Model):
    """This node against the baseline that matched it (or why none did)."""

    name: str | None = Field(default=None, description="The GpuBaseline's name; None: none.")
    label: str = Field(default="", description="The GPU model as said: 'H200'.")
    key: BaselineKey | None = Field(default=None, description="The baseline's key.")
    node_key: BaselineKey | None = Field(default=None, description="This node's key.")
    match: Match | None = None
    source: str = Field(default="", description="Where the baseline came from.")
    fraction: float = Field(description="BelowBaseline below (1 - fraction) x the centre.")
    figures: list[FigureRatio] = Field(default_factory=list)
    note: str = Field(default="", description="Why no baseline was used, when none was.")
    training: str = Field(
        default="",
        description=(
            "How the training step's losses were compared with the baseline's (bit for bit on "
            "the same stack, within train.lossTolerance on another) and why, or why not."
        ),
    )

    def phrase(self, ratio: float) -> str:
        """'0.98 of the H200 baseline'."""
        return f"{ratio:.2f} of the {self.label or self.name} baseline"

    @property
    def below(self) -> int:
        return sum(f.below for f in self.figures)
