"""The facts of a run's agent reports: what the operator keeps of each watched report (of each
pod: gpuval_operator.podfacts).

Pods and reports arrive as whole objects (tens of KiB with the agent's result document); they are
cut down here to the few fields the decisions and the metrics need and dropped. (A view is what a
person sees, gpuval_api.views; what the operator keeps of an object is its facts.) A report is
read once, by `ReportFacts.parse`, for both the run's status and the metrics. Pure and
synchronous.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from gpuval_api import Reason, Verdict, figures, keys
from gpuval_api.baseline.history import result_gpus
from gpuval_api.checks import CheckName
from gpuval_api.crd import OUTLIER_VALUE_LENGTH
from gpuval_api.mig import mig_layout
from gpuval_api.report import (
    FailureKey,
    ReportPhase,
    StatusKey,
    read_reason,
    read_verdict,
)
from gpuval_api.training import NodeLosses, TrainingRecord
from gpuval_api.views import ENVIRONMENT_FIELDS
from gpuval_operator.baseline.facts import Comparison, History, lowest_pair
from gpuval_operator.fabric.facts import FabricFacts
from gpuval_operator.run.statefacts import StateFacts
from gpuval_operator.timestamps import parse_time

# Environment fields compared across nodes for uniformity, in output order: the ones
# kubectl gpuval and the report show.
UNIFORMITY_FIELDS = ENVIRONMENT_FIELDS

# Figures of the report summary exported per node, from the registry (gpuval_api.figures):
# summary key -> (metric suffix, factor to base units).
SUMMARY_FIGURES: dict[str, tuple[str, float]] = {
    f.key: (f.prometheus, f.factor) for f in figures.summary_figures()
}

# Per-GPU figures (check, metric key in the result document) -> (metric suffix, factor).
GPU_FIGURES: dict[tuple[str, str], tuple[str, float]] = {
    (f.check, f.metric): (f.prometheus, f.factor) for f in figures.all_figures() if f.per_gpu_metric
}


def _capped(value: Any) -> str:
    """A value copied from an agent into the status, interned and cut to a bounded length."""
    return sys.intern(str(value)[:OUTLIER_VALUE_LENGTH])


def _distinct(values: list[Any]) -> str | None:
    present = sorted(
        {str(v).lower() if isinstance(v, bool) else str(v) for v in values if v is not None}
    )
    return ",".join(present) if present else None


def _mig_layout(gpus: list[Any]) -> str | None:
    """The node's MIG devices as one string ('7x1g.18gb'); None where the agent tested no MIG
    device (a fleet without MIG compares nothing more than before)."""
    profiles = [
        str((g.get("mig") or {}).get("profile"))
        for g in gpus
        if isinstance(g, Mapping) and (g.get("mig") or {}).get("profile")
    ]
    return mig_layout(profiles) if profiles else None


def environment_fingerprint(result: Mapping[str, Any] | None) -> dict[str, str]:
    """The uniformity fields of an agent result document (docs/contracts.md), absent ones left
    out.

    Per-GPU fields (model, VBIOS, modes) become the node's distinct values joined by ',' so a node
    with mixed GPUs differs from a uniform one. Strings are interned (10,000 nodes share a handful
    of versions) and cut to a bounded length (the status copies them).
    """
    if not result:
        return {}
    env = result.get("environment") or {}
    gpus = env.get("gpus") or []
    raw: dict[str, str | None] = {
        "driverVersion": env.get("driverVersion"),
        "cudaDriverVersion": env.get("cudaDriverVersion"),
        "ncclVersion": env.get("ncclVersion"),
        "gpuProduct": _distinct([g.get("name") for g in gpus]),
        "gpuCount": str(env["gpuCount"]) if env.get("gpuCount") is not None else None,
        "vbios": _distinct([g.get("vbios") for g in gpus]),
        "kernel": env.get("kernel"),
        "eccEnabled": _distinct([g.get("eccEnabled") for g in gpus]),
        "migMode": _distinct([g.get("migMode") for g in gpus]),
        "migLayout": _mig_layout(gpus),
        "persistenceMode": _distinct([g.get("persistenceMode") for g in gpus]),
    }
    return {k: _capped(v) for k, v in raw.items() if v is not None}


def failed_checks(failures: Any) -> tuple[tuple[str, str], ...]:
    """(check, reason) of every distinct failure a report lists, in report order.

    A node's headline reason is its first failure only; the burn alert must still fire when a
    node fails an earlier check (health, say) and its burn as well.
    """
    if not isinstance(failures, list):
        return ()
    seen: dict[tuple[str, str], None] = {}
    for entry in failures:
        if isinstance(entry, Mapping):
            check, reason = entry.get(FailureKey.CHECK), entry.get(FailureKey.REASON)
            if isinstance(check, str) and isinstance(reason, str):
                seen.setdefault((sys.intern(check), sys.intern(reason)), None)
    return tuple(seen)


def failed_gpus(failures: Any) -> int:
    """How many distinct GPUs (by index) a report's failures name (0: none named)."""
    if not isinstance(failures, list):
        return 0
    found = {e.get(FailureKey.GPU) for e in failures if isinstance(e, Mapping)}
    return sum(1 for g in found if isinstance(g, int) and not isinstance(g, bool))


def gpu_figures(result: Mapping[str, Any] | None) -> tuple[tuple[int, str, float], ...]:
    """(gpu index, metric suffix, value in base units) for each per-GPU figure of a result
    document.
    """
    if not result:
        return ()
    out: list[tuple[int, str, float]] = []
    for check in result.get("checks") or []:
        for gpu in check.get("gpus") or []:
            for key, value in (gpu.get("metrics") or {}).items():
                figure = GPU_FIGURES.get((check.get("name", ""), key))
                if figure is not None and isinstance(value, int | float):
                    out.append((int(gpu.get("index", -1)), figure[0], float(value) * figure[1]))
    return tuple(out)


Fingerprint = tuple[str, str, str]  # (precision, determinants, value)


def burn_fingerprints(result: Mapping[str, Any] | None) -> tuple[Fingerprint, ...]:
    """One burn reference fingerprint per precision for the node: the value most of its GPUs
    agree on (a GPU that disagrees with the others of its node already failed on the agent)."""
    if not result:
        return ()
    seen: dict[tuple[str, str], Counter[str]] = {}
    for check in result.get("checks") or []:
        if check.get("name") != CheckName.BURN:
            continue
        for entry in check.get("fingerprints") or []:
            precision, determinants = entry.get("precision"), entry.get("determinants")
            value = entry.get("value")
            if isinstance(precision, str) and isinstance(determinants, str) and value:
                key = (sys.intern(precision), sys.intern(determinants[:256]))
                seen.setdefault(key, Counter())[str(value)[:64]] += 1
    return tuple(
        (precision, determinants, counts.most_common(1)[0][0])
        for (precision, determinants), counts in sorted(seen.items())
    )


def training_losses(result: Mapping[str, Any] | None) -> NodeLosses | None:
    """The training check's losses with their experiment and stack, the sequence shared with
    every node that computed the same (gpuval_api.training.intern_losses): at 10,000 nodes one
    copy per distinct sequence, a digest and two interned keys per node."""
    if not result:
        return None
    for check in result.get("checks") or []:
        if check.get("name") != CheckName.TRAIN or not isinstance(check.get("training"), Mapping):
            continue
        try:
            return NodeLosses.of(TrainingRecord.model_validate(check["training"]))
        except ValidationError:
            return None  # a record this version cannot read compares with nothing
    return None


@dataclass(slots=True)
class ReportFacts:
    name: str
    node: str
    run: str
    phase: str
    verdict: Verdict | None
    reason: Reason | None
    message: str
    completed_at: float | None
    gpus: int | None
    summary: dict[str, float]
    environment: dict[str, str]
    gpu_figures: tuple[tuple[int, str, float], ...]
    failed_checks: tuple[tuple[str, str], ...] = ()
    # GPUs its failures name (0: none named): healthy capacity's failed and withheld GPUs.
    failed_gpus: int = 0
    fingerprints: tuple[Fingerprint, ...] = ()
    training: NodeLosses | None = None
    fabric: FabricFacts | None = None
    state: StateFacts | None = None  # the state check's, for the metrics
    # The agent's comparison with its baseline (result.baseline), and spec.history as written
    # (read into a History only for a validation that keeps one: `history()`).
    comparison: Comparison | None = None
    carried: list[Any] | None = None
    # The identity of the GPUs it was measured on (gpuval_api.baseline.history.gpu_identity).
    gpu_identity: str | None = None
    # Each of those GPUs' token, in index order (gpuval_api.baseline.history.gpu_tokens), joined
    # by commas: one small string a node.
    gpu_tokens: str = ""

    def history(self) -> History:
        """The node's key figures over its kept runs and, once its verdict is in, this one."""
        tested = self.completed and self.tested
        pair = lowest_pair(self.node, self.fabric.pairs) if self.fabric is not None else None
        return History.of_report(
            self.carried,
            run=self.run,
            completed_at=self.completed_at,
            summary=self.summary if tested else None,
            fabric_pair=pair,
            gpus=self.gpu_identity,
            tokens=self.gpu_tokens,
        )

    @property
    def completed(self) -> bool:
        return self.phase == ReportPhase.COMPLETED and self.verdict is not None

    @property
    def passed(self) -> bool:
        return self.verdict is Verdict.PASSED

    @property
    def started(self) -> bool:
        """The agent began (it writes Running first), whatever came of it."""
        return self.phase in (ReportPhase.RUNNING, ReportPhase.COMPLETED)

    @property
    def failing(self) -> bool:
        """It lists failures (a Running report too: what the agent found before it ended)."""
        return bool(self.failed_checks)

    @property
    def tested(self) -> bool:
        """A verdict with evidence either way (not NotRun)."""
        return self.verdict in (Verdict.PASSED, Verdict.FAILED)

    @classmethod
    def parse(cls, report: Mapping[str, Any], *, per_gpu: bool = False) -> ReportFacts:
        meta = report.get("metadata") or {}
        spec = report.get("spec") or {}
        status = report.get("status") or {}
        annotations = meta.get("annotations") or {}
        summary = status.get(StatusKey.SUMMARY) or {}
        result = status.get(StatusKey.RESULT)
        fabric = status.get(StatusKey.FABRIC)
        gpus = annotations.get(keys.ANNOTATION_GPUS, "")
        identity, tokens = result_gpus(result)
        return cls(
            name=meta.get("name", ""),
            node=spec.get("node", ""),
            run=spec.get("run", ""),
            phase=status.get(StatusKey.PHASE) or ReportPhase.PENDING,
            verdict=read_verdict(status.get(StatusKey.VERDICT)),
            reason=read_reason(status.get(StatusKey.REASON)),
            message=(status.get(StatusKey.MESSAGE) or "")[:300],
            completed_at=parse_time(status.get(StatusKey.COMPLETED_AT)),
            gpus=int(gpus) if gpus.isdigit() else None,
            summary={
                k: float(v)
                for k, v in summary.items()
                if k in SUMMARY_FIGURES and isinstance(v, int | float)
            },
            environment=environment_fingerprint(result),
            gpu_figures=gpu_figures(result) if per_gpu else (),
            failed_checks=failed_checks(status.get(StatusKey.FAILURES)),
            failed_gpus=failed_gpus(status.get(StatusKey.FAILURES)),
            fingerprints=burn_fingerprints(result),
            training=training_losses(result),
            fabric=FabricFacts.parse(fabric) if isinstance(fabric, Mapping) else None,
            state=StateFacts.parse(result),
            comparison=Comparison.parse(result),
            carried=spec.get("history") or None,
            gpu_identity=identity,
            gpu_tokens=",".join(tokens or ()),
        )
