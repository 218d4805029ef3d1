"""The types of baselines and history: a `GpuBaseline`'s spec (the CRD is generated from it, so
every field is described and bounded), `spec.baseline` of a GpuValidation, and the history entry a
GpuNodeReport carries.

What makes two nodes' figures comparable is their `BaselineKey`: the GPU model, how many GPUs, the
enforced power limit and the GPUs' PCIe link (generation and width the slot allows). A per-GPU
figure (burn, host<->device, device copy) compares across GPU counts of the same model, power
limit and link; a node-level figure (peer copy, in-node NCCL all-reduce) only at the same GPU
count; a fabric figure only with the same transport and pair size (`measuredWith`). The driver,
CUDA and NCCL versions are not in the key on purpose: a driver update that slows every node is
what a baseline is for, so they are recorded beside the figures (`learnedWith`), not matched.

It stands beside the baseline folder, not in it: the result document imports these types, and
gpuval_api.baseline imports the result document (docs/development.md, "Naming a module").
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gpuval_api import figures
from gpuval_api.checks import camel
from gpuval_api.figures import Unit
from gpuval_api.figures.model import with_figures
from gpuval_api.training.record import MAX_LOSS_BASELINES, LossBaseline

# Bounds: a baseline holds every figure once (5 burn precisions, 3 copies, peer, NCCL sizes from
# 1 MiB to 64 GiB, the fabric pair): 27 at most today, 48 leaves room.
MAX_FIGURES = 48
MAX_NODES = 100_000
MAX_SAMPLES = 100_000 * 64 * 64
MAX_EXCLUDED = 50
MAX_HISTORY = 20
MAX_NAMES = 16
MAX_BIMODAL = 8
MAX_LISTED = 50
NAME_LENGTH = 253
PRODUCT_LENGTH = 128
FIGURE_PATTERN = figures.baseline_pattern()
PCIE_PATTERN = r"^(gen[1-9]x[0-9]{1,2}|unknown)$"
_VENDOR = re.compile(r"^NVIDIA\s+", re.IGNORECASE)


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=camel, populate_by_name=True, extra="forbid")


# The largest value a baseline figure may take: the largest of the registry's baselined figures'.
LARGEST = figures.largest_value()
# The units a baseline figure may have: those of the registry's baselined figures.
UNIT_SCHEMA: dict[str, Any] = {"enum": [str(u) for u in figures.baseline_units()]}


class BaselineKey(_Model):
    """What must match for figures to compare (see the module docstring)."""

    gpu_product: str = Field(
        min_length=1,
        max_length=PRODUCT_LENGTH,
        description="GPU model exactly as NVML names it, e.g. NVIDIA H200 (H200 NVL is another).",
    )
    gpu_count: int = Field(ge=1, le=64, description="GPUs per node.")
    power_limit_watts: int = Field(
        ge=1,
        le=5000,
        description="The GPUs' enforced power limit in watts (rounded): a capped fleet is its own.",
    )
    pcie_link: str = Field(
        pattern=PCIE_PATTERN,
        max_length=16,
        description="The GPUs' maximum PCIe link, e.g. gen5x16 (unknown where NVML has none).",
    )

    @property
    def label(self) -> str:
        """The model without the vendor, as a person says it: 'H200'."""
        return _VENDOR.sub("", self.gpu_product)

    def describe(self) -> str:
        return (
            f"{self.gpu_product} x{self.gpu_count}, {self.power_limit_watts} W, "
            f"PCIe {self.pcie_link}"
        )

    def same_gpu(self, other: BaselineKey) -> bool:
        """Per-GPU figures compare: same model, power limit and link, any GPU count."""
        return (self.gpu_product, self.power_limit_watts, self.pcie_link) == (
            other.gpu_product,
            other.power_limit_watts,
            other.pcie_link,
        )

    def default_name(self) -> str:
        """A GpuBaseline name for this key (a DNS subdomain): nvidia-h200-x2-700w-gen5x16."""
        product = re.sub(r"[^a-z0-9]+", "-", self.gpu_product.lower()).strip("-") or "gpu"
        return f"{product[:200]}-x{self.gpu_count}-{self.power_limit_watts}w-{self.pcie_link}"


class FigureBaseline(_Model):
    """One figure's robust centre and spread, and what it came from."""

    figure: str = Field(
        pattern=FIGURE_PATTERN,
        max_length=32,
        description=figures.baseline_names_text(),
    )
    unit: Unit = Field(
        description="The figure's unit (gpuval_api.figures).", json_schema_extra=UNIT_SCHEMA
    )
    centre: float = Field(
        ge=0,
        le=LARGEST,
        description="The median of the samples of the nodes kept; 0 only for a figure where "
        "lower is better (a count the healthy nodes do not have).",
    )
    spread: float = Field(
        ge=0,
        le=LARGEST,
        description="1.4826 x the median absolute deviation: a robust standard deviation.",
    )
    nodes: int = Field(ge=1, le=MAX_NODES, description="Nodes (or runs) the samples came from.")
    samples: int = Field(
        ge=1, le=MAX_SAMPLES, description="Values: one per GPU, GPU pair, or node pair."
    )
    measured_with: str = Field(
        default="",
        max_length=128,
        description=(
            "The settings the figure depends on (matrixSize=16384, transferMiB=1024, "
            "pairBytes=...,transport=...): a figure measured otherwise is not compared."
        ),
    )
    source: str = Field(
        default="", max_length=512, description="Where the samples came from (runs, files)."
    )

    @model_validator(mode="after")
    def _unit_fits_the_figure(self) -> Self:
        wanted = figures.of_baseline(self.figure).unit
        if self.unit is not wanted:
            raise ValueError(f"unit of {self.figure} is {wanted}, not {self.unit}")
        if self.centre <= 0 and not figures.of_baseline(self.figure).lower:
            raise ValueError(
                f"centre of {self.figure} is {self.centre:g}: more than 0 where higher is better"
            )
        return self


class SourceKind(StrEnum):
    LEARNED = "Learned"
    MANUAL = "Manual"
    SHIPPED = "Shipped"


class ExcludedNode(_Model):
    """A passing node the learning left out: its figure broke the rule against the centre."""

    node: str = Field(max_length=NAME_LENGTH, description="Node name.")
    figure: str = Field(pattern=FIGURE_PATTERN, max_length=32, description="The figure.")
    value: float = Field(ge=0, le=LARGEST, description="Its value furthest from the centre.")
    centre: float = Field(ge=0, le=LARGEST, description="The centre it was compared with.")
    round: int = Field(ge=1, le=100, description="The learning round that left it out.")


class BaselineSource(_Model):
    """How the baseline came to be."""

    kind: SourceKind = Field(
        default=SourceKind.MANUAL,
        description="Learned (from a run's passing nodes), Manual (written by hand), Shipped.",
    )
    description: str = Field(default="", max_length=1024, description="Free text: where from.")
    validation: str | None = Field(
        default=None, max_length=NAME_LENGTH, description="Learned: the GpuValidation."
    )
    run: str | None = Field(default=None, max_length=64, description="Learned: the run id.")
    learned_at: str | None = Field(
        default=None,
        max_length=64,
        description="Learned: when (RFC 3339).",
        json_schema_extra={"format": "date-time"},
    )
    fraction: float | None = Field(
        default=None,
        gt=0,
        le=0.5,
        description="Learned: a node was left out when a figure was off its centre by more.",
    )
    nodes_offered: int | None = Field(
        default=None,
        ge=0,
        le=MAX_NODES,
        description="Learned: passing nodes of this key in the run (failed ones are never used).",
    )
    excluded: list[ExcludedNode] = Field(
        default_factory=list,
        max_length=MAX_EXCLUDED,
        description="Learned: passing nodes left out by the rule, at most 50.",
    )
    excluded_omitted: int = Field(
        default=0, ge=0, le=MAX_NODES, description="Left-out nodes beyond the listed."
    )


class StackVersions(_Model):
    """The software the figures were measured with (distinct values, comma-separated). Not part
    of the key: comparing across a driver update is what finds a driver regression."""

    driver_version: str | None = Field(default=None, max_length=256, description="NVIDIA driver.")
    cuda_driver_version: str | None = Field(
        default=None, max_length=256, description="The driver's CUDA version."
    )
    nccl_version: str | None = Field(default=None, max_length=256, description="NCCL.")
    torch_version: str | None = Field(default=None, max_length=256, description="torch.")


class GpuBaselineSpec(_Model):
    """What healthy nodes of one GPU stack measure, figure by figure."""

    key: BaselineKey = Field(description="What a node must match for these figures to apply.")
    figures: list[FigureBaseline] = Field(
        min_length=1,
        max_length=MAX_FIGURES,
        description="Each figure once: centre, spread and how many nodes it came from.",
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["figure"],
        },
    )
    source: BaselineSource = Field(
        default_factory=BaselineSource, description="Learned, written by hand, or shipped."
    )
    learned_with: StackVersions = Field(
        default_factory=StackVersions, description="Driver, CUDA, NCCL and torch of the samples."
    )
    training: list[LossBaseline] = Field(
        default_factory=list,
        max_length=MAX_LOSS_BASELINES,
        description=(
            "The training step's losses per experiment and stack (GPU model, driver, CUDA, "
            "torch, NCCL, attention; model shape, GPU count, seed, steps): a node with no peer "
            "of its stack is compared with them, bit for bit on the same stack, within "
            "train.lossTolerance on another."
        ),
    )

    @model_validator(mode="after")
    def _each_figure_once(self) -> Self:
        seen: set[str] = set()
        for entry in self.figures:
            if entry.figure in seen:
                raise ValueError(f"figure {entry.figure!r} is given twice; give each figure once")
            seen.add(entry.figure)
        pairs = [(e.experiment, e.stack) for e in self.training]
        twice = next((p for p in pairs if pairs.count(p) > 1), None)
        if twice is not None:
            raise ValueError(
                f"training: experiment {twice[0]!r} on stack {twice[1]!r} is given twice; give "
                "each experiment and stack once"
            )
        return self

    def figure(self, name: str) -> FigureBaseline | None:
        return next((f for f in self.figures if f.figure == name), None)


class BaselineMode(StrEnum):
    LEARN = "Learn"  # learn where the node's key has no baseline yet, judge where it has one
    USE = "Use"  # judge against existing GpuBaselines only
    OFF = "Off"  # no baseline rule (history still applies when history.runs > 0)


class DriftAction(StrEnum):
    WARN = "Warn"
    FAIL = "Fail"


class HistorySettings(_Model):
    """A node's own past: its last runs' key figures, and how far it may fall against them."""

    runs: int = Field(
        default=5,
        ge=0,
        le=MAX_HISTORY,
        description="Past runs whose key figures each node keeps (on its GpuNodeReport); 0: off.",
    )
    drift_fraction: float = Field(
        default=0.05,
        gt=0,
        le=0.5,
        description=(
            "DriftFromHistory when a figure is below (1 - this) x the median of the node's kept "
            "runs (at least 3 of them)."
        ),
    )
    action: DriftAction = Field(
        default=DriftAction.WARN,
        description="Warn (report, the node passes) or Fail (the node fails).",
    )


class BaselineSettings(_Model):
    """`spec.baseline`: judge each node against its GPU stack's GpuBaseline and its own past."""

    mode: BaselineMode = Field(
        default=BaselineMode.LEARN,
        description=(
            "Learn: where a node's key has no GpuBaseline, learn one from the run's passing "
            "nodes; where it has one, judge against it. Use: judge against existing ones only. "
            "Off: no baseline rule (the history rule still applies)."
        ),
    )
    names: list[Annotated[str, Field(min_length=1, max_length=NAME_LENGTH)]] = Field(
        default_factory=list,
        max_length=MAX_NAMES,
        description="GpuBaselines to use. Empty: every GpuBaseline whose key matches the node.",
    )
    fraction: float = Field(
        default=0.1,
        gt=0,
        le=0.5,
        description=(
            "BelowBaseline when a figure is below (1 - this) x its baseline's centre; learning "
            "leaves out a node whose figure is off the centre by more (SuperBench: 0.05-0.1)."
        ),
    )
    min_nodes: int = Field(
        default=5,
        ge=2,
        le=10_000,
        description="Passing nodes of one key needed to learn its baseline (after leaving out).",
    )
    systemic_fraction: float = Field(
        default=0.5,
        gt=0,
        le=1,
        description=(
            "More than this share of the judged nodes below on one figure is systemic: the "
            "stack, not the nodes (node actions are held)."
        ),
    )
    history: HistorySettings = Field(
        default_factory=HistorySettings, description="Each node against its own past runs."
    )


# A history entry's GPU identity: hex digits of a sha256 (gpuval_api.baseline.history).
GPU_IDENTITY_DIGITS = 16
# Each GPU's own token in a history entry (gpuval_api.baseline.history.gpu_tokens): hex digits.
GPU_TOKEN_DIGITS = 8
MAX_GPU_TOKENS = 64


class _HistoryEntry(_Model):
    """One past run of a node: its key figures only (the worst GPU's, as in status.summary), and
    which GPUs measured them."""

    run: str = Field(min_length=1, max_length=64, description="The run id.")
    completed_at: str | None = Field(
        default=None,
        max_length=64,
        description="When the node's verdict was written (RFC 3339).",
        json_schema_extra={"format": "date-time"},
    )
    gpu_identity: str | None = Field(
        default=None,
        pattern=f"^[0-9a-f]{{{GPU_IDENTITY_DIGITS}}}$",
        max_length=GPU_IDENTITY_DIGITS,
        description=(
            "The node's GPUs in that run: the first 16 hex digits of the sha256 of their sorted "
            "UUIDs and serials. Another one is new GPUs, and a new history (absent: not known)."
        ),
    )
    gpu_tokens: list[Annotated[str, Field(pattern=f"^[0-9a-f]{{{GPU_TOKEN_DIGITS}}}$")]] | None = (
        Field(
            default=None,
            max_length=MAX_GPU_TOKENS,
            description=(
                "Each GPU's token in index order (the first 8 hex digits of the sha256 of its "
                "UUID and serial), so a restarted history names the GPUs that changed (absent: "
                "not known)."
            ),
        )
    )


# One field per history figure of the registry (gpuval_api.figures), keyed and described there.
if TYPE_CHECKING:
    HistoryEntry = _HistoryEntry
else:
    HistoryEntry = with_figures(
        _HistoryEntry, "HistoryEntry", figures.history_figures(), bounded=True
    )


class SystemicFigure(_Model):
    """A figure on which most judged nodes of the run are below their baseline."""

    figure: str = Field(pattern=FIGURE_PATTERN, max_length=32, description="The figure.")
    below: int = Field(ge=0, le=MAX_NODES, description="Nodes below their baseline on it.")
    judged: int = Field(ge=0, le=MAX_NODES, description="Nodes judged on it.")
    median_ratio: float = Field(ge=0, le=100, description="The judged nodes' median ratio.")
    message: str = Field(default="", max_length=1024, description="One line about it.")


class DriftingNode(_Model):
    """A node named DriftFromHistory in the run: its key figure furthest below its own past."""

    node: str = Field(max_length=NAME_LENGTH, description="Node name.")
    figure: str = Field(
        max_length=32, description="The key figure (as in spec.history), e.g. burnTflops."
    )
    ratio: float = Field(
        ge=0, le=100, description="Its value over its median in the node's kept runs."
    )
    failed: bool = Field(default=False, description="history.action Fail failed the node.")
    message: str = Field(default="", max_length=1024, description="One line about it.")


class RestartedNode(_Model):
    """A node whose GPUs were replaced since its kept runs: its history started again."""

    node: str = Field(max_length=NAME_LENGTH, description="Node name.")
    message: str = Field(
        default="", max_length=1024, description="Which GPUs changed and what was set aside."
    )


class BaselineRunStatus(_Model):
    """`status.baseline` of a GpuValidation: the run against its baselines, bounded."""

    judged: int = Field(default=0, ge=0, le=MAX_NODES, description="Nodes with a baseline.")
    below: int = Field(default=0, ge=0, le=MAX_NODES, description="Nodes below it on a figure.")
    drifting: int = Field(
        default=0, ge=0, le=MAX_NODES, description="Nodes named DriftFromHistory."
    )
    systemic: list[SystemicFigure] = Field(
        default_factory=list,
        max_length=8,
        description=(
            "Figures on which more than systemicFraction of the judged nodes are below: the "
            "stack (driver, firmware, settings), not the nodes; node actions are held."
        ),
    )
    learned: list[Annotated[str, Field(max_length=NAME_LENGTH)]] = Field(
        default_factory=list, max_length=MAX_NAMES, description="GpuBaselines this run learned."
    )
    drifting_nodes: list[DriftingNode] = Field(
        default_factory=list,
        max_length=MAX_LISTED,
        description="Nodes named DriftFromHistory, at most 50, those that fell most first.",
    )
    drifting_nodes_omitted: int = Field(
        default=0, ge=0, le=MAX_NODES, description="Drifting nodes beyond the listed."
    )
    history_restarted: list[RestartedNode] = Field(
        default_factory=list,
        max_length=MAX_LISTED,
        description=(
            "Nodes whose GPUs changed since their kept runs (the GPUs named): their history "
            "starts again from this run; at most 50."
        ),
    )
    history_restarted_omitted: int = Field(
        default=0, ge=0, le=MAX_NODES, description="Restarted histories beyond the listed."
    )
    bimodal: list[Annotated[str, Field(max_length=1024)]] = Field(
        default_factory=list,
        max_length=MAX_BIMODAL,
        description=(
            "GPU stacks whose passing nodes formed two groups (condition Bimodal): both modes' "
            "nodes and figures, and what was learned (the better mode, or nothing); at most 8."
        ),
    )
    note: str = Field(
        default="",
        max_length=1024,
        description=(
            "What the run could not do with its baselines: named GpuBaselines missing, keys "
            "not learned and why, which of two baselines of one key judges."
        ),
    )
