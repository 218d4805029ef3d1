"""Pure: a node's own history and DriftFromHistory.

Each node keeps its last N runs' key figures (`HistoryEntry`: the worst GPU's figures of
status.summary and its lowest fabric pair, about 230 bytes as JSON) in the `spec.history` of the
GpuNodeReport the operator creates for its next run: the operator already holds each node's
summary, so carrying it forward costs no extra object and no extra write, and it survives the
pruning of old reports (each report holds the chain). A figure below (1 - driftFraction) x the
median of the kept runs (at least MIN_RUNS of them) is a drift: a slow decline that stays near the
fleet median is seen while it is still above it.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpuval_api import figures as registry
from gpuval_api.baselinemodel import DriftAction, HistoryEntry, HistorySettings
from gpuval_api.reasons import Severity
from gpuval_api.report import build_summary
from gpuval_api.result import AgentResult

# The registry's history figures, by key, in reading order.
KEY_FIGURES: tuple[str, ...] = tuple(f.key for f in registry.history_figures())
MIN_RUNS = 3


def entry(
    run: str,
    completed_at: str | None,
    summary: Mapping[str, object],
    fabric_pair_gbps: float | None = None,
) -> HistoryEntry:
    """A run's key figures from a report's status.summary (and the node's lowest fabric pair)."""
    figures: dict[str, object] = {
        figure.key: round(float(value), figure.digits)
        for figure in registry.history_figures()
        if isinstance(value := summary.get(figure.key), int | float) and not isinstance(value, bool)
    }
    if fabric_pair_gbps is not None:
        # The node's lowest fabric pair: the one key figure a report's summary does not hold.
        figures[registry.FABRIC_PAIR.key] = round(fabric_pair_gbps, registry.FABRIC_PAIR.digits)
    return HistoryEntry.model_validate({"run": run, "completedAt": completed_at, **figures})


def entry_of_result(run: str, result: AgentResult) -> HistoryEntry:
    """A run's key figures from an agent's result document."""
    completed = result.completed_at.strftime("%Y-%m-%dT%H:%M:%SZ")
    return entry(run, completed, build_summary(result))


def value(record: HistoryEntry, figure: str) -> float | None:
    found = record.model_dump(by_alias=True).get(figure)
    return float(found) if isinstance(found, int | float) else None


def next_history(
    history: Sequence[HistoryEntry], latest: HistoryEntry, runs: int
) -> list[HistoryEntry]:
    """The history the node's next report carries: the last `runs` runs, oldest first (a run
    already in it is replaced, so a retried run counts once)."""
    kept = [h for h in history if h.run != latest.run] + [latest]
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
        return (
            f"{self.figure} {self.value:.1f} {unit} is {self.ratio:.2f} of this node's median "
            f"{self.median:.1f} over its last {self.runs} runs (below {1 - self.fraction:.2f} "
            f"of it: drift fraction {self.fraction:g})"
        )


def drift(
    history: Sequence[HistoryEntry], current: HistoryEntry, settings: HistorySettings
) -> list[Drift]:
    """The key figures of `current` below (1 - driftFraction) x their median over the last
    `settings.runs` entries of `history` (runs before `current`; at least MIN_RUNS with the
    figure). A warning, or an error when history.action is Fail."""
    if settings.runs <= 0:
        return []
    past = [h for h in history if h.run != current.run][-settings.runs :]
    severity = Severity.ERROR if settings.action is DriftAction.FAIL else Severity.WARNING
    found = []
    for figure in registry.history_figures():
        now = value(current, figure.key)
        earlier = [v for h in past if (v := value(h, figure.key)) is not None]
        if now is None or len(earlier) < MIN_RUNS:
            continue
        median = statistics.median(earlier)
        if median > 0 and figure.ratio(now, median) < 1 - settings.drift_fraction:
            found.append(
                Drift(figure.key, now, median, len(earlier), settings.drift_fraction, severity)
            )
    return found
