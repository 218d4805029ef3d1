"""What one run keeps of its baselines (`RunState.baseline`, with spec.baseline): the GpuBaselines
listed when it started and what the agents are given, the nodes it named DriftFromHistory, the
baselines it learned, and its `status.baseline` once it completes. Pure and synchronous: the
decisions are gpuval_operator.baseline.judge's, the calls gpuval_operator.control.baseline.driver's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuval_api import ConditionReason
from gpuval_api.baseline.rules import Candidate
from gpuval_api.baselinemodel import BaselineMode, BaselineRunStatus, BaselineSettings
from gpuval_api.crd import ConditionStatus


@dataclass(frozen=True, slots=True)
class DriftNote:
    """A node named DriftFromHistory in this run: its key figure furthest below its past."""

    figure: str
    ratio: float
    failed: bool
    message: str


@dataclass(slots=True)
class RunBaselines:
    settings: BaselineSettings
    # The GpuBaselines the agents are given, in order of preference (the agent takes the first
    # whose key matches), and every GpuBaseline of the cluster (learning skips their keys).
    candidates: list[Candidate]
    existing: list[Candidate]
    # spec.baseline.names that name no GpuBaseline.
    missing: tuple[str, ...] = ()
    # The agents' environment per GPU product label ("" where a node has none), made once.
    env: dict[str, list[dict[str, str]]] = field(default_factory=dict)
    drifting: dict[str, DriftNote] = field(default_factory=dict)
    # Nodes whose history this run started again (their GPUs were replaced), said once each:
    # what was said (status.baseline.historyRestarted).
    restarted: dict[str, str] = field(default_factory=dict)
    learned: list[str] = field(default_factory=list)
    # Why a key was not learned, a named baseline missing: status.baseline.note.
    notes: list[str] = field(default_factory=list)
    # GPU stacks learning found in two modes, as said (status.baseline.bimodal).
    bimodal: list[str] = field(default_factory=list)
    learning_done: bool = False
    # status.baseline, once the run completed (None while it goes on).
    status: BaselineRunStatus | None = None

    @property
    def judging(self) -> bool:
        """The baseline rule applies (mode Learn or Use); mode Off keeps only the history."""
        return self.settings.mode is not BaselineMode.OFF

    def spec_of(self, name: str) -> Candidate | None:
        return next((c for c in self.candidates if c[0] == name), None)

    def bimodal_condition(self) -> tuple[ConditionStatus, ConditionReason, str] | None:
        """Bimodal: True when learning found a GPU stack in two modes (status.baseline.bimodal),
        and learned nothing for it until a person chooses; absent otherwise."""
        said = self.status.bimodal if self.status is not None else []
        if not said:
            return None
        return ConditionStatus.TRUE, ConditionReason.NOT_LEARNED_BIMODAL, "; ".join(said)

    def condition(self, completed: bool) -> tuple[ConditionStatus, ConditionReason, str]:
        """WithinBaseline: Unknown until the run completes, when no node was judged or with mode
        Off (said as such, not as a baseline missing), False
        when a figure is systemic (the stack, not the nodes), else True."""
        status = self.status
        if not self.judging:
            return (
                ConditionStatus.UNKNOWN,
                ConditionReason.BASELINE_OFF,
                "spec.baseline.mode is Off: no figure is judged against a GpuBaseline (the nodes' "
                "own history is still kept and compared)",
            )
        if not completed or status is None:
            return (
                ConditionStatus.UNKNOWN,
                ConditionReason.NOT_COMPARED,
                "compared when the run completes",
            )
        if status.judged == 0:
            learned = f"; learned {', '.join(status.learned)}" if status.learned else ""
            why = status.note or "no GpuBaseline matched a node's GPU stack"
            return ConditionStatus.UNKNOWN, ConditionReason.NO_BASELINE, f"{why}{learned}"
        if status.systemic:
            first = status.systemic[0]
            more = len(status.systemic) - 1
            also = f" (and {more} more figures)" if more else ""
            return (
                ConditionStatus.FALSE,
                ConditionReason.SYSTEMIC_BELOW_BASELINE,
                f"{first.figure}: {first.message}{also}",
            )
        return (
            ConditionStatus.TRUE,
            ConditionReason.WITHIN_BASELINE,
            f"{status.below} of {status.judged} judged nodes below their baseline; no figure "
            "is below on most of them",
        )
