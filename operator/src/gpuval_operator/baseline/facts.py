"""Pure: what the operator keeps of a report for baselines and history, a few hundred bytes per
node and never as pydantic models (at 10,000 nodes x 5 runs pydantic entries cost 64 MiB, these
arrays 7 MiB: docs/operator/baselines.md, "Baselines and history").

- `Comparison`: the node's comparison with its baseline as its agent recorded it
  (`result.baseline`): the baseline's name, whether the key matched exactly, and each judged
  figure's ratio to the centre and whether it was below the floor;
- `History`: the node's key figures in its kept runs (its report's `spec.history`) and, once its
  verdict is in, in this run (`status.summary` and its lowest fabric pair), oldest first: what
  the node's next report carries, what DriftFromHistory compares, what the metrics plot. Runs on
  GPUs the node no longer has (its GPUs replaced: another GPU identity) are set aside when its
  verdict is in: new GPUs start a new history.
"""

from __future__ import annotations

import math
import statistics
import sys
from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuval_api.baseline.history import KEY_FIGURES, changed_gpus, since_gpus_changed
from gpuval_api.baseline.samples import fabric_samples
from gpuval_api.baselinecomparison import Match
from gpuval_api.baselinemodel import HistoryEntry
from gpuval_api.fabric import FabricPair
from gpuval_api.figures import FABRIC_PAIR, history_figures
from gpuval_operator.timestamps import parse_time, rfc3339

# The run id and completion time of a history entry, as HistoryEntry spells them.
_RUN = HistoryEntry.model_fields["run"].alias or "run"
_COMPLETED = HistoryEntry.model_fields["completed_at"].alias or "completed_at"
_GPUS = HistoryEntry.model_fields["gpu_identity"].alias or "gpu_identity"
_TOKENS = HistoryEntry.model_fields["gpu_tokens"].alias or "gpu_tokens"
NAN = math.nan

# Identical tuples of figure names shared across nodes (a fleet has a handful of them).
_FIGURE_SETS: dict[tuple[str, ...], tuple[str, ...]] = {}


def _shared(names: tuple[str, ...]) -> tuple[str, ...]:
    return _FIGURE_SETS.setdefault(names, names)


@dataclass(frozen=True, slots=True)
class Comparison:
    """A node's judged figures against the baseline its agent chose (see the module doc)."""

    name: str
    exact: bool  # the baseline's key is the node's (else: same GPU, per-GPU figures only)
    figures: tuple[str, ...]  # judged figures with a ratio, in reading order
    ratios: array[float]  # float32, one per figure: how its worst value stands to the centre
    below: int  # bit i set: figures[i] had a value below the floor

    @classmethod
    def parse(cls, result: object) -> Comparison | None:
        """From an agent's result document; None when it compared with no baseline."""
        document = result.get("baseline") if isinstance(result, Mapping) else None
        if not isinstance(document, Mapping) or not isinstance(document.get("name"), str):
            return None
        names: list[str] = []
        ratios = array("f")
        below = 0
        for entry in document.get("figures") or ():
            if not isinstance(entry, Mapping) or not entry.get("judged"):
                continue
            ratio, figure = entry.get("ratio"), entry.get("figure")
            if not isinstance(ratio, int | float) or not isinstance(figure, str):
                continue
            if isinstance(entry.get("below"), int) and entry["below"] > 0:
                below |= 1 << len(names)
            names.append(sys.intern(figure))
            ratios.append(float(ratio))
        return cls(
            name=sys.intern(str(document["name"])),
            exact=document.get("match") == Match.EXACT,
            figures=_shared(tuple(names)),
            ratios=ratios,
            below=below,
        )

    def entries(self) -> Iterable[tuple[str, float, bool]]:
        """(figure, ratio, below) of each judged figure."""
        for index, figure in enumerate(self.figures):
            # Rounded as the agent rounds it (the float32 kept is not exact).
            yield figure, round(self.ratios[index], 4), bool(self.below >> index & 1)

    @property
    def is_below(self) -> bool:
        return self.below != 0

    def worst(self) -> tuple[str, float] | None:
        """The judged figure furthest below its centre, and its ratio."""
        found = min(self.entries(), key=lambda e: e[1], default=None)
        return None if found is None else (found[0], found[1])


def lowest_pair(node: str, pairs: Sequence[FabricPair]) -> float | None:
    """The node's lowest fabric pair busbw (pair rounds, the node at one end), GB/s."""
    return min((s.value for s in fabric_samples(node, pairs, "")), default=None)


def _float(value: object) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else NAN


def _worst(count: int, values: array[float]) -> tuple[str, float] | None:
    """The key figure of the last of `count` entries furthest below its median over the
    earlier ones (above it, where lower is better), and its ratio to that median (below 1
    worse, as `Figure.ratio` says)."""
    width, last = len(KEY_FIGURES), count - 1
    found: tuple[str, float] | None = None
    for index, figure in enumerate(history_figures()):
        now = values[last * width + index]
        earlier = [v for e in range(last) if not math.isnan(v := values[e * width + index])]
        if math.isnan(now) or not earlier:
            continue
        median = statistics.median(earlier)
        if median <= 0 and not figure.lower:
            continue  # no reference; where lower is better a median of 0 is the best one
        ratio = round(figure.ratio(now, median), 4)  # a tie goes to the figure read first
        if found is None or ratio < found[1]:
            found = (figure.key, ratio)
    return found


@dataclass(frozen=True, slots=True)
class History:
    """A node's key figures over its runs, oldest first (see the module doc)."""

    run: str  # the report's run
    runs: tuple[str, ...]
    times: array[float]  # float64: completion, epoch seconds (NaN: unknown)
    values: array[float]  # float32: len(runs) x len(KEY_FIGURES), NaN where not measured
    current: bool  # the last entry is the report's own run, whose verdict is in
    # The key figure furthest below the median of the earlier runs, and its ratio (with a
    # current run and at least one earlier one): what the metrics export at every scrape.
    worst: tuple[str, float] | None = None
    # The identity of the GPUs its runs were measured on ("" where none is known).
    gpus: str = ""
    # When this run found other GPUs than its kept runs had: their identity and how many runs
    # were set aside (the history starts again from this run).
    restarted: tuple[str, int] | None = None
    # Each GPU's token (gpuval_api.baseline.history.gpu_tokens) of the chain's GPUs, joined by
    # commas, and when restarted, which of the earlier GPUs changed ("GPU 3"; "" when unknown).
    tokens: str = ""
    changed: str = ""

    @classmethod
    def of_report(
        cls,
        carried: object,
        *,
        run: str,
        completed_at: float | None,
        summary: Mapping[str, float] | None,
        fabric_pair: float | None = None,
        gpus: str | None = None,
        tokens: str = "",
    ) -> History:
        """A report's chain: its `spec.history` (`carried`) and, with a `summary` (its verdict
        is in, measured on the GPUs of identity `gpus`, each GPU's token in `tokens`, joined by
        commas), its own run as the last entry; the runs before its GPUs changed set aside."""
        runs: list[str] = []
        times = array("d")
        values = array("f")
        identities: list[str | None] = []
        carried_tokens: list[Sequence[str] | None] = []
        for raw in carried if isinstance(carried, list) else ():
            if not isinstance(raw, Mapping) or not isinstance(raw.get(_RUN), str):
                continue
            if raw[_RUN] == run:
                continue  # a run repeats only when its report was made again: this one counts
            runs.append(sys.intern(raw[_RUN]))
            stamp = raw.get(_COMPLETED)
            times.append(parse_time(stamp if isinstance(stamp, str) else None) or NAN)
            values.extend(_float(raw.get(key)) for key in KEY_FIGURES)
            known = raw.get(_GPUS)
            identities.append(known if isinstance(known, str) and known else None)
            listed = raw.get(_TOKENS)
            carried_tokens.append(listed if isinstance(listed, list) else None)
        restarted, changed = None, ""
        if summary is not None:
            aside = since_gpus_changed(identities, gpus)
            if aside:
                restarted = (identities[aside - 1] or "", aside)
                changed = changed_gpus(
                    carried_tokens[aside - 1], tokens.split(",") if tokens else None
                )
                del runs[:aside], times[:aside], values[: aside * len(KEY_FIGURES)]
                del identities[:aside]
            runs.append(sys.intern(run))
            times.append(NAN if completed_at is None else completed_at)
            own = {**summary, FABRIC_PAIR.key: NAN if fabric_pair is None else fabric_pair}
            values.extend(_float(own.get(key)) for key in KEY_FIGURES)
            identities.append(gpus)
        current = summary is not None
        worst = _worst(len(runs), values) if current else None
        identity = next((i for i in reversed(identities) if i), "")
        if summary is None or not tokens:
            # The report's own string is kept as it is (no copy a node); else the last known.
            tokens = ",".join(next((t for t in reversed(carried_tokens) if t), ()))
        return cls(
            sys.intern(run),
            tuple(runs),
            times,
            values,
            current,
            worst,
            identity,
            restarted,
            tokens,
            changed,
        )

    def value(self, entry: int, figure: int) -> float:
        return float(self.values[entry * len(KEY_FIGURES) + figure])

    def entry(self, index: int) -> dict[str, Any]:
        """One entry as `spec.history` holds it (HistoryEntry's JSON)."""
        stamp = self.times[index]
        found: dict[str, Any] = {
            _RUN: self.runs[index],
            _COMPLETED: None if math.isnan(stamp) else rfc3339(stamp),
            _GPUS: self.gpus or None,  # the chain's runs are all of its GPUs (or unknown)
            _TOKENS: self.tokens.split(",") if self.tokens else None,
        }
        for position, key in enumerate(KEY_FIGURES):
            value = self.value(index, position)
            if not math.isnan(value):
                found[key] = round(value, 3)
        return {k: v for k, v in found.items() if v is not None}

    def carried(self, runs: int) -> list[dict[str, Any]]:
        """The `spec.history` of the node's next report: its last `runs` runs, oldest first."""
        count = len(self.runs)
        return [self.entry(i) for i in range(max(0, count - runs), count)] if runs > 0 else []

    def split(self) -> tuple[list[HistoryEntry], HistoryEntry] | None:
        """(the earlier runs, this run) as HistoryEntry models for the drift rule; None before
        the verdict is in."""
        if not self.current:
            return None
        models = [HistoryEntry.model_validate(self.entry(i)) for i in range(len(self.runs))]
        return models[:-1], models[-1]
