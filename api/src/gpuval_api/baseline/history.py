"""Pure: a node's own history and DriftFromHistory.

Each node keeps its last N runs' key figures (`HistoryEntry`: the worst GPU's figures of
status.summary and its lowest fabric pair, about 230 bytes as JSON) in the `spec.history` of the
GpuNodeReport the operator creates for its next run: the operator already holds each node's
summary, so carrying it forward costs no extra object and no extra write, and it survives the
pruning of old reports (each report holds the chain). A figure below (1 - driftFraction) x the
median of the kept runs (at least MIN_RUNS of them; for a lower-is-better figure, above (1 +
driftFraction) x the median plus its tolerance) is a drift: a slow decline that stays near the
fleet median is seen while it is still above it.

A history is of the node's GPUs, not of its name: each entry carries their identity (a digest of
their UUIDs and serials), and a run on other GPUs (replaced) starts the history again, so new GPUs
are never judged against the figures of the ones they replaced (`since_gpus_changed`). A MIG
instance counts as its parent GPU's UUID and its profile (`unit_uuid`): an instance's own UUID is
new whenever the instances are created again (a reboot re-creates them), while the parent and the
layout are what was measured; another layout starts the history again, as it should.
"""

from __future__ import annotations

import hashlib
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpuval_api import figures as registry
from gpuval_api.baselinemodel import (
    GPU_IDENTITY_DIGITS,
    GPU_TOKEN_DIGITS,
    MAX_GPU_TOKENS,
    DriftAction,
    HistoryEntry,
    HistorySettings,
)
from gpuval_api.reasons import Severity
from gpuval_api.report import build_summary
from gpuval_api.result import AgentResult, GpuInfo

# The registry's history figures, by key, in reading order.
KEY_FIGURES: tuple[str, ...] = tuple(f.key for f in registry.history_figures())
MIN_RUNS = 3


def unit_uuid(uuid: object, parent_uuid: object = None, profile: object = None) -> object:
    """What a unit's history is of: a whole GPU's UUID; a MIG instance's parent GPU's and its
    profile ('GPU-…/1g.18gb'), the same after its instances are created again."""
    if isinstance(parent_uuid, str) and parent_uuid and isinstance(profile, str) and profile:
        return f"{parent_uuid}/{profile}"
    return uuid


def result_units(gpus: Iterable[GpuInfo]) -> list[tuple[object, object]]:
    """(`unit_uuid`, serial) of an environment's units."""
    return [
        (unit_uuid(g.uuid, g.mig.parent_uuid, g.mig.profile) if g.mig else g.uuid, g.serial)
        for g in gpus
    ]


def gpu_identity(gpus: Iterable[tuple[object, object]]) -> str | None:
    """The identity of a node's GPUs from their (UUID, serial) pairs: the first
    GPU_IDENTITY_DIGITS hex digits of the sha256 of the sorted pairs; None when no GPU has
    either (nothing to tell GPUs apart by)."""
    pairs = sorted(
        f"{uuid if isinstance(uuid, str) else ''}/{serial if isinstance(serial, str) else ''}"
        for uuid, serial in gpus
        if uuid or serial
    )
    if not pairs:
        return None
    return hashlib.sha256("\n".join(pairs).encode()).hexdigest()[:GPU_IDENTITY_DIGITS]


def gpu_tokens(gpus: Iterable[tuple[object, object]]) -> list[str] | None:
    """Each GPU's token from its (UUID, serial), in the order given (the GPUs' index order): the
    first GPU_TOKEN_DIGITS hex digits of the sha256 of "uuid/serial", so a history entry tells
    which GPU changed for a few bytes a GPU; None when no GPU has either."""
    pairs = [
        f"{uuid if isinstance(uuid, str) else ''}/{serial if isinstance(serial, str) else ''}"
        for uuid, serial in gpus
    ]
    if not any(pair != "/" for pair in pairs):
        return None
    return [
        hashlib.sha256(pair.encode()).hexdigest()[:GPU_TOKEN_DIGITS]
        for pair in pairs[:MAX_GPU_TOKENS]
    ]


def result_gpus(result: object) -> tuple[str | None, list[str] | None]:
    """The GPU identity of an agent's result document (as JSON: a dict) and each GPU's token in
    index order (`gpu_identity`, `gpu_tokens`), from one walk over its GPUs."""
    environment = result.get("environment") if isinstance(result, Mapping) else None
    gpus = environment.get("gpus") if isinstance(environment, Mapping) else None
    units = []
    for g in gpus or ():
        if isinstance(g, Mapping):
            found = g.get("mig")
            mig: Mapping[str, object] = found if isinstance(found, Mapping) else {}
            uuid = unit_uuid(g.get("uuid"), mig.get("parentUuid"), mig.get("profile"))
            units.append((uuid, g.get("serial")))
    return gpu_identity(units), gpu_tokens(units)


def changed_gpus(before: Sequence[str] | None, now: Sequence[str] | None) -> str:
    """Which GPUs differ between two runs' tokens, as a person reads it ("GPU 3", "GPUs 0, 5",
    "4 GPUs, now 8"); "" when either run's tokens are unknown or none differs."""
    if not before or not now:
        return ""
    if len(before) != len(now):
        return f"{len(before)} GPUs, now {len(now)}"
    moved = [str(i) for i, (old, new) in enumerate(zip(before, now, strict=True)) if old != new]
    if not moved:
        return ""
    return f"GPU {moved[0]}" if len(moved) == 1 else f"GPUs {', '.join(moved)}"


def since_gpus_changed(identities: Sequence[str | None], current: str | None) -> int:
    """How many of a node's entries (oldest first, each with its GPUs' identity) came before its
    GPUs changed to `current`: those are set aside. An entry without an identity (written before
    gpuval recorded one) is not counted as other GPUs."""
    if current is None:
        return 0
    return max(
        (index + 1 for index, known in enumerate(identities) if known and known != current),
        default=0,
    )


def entry(
    run: str,
    completed_at: str | None,
    summary: Mapping[str, object],
    fabric_pair_gbps: float | None = None,
    gpu_identity: str | None = None,
    *,
    gpu_tokens: Sequence[str] | None = None,
) -> HistoryEntry:
    """A run's key figures from a report's status.summary (and the node's lowest fabric pair),
    and which GPUs measured them."""
    figures: dict[str, object] = {
        figure.key: round(float(value), figure.digits)
        for figure in registry.history_figures()
        if isinstance(value := summary.get(figure.key), int | float) and not isinstance(value, bool)
    }
    if fabric_pair_gbps is not None:
        # The node's lowest fabric pair: the one key figure a report's summary does not hold.
        figures[registry.FABRIC_PAIR.key] = round(fabric_pair_gbps, registry.FABRIC_PAIR.digits)
    tokens = list(gpu_tokens) if gpu_tokens else None
    stamp = {
        "run": run,
        "completedAt": completed_at,
        "gpuIdentity": gpu_identity,
        "gpuTokens": tokens,
    }
    return HistoryEntry.model_validate({**stamp, **figures})


def entry_of_result(run: str, result: AgentResult) -> HistoryEntry:
    """A run's key figures from an agent's result document."""
    completed = result.completed_at.strftime("%Y-%m-%dT%H:%M:%SZ")
    pairs = result_units(result.environment.gpus)
    return entry(
        run,
        completed,
        build_summary(result),
        gpu_identity=gpu_identity(pairs),
        gpu_tokens=gpu_tokens(pairs),
    )


def value(record: HistoryEntry, figure: str) -> float | None:
    found = record.model_dump(by_alias=True).get(figure)
    return float(found) if isinstance(found, int | float) else None


def next_history(
    history: Sequence[HistoryEntry], latest: HistoryEntry, runs: int
) -> list[HistoryEntry]:
    """The history the node's next report carries: the last `runs` runs on its GPUs, oldest
    first (a run already in it is replaced, so a retried run counts once; the runs before its
    GPUs changed are set aside)."""
    kept = [h for h in history if h.run != latest.run]
    kept = kept[since_gpus_changed([h.gpu_identity for h in kept], latest.gpu_identity) :]
    kept.append(latest)
    return kept[-runs:] if runs > 0 else []


@dataclass(frozen=True, slots=True)
class Drift:
    """One key figure that fell against the node's own kept runs."""

    figure: str
    value: float
    median: float
    runs: int
    fraction: float
    severity: Severity

    @property
    def ratio(self) -> float:
        """Below 1: worse than the node's median (for a figure better lower, the inverse)."""
        figure = registry.by_key(self.figure)
        return figure.ratio(self.value, self.median) if figure else self.value / self.median

    @property
    def message(self) -> str:
        figure = registry.by_key(self.figure)
        unit = figure.unit if figure is not None else ""
        said = f"{self.figure} {self.value:.1f} {unit} is "
        runs = f"this node's median {self.median:.1f} over its last {self.runs} runs"
        if figure is not None and figure.lower:
            limit = figure.limit(self.median, self.fraction)
            return (
                f"{said}above {limit:.1f}, the most {runs} allows (lower is better: at most "
                f"{1 + self.fraction:.2f} of it"
                + (f" + {figure.tolerance:g} {unit}" if figure.tolerance else "")
                + f"; drift fraction {self.fraction:g})"
            )
        return (
            f"{said}{self.ratio:.2f} of {runs} (below {1 - self.fraction:.2f} "
            f"of it: drift fraction {self.fraction:g})"
        )


def drift(
    history: Sequence[HistoryEntry], current: HistoryEntry, settings: HistorySettings
) -> list[Drift]:
    """The key figures of `current` below (1 - driftFraction) x their median (above (1 +
    driftFraction) x it plus the tolerance, where lower is better) over the last
    `settings.runs` entries of `history` (runs before `current` on the same GPUs; at least
    MIN_RUNS with the figure). A warning, or an error when history.action is Fail."""
    if settings.runs <= 0:
        return []
    past = [h for h in history if h.run != current.run]
    past = past[since_gpus_changed([h.gpu_identity for h in past], current.gpu_identity) :]
    past = past[-settings.runs :]
    severity = Severity.ERROR if settings.action is DriftAction.FAIL else Severity.WARNING
    found = []
    for figure in registry.history_figures():
        now = value(current, figure.key)
        earlier = [v for h in past if (v := value(h, figure.key)) is not None]
        if now is None or len(earlier) < MIN_RUNS:
            continue
        median = statistics.median(earlier)
        # Where higher is better a median of 0 is no reference; where lower is better it is the
        # best one (a count the node never had), and a value above it by the tolerance drifts.
        if (median > 0 or figure.lower) and figure.worse(now, median, settings.drift_fraction):
            found.append(
                Drift(figure.key, now, median, len(earlier), settings.drift_fraction, severity)
            )
    return found
