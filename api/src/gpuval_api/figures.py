"""The figure registry: every measured figure is declared here once, and every table that names
figures is derived from it (docs/contracts.md, "Adding a figure").

A `Figure` says which check measures it and where its values sit in the agent's result document
(`read`), its id and unit (from which its summary key, CRD field, history key and Prometheus name
are spelled), its label, whether higher or lower is better, its baseline name, and where it is
shown. Derived from here: the report summary (`gpuval_api.report.build_summary`) and the CRD's
`status.summary` and `spec.history` fields and printer columns, the pages' figures
(`gpuval_api.views`, `gpuval_api.machine`), the baselines' figure names, units, scopes and
samples (`gpuval_api.baseline`), the node history and DriftFromHistory, the operator's
Prometheus series, the Grafana dashboard and the docs' metrics table.

Pure data: this module reads nothing and imports only the check names; how a `read` is applied
to a result document is `gpuval_api.figureread`'s.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from gpuval_api.checks import MAX_FIGURE, CheckName, ChecksConfig, Precision

# The fabric's check name (gpuval_api.fabric.FABRIC_CHECK spells the same word for results).
FABRIC = "fabric"


class Unit(StrEnum):
    """A figure's unit as a person reads it. Its spelling in keys and in Prometheus follows."""

    TFLOPS = "TFLOP/s"
    GBPS = "GB/s"
    CELSIUS = "°C"
    TOKENS_PER_SECOND = "tokens/s"
    RATIO = "ratio"
    SECONDS = "s"
    BYTES = "bytes"


@dataclass(frozen=True, slots=True)
class UnitSpelling:
    key: str  # appended to the figure's id in result and summary keys: h2d + GBps
    metric: str  # Prometheus base unit suffix
    factor: float  # from the figure's unit to the Prometheus base unit
    grafana: str  # Grafana's unit id for the base unit


SPELLINGS: dict[Unit, UnitSpelling] = {
    Unit.TFLOPS: UnitSpelling("Tflops", "flops_per_second", 1e12, "flops"),
    Unit.GBPS: UnitSpelling("GBps", "bytes_per_second", 1e9, "Bps"),
    Unit.CELSIUS: UnitSpelling("Celsius", "celsius", 1.0, "celsius"),
    Unit.TOKENS_PER_SECOND: UnitSpelling("PerSecond", "per_second", 1.0, "short"),
    Unit.RATIO: UnitSpelling("Ratio", "ratio", 1.0, "percentunit"),
    Unit.SECONDS: UnitSpelling("Seconds", "seconds", 1.0, "s"),
    Unit.BYTES: UnitSpelling("Bytes", "bytes", 1.0, "bytes"),
}


class Better(StrEnum):
    HIGHER = "higher"
    LOWER = "lower"


class Scope(StrEnum):
    """What a figure's baseline compares across."""

    GPU = "gpu"  # one GPU's figure: compares across GPU counts of one model and power limit
    NODE = "node"  # the node's GPUs together: same GPU count only
    FABRIC = "fabric"  # between nodes: same transport and pair size only


class Worst(StrEnum):
    """Which of a node's GPU values is its summary value."""

    MIN = "min"
    MAX = "max"


# How a figure's values are read from a result document (gpuval_api.figureread applies them).


@dataclass(frozen=True, slots=True)
class PerGpu:
    """`checks[check].gpus[].metrics[metric]`, one value per GPU; the node's is the worst.

    `tested_only`: a GPU the check did not test (GpuInUse) gives no value, except for a figure
    that is the GPU's whoever loaded it (a temperature)."""

    metric: str = ""  # "" = the figure's key
    worst: Worst = Worst.MIN
    tested_only: bool = True
    scope: Scope = Scope.GPU


@dataclass(frozen=True, slots=True)
class PerPrecision:
    """The burn's: `metrics["<metric>"]` per GPU in the first configured precision (the summary's
    and the pages'), and `metrics["<metric>.<precision>"]` in each precision (the baselines')."""

    metric: str
    scope: Scope = Scope.GPU


@dataclass(frozen=True, slots=True)
class GpuPairs:
    """`checks[check].pairs[].gbps`: one value per ordered GPU pair, the node's is the lowest."""

    scope: Scope = Scope.NODE


@dataclass(frozen=True, slots=True)
class PerSize:
    """`checks[check].ncclSizes[]`: busbw per message size; the node's is the largest size's.
    Sizes below `min_bytes` are latency, not kept; below `judged_bytes` kept, not judged."""

    min_bytes: int = 1 << 20
    judged_bytes: int = 1 << 30
    scope: Scope = Scope.NODE


@dataclass(frozen=True, slots=True)
class NodeMetric:
    """`checks[check].metrics[metric]`: one value for the whole node."""

    metric: str = ""  # "" = the figure's key
    scope: Scope = Scope.NODE


@dataclass(frozen=True, slots=True)
class FabricPairs:
    """A node's pair all-reduces in the fabric phase (status.fabric); not in the agent's result."""

    scope: Scope = Scope.FABRIC


Read = PerGpu | PerPrecision | GpuPairs | PerSize | NodeMetric | FabricPairs


@dataclass(frozen=True, slots=True)
class Shown:
    """Where a person sees the figure besides the report and the metrics.

    `page`: the HTML report's plots and table, `kubectl gpuval status`'s outliers, the history's
    trends; `trend`: the title of the dashboard's over-time panel the node series goes in
    (figures with one title share a panel, `legend` tells them apart); `distribution`: the
    dashboard's distribution and slowest-nodes panels; `per_gpu`: the dashboard's per-GPU panel
    (the per-GPU series exist only with operator.metricsPerGpu); `column`: a GpuNodeReport
    printer column of this title.
    """

    page: bool = False
    trend: str = ""
    legend: str = ""
    distribution: bool = False
    per_gpu: bool = False
    column: str = ""


@dataclass(frozen=True, slots=True)
class Figure:
    """One measured figure, declared once (see the module docstring)."""

    id: str  # camelCase: h2d, deviceCopy, burn; the other spellings follow from it and the unit
    label: str
    unit: Unit
    check: str  # the check that measures it (a BelowBaseline or drift finding is listed there)
    description: str  # the CRD field's description
    read: Read
    better: Better = Better.HIGHER
    # The baseline's name of the figure; a family (burn by precision, NCCL by size) names itself
    # through its read. None: no baseline.
    baseline: str | None = None
    # The settings a baseline value depends on (one measured otherwise does not compare).
    settings: Callable[[ChecksConfig], str] | None = None
    summary: bool = True  # in a GpuNodeReport's status.summary
    history: bool = False  # kept in spec.history and judged by DriftFromHistory
    per_gpu_metric: bool = False  # a gpuval_gpu_* series with operator.metricsPerGpu
    shown: Shown = field(default_factory=Shown)
    digits: int = 3  # rounding in the summary and the history
    maximum: float = MAX_FIGURE  # the largest value an object that keeps it accepts

    @property
    def key(self) -> str:
        """Its key in status.summary, spec.history and the pages: h2dGBps."""
        return self.id + SPELLINGS[self.unit].key

    @property
    def metric(self) -> str:
        """Its key in the result document's metrics, where it is read from there."""
        read = self.read
        own = read.metric if isinstance(read, PerGpu | PerPrecision | NodeMetric) else ""
        return own or self.key

    def precision_metric(self, precision: str) -> str:
        """Its key in the result document's metrics in one precision (a burn figure's)."""
        return f"{self.metric}.{precision}"

    @property
    def prometheus(self) -> str:
        """Its Prometheus name after gpuval_node_ / gpuval_gpu_: h2d_bytes_per_second."""
        return f"{_snake(self.id)}_{SPELLINGS[self.unit].metric}"

    @property
    def factor(self) -> float:
        """From its unit to the Prometheus base unit."""
        return SPELLINGS[self.unit].factor

    @property
    def scope(self) -> Scope:
        return self.read.scope

    def ratio(self, value: float, reference: float) -> float:
        """How `value` stands to `reference` with 1 as equal and below 1 as worse, whichever way
        the figure is better (0 where the reference or the value is not positive)."""
        if reference <= 0 or value <= 0:
            return 0.0
        return value / reference if self.better is Better.HIGHER else reference / value

    def baseline_name(self, precision: str | None = None, nbytes: int | None = None) -> str | None:
        """The baseline's name of the figure; of a family, its member in `precision` or at
        `nbytes` (None when that is not given)."""
        if self.baseline is None:
            return None
        if isinstance(self.read, PerPrecision):
            return f"{self.baseline}.{precision}" if precision else None
        if isinstance(self.read, PerSize):
            return f"{self.baseline}.{size_name(nbytes)}" if nbytes else None
        return self.baseline

    @property
    def baseline_pattern(self) -> str:
        """A regular expression of the baseline names the figure has ('' without a baseline)."""
        if self.baseline is None:
            return ""
        name = re.escape(self.baseline)
        if isinstance(self.read, PerPrecision):
            return rf"{name}\.({'|'.join(str(p) for p in Precision)})"
        if isinstance(self.read, PerSize):
            return rf"{name}\.[1-9][0-9]{{0,5}}(B|KiB|MiB|GiB)"
        return name


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30


def size_name(nbytes: int | None) -> str:
    """1MiB, 4GiB; a size that is not a whole KiB/MiB/GiB keeps its bytes: 1000B."""
    if nbytes is None:
        return ""
    for unit, name in ((GIB, "GiB"), (MIB, "MiB"), (KIB, "KiB")):
        if nbytes % unit == 0:
            return f"{nbytes // unit}{name}"
    return f"{nbytes}B"


def size_bytes(name: str) -> int:
    """The bytes of a size_name."""
    for suffix, unit in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB), ("B", 1)):
        if name.endswith(suffix):
            return int(name.removesuffix(suffix)) * unit
    raise ValueError(f"{name!r} is not a size such as 4GiB")


def _matrix(config: ChecksConfig) -> str:
    return f"matrixSize={config.burn.matrix_size}"


def _transfer(config: ChecksConfig) -> str:
    return f"transferMiB={config.bandwidth.transfer_mib}"


def _training(config: ChecksConfig) -> str:
    train = config.train
    return (
        f"model={train.model},microBatch={train.micro_batch or 'auto'},attention={train.attention}"
    )


BURN = Figure(
    id="burn",
    label="Burn throughput",
    unit=Unit.TFLOPS,
    check=CheckName.BURN,
    description="Lowest burn throughput, TFLOP/s.",
    read=PerPrecision(metric="tflops"),
    baseline="burn",
    settings=_matrix,
    history=True,
    per_gpu_metric=True,
    shown=Shown(
        page=True, trend="Burn throughput", distribution=True, per_gpu=True, column="Burn TFLOP/s"
    ),
)
H2D = Figure(
    id="h2d",
    label="Host to device",
    unit=Unit.GBPS,
    check=CheckName.BANDWIDTH,
    description="Lowest host-to-device bandwidth, GB/s.",
    read=PerGpu(),
    baseline="h2d",
    settings=_transfer,
    history=True,
    per_gpu_metric=True,
    shown=Shown(
        page=True,
        trend="Host to device / device to host bandwidth",
        legend="h2d",
        distribution=True,
        per_gpu=True,
        column="H2D GB/s",
    ),
)
D2H = Figure(
    id="d2h",
    label="Device to host",
    unit=Unit.GBPS,
    check=CheckName.BANDWIDTH,
    description="Lowest device-to-host bandwidth, GB/s.",
    read=PerGpu(),
    baseline="d2h",
    settings=_transfer,
    history=True,
    per_gpu_metric=True,
    shown=Shown(page=True, trend="Host to device / device to host bandwidth", legend="d2h"),
)
DEVICE_COPY = Figure(
    id="deviceCopy",
    label="Device-local copy",
    unit=Unit.GBPS,
    check=CheckName.BANDWIDTH,
    description="Lowest device-local copy bandwidth, GB/s.",
    read=PerGpu(),
    baseline="deviceCopy",
    settings=_transfer,
    history=True,
    per_gpu_metric=True,
    shown=Shown(page=True, trend="Device copy / peer to peer bandwidth", legend="device"),
)
P2P = Figure(
    id="p2p",
    label="GPU to GPU (peer)",
    unit=Unit.GBPS,
    check=CheckName.BANDWIDTH,
    description="Lowest GPU-to-GPU bandwidth, GB/s.",
    read=GpuPairs(),
    baseline="p2p",
    settings=_transfer,
    history=True,
    shown=Shown(page=True, trend="Device copy / peer to peer bandwidth", legend="p2p"),
)
NCCL_BUSBW = Figure(
    id="ncclBusbw",
    label="NCCL all-reduce busbw",
    unit=Unit.GBPS,
    check=CheckName.NCCL,
    description="NCCL all-reduce busbw at the largest size, GB/s.",
    read=PerSize(),
    baseline="nccl",
    history=True,
    shown=Shown(
        page=True,
        trend="NCCL all-reduce bus bandwidth",
        distribution=True,
        column="Busbw GB/s",
    ),
)
MAX_TEMPERATURE = Figure(
    id="maxTemperature",
    label="GPU temperature under burn",
    unit=Unit.CELSIUS,
    check=CheckName.BURN,
    description="Highest GPU temperature during the burn, degrees Celsius.",
    read=PerGpu(worst=Worst.MAX, tested_only=False),
    better=Better.LOWER,
    per_gpu_metric=True,
    shown=Shown(trend="Hottest GPU temperature per node under burn", per_gpu=True),
    digits=1,
)
# The training step's figures are each GPU's: data-parallel ranks wait for the slowest GPU every
# step, and the gradients' all-reduce overlaps the backward pass (on 8 NVLinked H200s its ~10 ms
# against a 415 ms step), so a GPU's rate compares across GPU counts of one model as the burn's.
TRAIN_TOKENS = Figure(
    id="trainTokens",
    label="Training throughput per GPU",
    unit=Unit.TOKENS_PER_SECOND,
    check=CheckName.TRAIN,
    description="Lowest training step throughput of a GPU, tokens/s.",
    read=PerGpu(metric="tokensPerSecond"),
    baseline="trainTokens",
    settings=_training,
    history=True,
    per_gpu_metric=True,
    shown=Shown(page=True, trend="Training step throughput", distribution=True, per_gpu=True),
    digits=1,
    maximum=1e9,
)
TRAIN_MFU = Figure(
    id="trainMfu",
    label="Training MFU",
    unit=Unit.RATIO,
    check=CheckName.TRAIN,
    description=(
        "Lowest model FLOPs utilisation of a GPU in the training step, against the GPU model's "
        "dense bf16 peak (0 to 1)."
    ),
    read=PerGpu(metric="mfuRatio"),
    baseline="trainMfu",
    settings=_training,
    history=True,
    shown=Shown(page=True, trend="Training step model FLOPs utilisation"),
    digits=4,
    maximum=1.0,
)
FABRIC_PAIR = Figure(
    id="fabricPair",
    label="Fabric pair busbw",
    unit=Unit.GBPS,
    check=FABRIC,
    description="Lowest busbw of its fabric pairs, GB/s.",
    read=FabricPairs(),
    baseline="fabric.pair",
    summary=False,
    history=True,
)

_REGISTRY: list[Figure] = []


class RegistryError(ValueError):
    """A declaration that clashes with one already made."""


def declare(figure: Figure) -> Figure:
    """Add a figure. Every table derived from the registry at import sees it when it is declared
    before those modules are imported (a figure of this package is declared above)."""
    if figure.shown.distribution and figure.better is not Better.HIGHER:
        raise RegistryError(f"figure {figure.id!r}: the slowest-nodes panel needs higher-better")
    if figure.history and not (figure.summary or isinstance(figure.read, FabricPairs)):
        raise RegistryError(f"figure {figure.id!r}: a history figure is read from the summary")
    for known in _REGISTRY:
        for what in ("id", "key", "prometheus"):
            if getattr(known, what) == getattr(figure, what):
                raise RegistryError(f"figure {figure.id!r}: its {what} is {known.id!r}'s")
        if figure.baseline is not None and known.baseline == figure.baseline:
            raise RegistryError(f"figure {figure.id!r}: baseline {figure.baseline!r} is taken")
    _REGISTRY.append(figure)
    return figure


for _figure in (
    BURN,
    H2D,
    D2H,
    DEVICE_COPY,
    P2P,
    NCCL_BUSBW,
    MAX_TEMPERATURE,
    TRAIN_TOKENS,
    TRAIN_MFU,
    FABRIC_PAIR,
):
    declare(_figure)


def all_figures() -> tuple[Figure, ...]:
    """Every figure, in reading order."""
    return tuple(_REGISTRY)


def summary_figures() -> tuple[Figure, ...]:
    """The figures of a GpuNodeReport's status.summary (the node's worst GPU), in order."""
    return tuple(f for f in _REGISTRY if f.summary)


def history_figures() -> tuple[Figure, ...]:
    """The key figures a node's history keeps and DriftFromHistory judges."""
    return tuple(f for f in _REGISTRY if f.history)


def page_figures() -> tuple[Figure, ...]:
    """The figures the pages plot and compare across units (outliers)."""
    return tuple(f for f in _REGISTRY if f.shown.page)


def baselined() -> tuple[Figure, ...]:
    """The figures a GpuBaseline may hold."""
    return tuple(f for f in _REGISTRY if f.baseline is not None)


def by_key(key: str) -> Figure | None:
    return next((f for f in _REGISTRY if f.key == key), None)


def of_baseline(name: str) -> Figure:
    """The figure a baseline figure name belongs to (burn.bf16 is BURN's)."""
    for figure in _REGISTRY:
        pattern = figure.baseline_pattern
        if pattern and re.fullmatch(pattern, name):
            return figure
    raise ValueError(f"{name!r} is no figure a baseline holds")


def baseline_pattern(figures: Iterable[Figure] | None = None) -> str:
    """The regular expression every baseline figure name matches (the CRD's pattern)."""
    chosen = baselined() if figures is None else tuple(figures)
    return "^(" + "|".join(f.baseline_pattern for f in chosen if f.baseline) + ")$"


def largest_value() -> float:
    """The largest value any baselined figure may take (a baseline's bounds)."""
    return max(f.maximum for f in baselined())


def baseline_units() -> tuple[Unit, ...]:
    """The units of the figures a baseline may hold, in registry order, once each."""
    return tuple(dict.fromkeys(f.unit for f in baselined()))


_SCOPE_WORDS = {Scope.GPU: "per GPU", Scope.NODE: "per node", Scope.FABRIC: "per pair of nodes"}


def baseline_names_text() -> str:
    """The names a baseline figure may have, for the CRD's description."""
    parts = []
    for figure in baselined():
        name = figure.baseline or ""
        if isinstance(figure.read, PerPrecision):
            name += ".<precision>"
        elif isinstance(figure.read, PerSize):
            name += ".<size, e.g. 4GiB>"
        parts.append(f"{name} ({figure.label}, {figure.unit} {_SCOPE_WORDS[figure.scope]})")
    return "; ".join(parts) + "."


# A baseline figure name's properties (burn.bf16 is BURN's, nccl.4GiB NCCL_BUSBW's).


def baseline_scope(name: str) -> Scope:
    return of_baseline(name).scope


def baseline_unit(name: str) -> Unit:
    return of_baseline(name).unit


def baseline_check(name: str) -> str:
    """The check that measures it (where a BelowBaseline finding is listed)."""
    return of_baseline(name).check


def baseline_judged(name: str) -> bool:
    """Whether BelowBaseline applies (small all-reduces are kept and drawn, not judged)."""
    read = of_baseline(name).read
    return not isinstance(read, PerSize) or size_bytes(name.rsplit(".", 1)[1]) >= read.judged_bytes


def baseline_order(name: str) -> tuple[int, int]:
    """Reading order: the registry's, burn by precision, NCCL by size."""
    figure = of_baseline(name)
    position = baselined().index(figure)
    member = name.rsplit(".", 1)[-1]
    if isinstance(figure.read, PerPrecision):
        precisions = [str(p) for p in Precision]
        return (position, precisions.index(member) if member in precisions else len(precisions))
    if isinstance(figure.read, PerSize):
        return (position, size_bytes(member))
    return (position, 0)
