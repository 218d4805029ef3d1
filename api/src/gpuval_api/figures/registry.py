"""The registry: the figures declared (in declaration order, which is the reading order), how a
figure is declared, and the questions every derived table asks of it. Pure."""

from __future__ import annotations

import re
from collections.abc import Iterable

from gpuval_api.checks import Precision
from gpuval_api.figures.kinds import (
    FabricPairs,
    Figure,
    PerGpu,
    PerPrecision,
    PerSize,
    Scope,
    Unit,
    size_bytes,
)

_REGISTRY: list[Figure] = []


class RegistryError(ValueError):
    """A declaration that clashes with one already made."""


def declare(figure: Figure) -> Figure:
    """Add a figure. Every table derived from the registry at import sees it when it is declared
    before those modules are imported (a figure of this package is declared above)."""
    read = figure.read
    if isinstance(read, PerGpu) and read.worst is not None and read.worst is not figure.worst:
        raise RegistryError(
            f"figure {figure.id!r}: PerGpu(worst={read.worst}) contradicts better={figure.better} "
            f"(whose worst is {figure.worst}); leave worst out, better says it"
        )
    if figure.tolerance < 0 or (figure.tolerance and not figure.lower):
        raise RegistryError(
            f"figure {figure.id!r}: tolerance {figure.tolerance:g} is for lower-is-better "
            "figures only, and at least 0"
        )
    if figure.history and not (figure.summary or isinstance(figure.read, FabricPairs)):
        raise RegistryError(f"figure {figure.id!r}: a history figure is read from the summary")
    for known in _REGISTRY:
        for what in ("id", "key", "prometheus"):
            if getattr(known, what) == getattr(figure, what):
                raise RegistryError(f"figure {figure.id!r}: its {what} is {known.id!r}'s")
        if figure.baseline and known.baseline == figure.baseline:
            raise RegistryError(f"figure {figure.id!r}: baseline {figure.baseline!r} is taken")
    _REGISTRY.append(figure)
    return figure


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
    return tuple(f for f in _REGISTRY if f.baseline)


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
        name = figure.baseline
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
