"""What the operator knows of one GpuValidation, shared by its controller and read by the metrics at
scrape time without locks (one event loop writes, the scrape reads a consistent-enough view): the
current run, each node's latest tested verdict and figures, the nodes gpuval could not test, the
fabric's latest settled verdicts, and the times and uniformity of the last run.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuval_api import ConditionType, Reason, Verdict
from gpuval_api.training import NodeLosses
from gpuval_operator.baseline.facts import Comparison, History
from gpuval_operator.capacity import CapacitySummary
from gpuval_operator.fabric.facts import FabricFacts
from gpuval_operator.names import run_number
from gpuval_operator.proofage import ProofSummary
from gpuval_operator.remediation.figures import RepairFigures
from gpuval_operator.run.facts import Fingerprint, ReportFacts
from gpuval_operator.run.state import RunState
from gpuval_operator.run.statefacts import StateFacts
from gpuval_operator.timestamps import parse_time


@dataclass(slots=True)
class NodeResult:
    """A node's latest completed verdict, kept for metrics and uniformity."""

    run: str
    verdict: Verdict
    reason: Reason | None
    completed_at: float | None
    summary: dict[str, float]
    environment: dict[str, str]
    gpu_figures: tuple[tuple[int, str, float], ...]
    failed_checks: tuple[tuple[str, str], ...] = ()
    failed_gpus: int = 0
    fingerprints: tuple[Fingerprint, ...] = ()
    training: NodeLosses | None = None
    state: StateFacts | None = None
    comparison: Comparison | None = None

    @property
    def passed(self) -> bool:
        return self.verdict is Verdict.PASSED

    @classmethod
    def of(cls, report: ReportFacts) -> NodeResult:
        return cls(
            run=report.run,
            verdict=report.verdict or Verdict.FAILED,
            reason=report.reason,
            completed_at=report.completed_at,
            summary=report.summary,
            environment=report.environment,
            gpu_figures=report.gpu_figures,
            failed_checks=report.failed_checks,
            failed_gpus=report.failed_gpus,
            fingerprints=report.fingerprints,
            training=report.training,
            state=report.state,
            comparison=report.comparison,
        )


@dataclass(slots=True)
class Untested:
    """A node whose latest attempt was NotRun, since when, and why (metrics; its alert)."""

    reason: str
    since: float


@dataclass(slots=True)
class FabricNode:
    """A node's latest settled fabric verdict (metrics; the fabric alert)."""

    run: str
    verdict: Verdict
    reason: Reason | None


@dataclass(slots=True)
class ValidationState:
    """What the metrics and the controller share about one GpuValidation."""

    name: str
    run: RunState | None = None
    # The latest tested verdict (Passed or Failed) of each node: the failure metrics and alerts.
    latest: dict[str, NodeResult] = field(default_factory=dict)
    # Nodes whose latest attempt was NotRun, kept apart: never a failure.
    untested: dict[str, Untested] = field(default_factory=dict)
    run_ids: set[str] = field(default_factory=set)
    invalid: bool = False
    # The generation whose invalid spec was last reported (condition, Event), so it is said once.
    invalid_generation: int | None = None
    uniform: bool | None = None
    outliers: int = 0
    last_run_started: float | None = None
    last_run_completed: float | None = None
    last_success: float | None = None
    # The fabric: each node's latest settled verdict, and the groups' busbw (GB/s) of the latest
    # run that has settled ones.
    fabric_nodes: dict[str, FabricNode] = field(default_factory=dict)
    fabric_run: str = ""
    fabric_groups: dict[str, float] = field(default_factory=dict)
    # With spec.baseline: each node's key figures over its kept runs, from its latest report
    # (compact arrays, never models: gpuval_operator.baseline.facts).
    keeps_history: bool = False
    history: dict[str, History] = field(default_factory=dict)
    # spec.remediation: the repair loop's requests, outcomes and times (across runs).
    repairs: RepairFigures = field(default_factory=RepairFigures)
    # spec.maxProofAgeSeconds: the selected nodes against the age, as the controller last saw.
    proof: ProofSummary | None = None
    # Healthy capacity: the selected GPUs and nodes by state, as the controller last saw.
    capacity: CapacitySummary | None = None

    def failed_gpus(self) -> dict[str, int]:
        """Node -> GPUs its latest failed report names (healthy capacity's failed GPUs)."""
        return {n: r.failed_gpus for n, r in list(self.latest.items()) if not r.passed}

    def begin(self, run: RunState) -> None:
        """A run starts: the one place where what belongs to a run is reset. The run brings its
        own state (a fresh RunState); of the validation's, an invalid spec reported before is
        forgotten, so it is reported again should it come back."""
        self.run = run
        self.last_run_started = run.started_at
        self.invalid_generation = None

    def restore(self, status: Mapping[str, Any]) -> None:
        """After a restart: the last run's times and uniformity, as the status recorded them."""
        info = status.get("run") or {}
        self.last_run_started = parse_time(info.get("startedAt")) or 0.0
        last = status.get("lastCompletedRun") or {}
        self.last_run_completed = parse_time(last.get("completedAt"))
        conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
        if conditions.get(ConditionType.UNIFORM) in ("True", "False"):
            self.uniform = conditions[ConditionType.UNIFORM] == "True"
            omitted = int(status.get("outliersOmitted") or 0)
            self.outliers = len(status.get("outliers") or []) + omitted
        if conditions.get(ConditionType.SUCCEEDED) == "True":
            self.last_success = self.last_run_completed

    def remember(self, report: ReportFacts) -> None:
        """A completed report: tested verdicts (the failure metrics) and NotRun kept apart."""
        known = self.latest.get(report.node)
        newer = known is None or run_number(report.run) >= run_number(known.run)
        if report.tested and newer:
            self.latest[report.node] = NodeResult.of(report)
            self.untested.pop(report.node, None)
        elif not report.tested and report.node not in self.untested:
            since = report.completed_at or time.time()
            self.untested[report.node] = Untested(str(report.reason or ""), since)

    def fabric_settled(self, report: ReportFacts) -> bool:
        """The report's fabric verdict is settled: the operator rewrote it (classified), or it is
        of the current run whose groups were compared (the operator leaves a pass its agent
        wrote as it is), or of a completed run read back after a restart."""
        fabric, run = report.fabric, self.run
        if fabric is None or fabric.verdict is None:
            return False
        if fabric.classified:
            return True
        if run is None or run.run_id != report.run:
            return False
        return run.fabric is None or run.fabric.classified

    def remember_fabric(self, report: ReportFacts) -> None:
        """A settled fabric verdict (the metrics' fabric series)."""
        if report.fabric is not None:
            self.settle_fabric(report.run, report.node, report.fabric)

    def settle_fabric(self, run: str, node: str, fabric: FabricFacts) -> None:
        """A node's settled fabric verdict in `run`, from its report as it stands."""
        if fabric.verdict is None:
            return
        known = self.fabric_nodes.get(node)
        if known is None or run_number(run) >= run_number(known.run):
            self.fabric_nodes[node] = FabricNode(run, fabric.verdict, fabric.reason)
        if fabric.busbw is None or run_number(run) < run_number(self.fabric_run):
            return
        if run != self.fabric_run:
            self.fabric_run, self.fabric_groups = run, {}
        self.fabric_groups[fabric.group] = fabric.busbw

    def remember_history(self, report: ReportFacts) -> None:
        """The node's chain from its latest report: a later run's report (its spec.history, and
        its own figures once its verdict is in) or the same report with its verdict in."""
        if not self.keeps_history or not report.node:
            return
        known = self.history.get(report.node)
        if known is not None:
            later = run_number(report.run) - run_number(known.run)
            if later < 0 or (later == 0 and known.current and not report.tested):
                return
        chain = report.history()
        if not chain.current and known is not None and known.worst is not None:
            # Until the node's verdict of the later run is in, the metrics keep its last ratio.
            chain = dataclasses.replace(chain, worst=known.worst)
        self.history[report.node] = chain
