"""What a figure is: its unit and spellings, which way is better, what its baseline compares across,
where its values sit in a result document (its read), where it is shown, and the `Figure` itself
(the registry, gpuval_api.figures, holds the declared ones). Pure data."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from gpuval_api.checks import MAX_FIGURE, ChecksConfig, Precision

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
    COUNT = "count"  # a number of events (PCIe replays, corrected errors): no unit


@dataclass(frozen=True, slots=True)
class UnitSpelling:
    key: str  # appended to the figure's id in result and summary keys: h2d + GBps
    metric: str  # Prometheus base unit suffix ("": none, a count's)
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
    Unit.COUNT: UnitSpelling("Count", "", 1.0, "short"),
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
    """Which of a node's GPU values is its summary value: it follows from `Figure.better` (the
    lowest where higher is better, the highest where lower is); a `PerGpu` may say it only to
    agree (the registry refuses a contradiction)."""

    MIN = "min"
    MAX = "max"


# How a figure's values are read from a result document (gpuval_api.figureread applies them).


@dataclass(frozen=True, slots=True)
class PerGpu:
    """`checks[check].gpus[].metrics[metric]`, one value per GPU; the node's is the worst.

    `tested_only`: a GPU the check did not test (GpuInUse) gives no value, except for a figure
    that is the GPU's whoever loaded it (a temperature)."""

    metric: str = ""  # "" = the figure's key
    worst: Worst | None = None  # None: as the figure's `better` says (see Worst)
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
    dashboard's distribution and slowest-nodes panels (highest nodes, where lower is better);
    `per_gpu`: the dashboard's per-GPU panel (the per-GPU series exist only with
    operator.metricsPerGpu); `column`: a GpuNodeReport
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
    # through its read. "": no baseline.
    baseline: str = ""
    # The settings a baseline value depends on (one measured otherwise does not compare).
    settings: Callable[[ChecksConfig], str] | None = None
    summary: bool = True  # in a GpuNodeReport's status.summary
    history: bool = False  # kept in spec.history and judged by DriftFromHistory
    per_gpu_metric: bool = False  # a gpuval_gpu_* series with operator.metricsPerGpu
    shown: Shown = field(default_factory=Shown)
    digits: int = 3  # rounding in the summary and the history
    maximum: float = MAX_FIGURE  # the largest value an object that keeps it accepts
    # Lower-is-better only: how far (in its unit) a value may exceed its reference (a baseline's
    # centre, the fleet's or the node's own median) and still be even with it. A count-like
    # figure needs one: where the healthy median is 0, any count above it is otherwise worse.
    tolerance: float = 0.0

    @property
    def lower(self) -> bool:
        """Whether lower is better (`better` is the one switch: the worst value, the limit, the
        threshold's name and the words follow from it)."""
        return self.better is Better.LOWER

    @property
    def worst(self) -> Worst:
        """Which of a node's values is its summary value: the lowest, or the highest where lower
        is better."""
        return Worst.MAX if self.lower else Worst.MIN

    def worst_of(self, values: Iterable[float]) -> float:
        """The worst of `values` (at least one)."""
        return max(values) if self.lower else min(values)

    def limit(self, reference: float, fraction: float) -> float:
        """The worst value still even with `reference`: the floor (1 - fraction) x reference, or
        where lower is better the ceiling (1 + fraction) x reference + tolerance."""
        if self.lower:
            return (1 + fraction) * reference + self.tolerance
        return (1 - fraction) * reference

    def beyond(self, value: float, limit: float) -> bool:
        """Whether `value` is worse than `limit` (below a floor, above a ceiling)."""
        return value > limit if self.lower else value < limit

    def worse(self, value: float, reference: float, fraction: float) -> bool:
        """Whether `value` is worse than `reference` by more than `fraction` (and, lower-is-better,
        by more than the tolerance)."""
        return self.beyond(value, self.limit(reference, fraction))

    @property
    def beyond_word(self) -> str:
        """'below' or 'above': where a worse value lies."""
        return "above" if self.lower else "below"

    @property
    def bound_word(self) -> str:
        """'at least' or 'at most': what a good value is against a limit."""
        return "at most" if self.lower else "at least"

    @property
    def key(self) -> str:
        """Its key in status.summary, spec.history and the pages: h2dGBps."""
        return self.id + SPELLINGS[self.unit].key

    @property
    def threshold(self) -> str:
        """The name its check gives a limit of it, where the check has one: a minimum
        (minH2dGBps), or a maximum where lower is better (maxPcieReplaysPerSecond)."""
        return ("max" if self.lower else "min") + self.key[:1].upper() + self.key[1:]

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
        suffix = SPELLINGS[self.unit].metric
        return f"{_snake(self.id)}_{suffix}" if suffix else _snake(self.id)

    @property
    def factor(self) -> float:
        """From its unit to the Prometheus base unit."""
        return SPELLINGS[self.unit].factor

    @property
    def scope(self) -> Scope:
        return self.read.scope

    def ratio(self, value: float, reference: float) -> float:
        """How `value` stands to `reference` with 1 as equal and below 1 as worse, whichever way
        the figure is better: value / reference, or reference / value where lower is better.
        Where higher is better, 0 when either is not positive. Where lower is better, a value
        of 0 (or one within the tolerance of a reference of 0) is even or better: 1 against a
        reference of 0, BEST_RATIO against a positive one; a positive value against a reference
        of 0 is 0 (the worst)."""
        if not self.lower:
            return 0.0 if reference <= 0 or value <= 0 else value / reference
        if reference <= 0:
            return 1.0 if value <= self.tolerance else 0.0
        return BEST_RATIO if value <= 0 else min(reference / value, BEST_RATIO)

    def baseline_name(self, precision: str | None = None, nbytes: int | None = None) -> str | None:
        """The baseline's name of the figure; of a family, its member in `precision` or at
        `nbytes` (None when that is not given)."""
        if not self.baseline:
            return None
        if isinstance(self.read, PerPrecision):
            return f"{self.baseline}.{precision}" if precision else None
        if isinstance(self.read, PerSize):
            return f"{self.baseline}.{size_name(nbytes)}" if nbytes else None
        return self.baseline

    @property
    def baseline_pattern(self) -> str:
        """A regular expression of the baseline names the figure has ('' without a baseline)."""
        if not self.baseline:
            return ""
        name = re.escape(self.baseline)
        if isinstance(self.read, PerPrecision):
            return rf"{name}\.({'|'.join(str(p) for p in Precision)})"
        if isinstance(self.read, PerSize):
            return rf"{name}\.[1-9][0-9]{{0,5}}(B|KiB|MiB|GiB)"
        return name


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


# The best ratio a lower-is-better value stands in (a value of 0 against a positive reference).
BEST_RATIO = 1e6

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
