"""What every check shares: its context, and a builder that turns findings into a CheckResult."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol

from gpuval_agent.backends.base import Backend, BurnProgress
from gpuval_agent.inuse import Busy
from gpuval_agent.parts import PartFigures, expected_for, mig_share
from gpuval_agent.record import RunRecord
from gpuval_agent.state.model import Reading
from gpuval_agent.telemetry import Sampler
from gpuval_agent.watch import InUseWatch
from gpuval_api import REASONS, Reason, Severity, Verdict, verdict_of
from gpuval_api.checks import ChecksConfig
from gpuval_api.mig import MigShare, unit_name
from gpuval_api.result import (
    BurnFingerprint,
    CheckResult,
    Environment,
    Finding,
    GpuCheckResult,
    GpuInfo,
    NcclSize,
    PairResult,
)
from gpuval_api.training import TrainingRecord


class Reporter(Protocol):
    """Receives progress while checks run (the CLI display, the live metrics)."""

    def check_started(self, name: str, expected_seconds: float | None) -> None: ...

    def check_progress(self, name: str, fraction: float | None, detail: str) -> None: ...

    def burn_progress(self, progress: BurnProgress) -> None: ...

    def check_finished(self, result: CheckResult) -> None: ...


@dataclass
class CheckContext:
    backend: Backend
    config: ChecksConfig
    environment: Environment
    part: PartFigures
    sampler: Sampler
    reporter: Reporter
    expected_gpus: int | None = None
    expected_gpus_source: str = ""
    stop: threading.Event = field(default_factory=threading.Event)
    # GPUs an earlier layer found broken (e.g. CUDA did not initialise): GPU index -> why. The
    # checks that load GPUs leave them out and say so, instead of failing on them again.
    excluded: dict[int, str] = field(default_factory=dict)
    # The watch over other processes on the GPUs (None: nothing watches), and the GPUs it found
    # busy as the current load check started: that check leaves them out.
    watch: InUseWatch | None = None
    busy: dict[int, Busy] = field(default_factory=dict)
    # What the run keeps beyond its result (the state readings, for the evidence bundle), and
    # who hears of each state reading (the live metrics).
    record: RunRecord = field(default_factory=RunRecord)
    on_reading: Callable[[Reading], None] | None = None
    # The UUIDs the node published and the pod was given that NVML does not show (GpuMissing).
    missing_devices: list[str] = field(default_factory=list)

    @property
    def gpus(self) -> list[int]:
        """Every GPU NVML shows."""
        return [gpu.index for gpu in self.environment.gpus]

    @property
    def usable_gpus(self) -> list[int]:
        """The GPUs the load checks (burn, bandwidth, NCCL) run on: not excluded by an earlier
        layer, not used by another process as the check starts."""
        return [gpu for gpu in self.gpus if gpu not in self.excluded and gpu not in self.busy]

    def note_excluded(self, builder: CheckBuilder) -> None:
        """One CheckSkipped warning per GPU an earlier layer excluded, naming the GPU and why."""
        for gpu, why in sorted(self.excluded.items()):
            builder.add(Reason.CHECK_SKIPPED, f"{self.unit(gpu)} skipped: {why}", gpu=gpu)

    def uuid(self, gpu: int) -> str | None:
        return next((g.uuid for g in self.environment.gpus if g.index == gpu), None)

    @property
    def on_mig(self) -> bool:
        """The units under test are MIG instances (MIG mode on, the agent given MIG devices)."""
        return any(g.mig is not None for g in self.environment.gpus)

    def part_for(self, gpu: int) -> PartFigures:
        """The figures `gpu` should reach: the part's, or a MIG instance's share of them."""
        info = next((g for g in self.environment.gpus if g.index == gpu), None)
        return self.part if info is None else expected_for(self.part, info)

    def share_for(self, gpu: int) -> MigShare:
        """What share of a whole GPU the unit is: all of it, or a MIG instance's share."""
        info = next((g for g in self.environment.gpus if g.index == gpu), None)
        share = None if info is None else mig_share(self.part, info)
        return share or MigShare(compute=1.0, memory=1.0)

    def units(self, gpus: list[int] | None = None) -> str:
        """`units_text` of `gpus` (unit indices; None: every unit)."""
        chosen = self.environment.gpus
        return units_text([g for g in chosen if gpus is None or g.index in gpus])

    def unit(self, gpu: int) -> str:
        """How a message names a unit: 'GPU 3', or a MIG instance by its profile and parent GPU
        ('MIG 1g.18gb instance 6 of GPU 0': the agent's unit index is no GPU's)."""
        info = next((g for g in self.environment.gpus if g.index == gpu), None)
        if info is None or info.mig is None:
            return unit_name(gpu)
        return unit_name(gpu, info.mig.profile, info.mig.parent_index)


def units_text(gpus: list[GpuInfo]) -> str:
    """The units as a message counts them: '8 GPUs', '7 MIG instances', or on a node with some
    GPUs whole and some in MIG mode '7 GPUs and 7 MIG instances' (never '14 MIG instances')."""
    instances = sum(1 for g in gpus if g.mig is not None)
    whole = len(gpus) - instances
    counted = [(whole, "GPU"), (instances, "MIG instance")]
    parts = [f"{n} {what}{'s' if n != 1 else ''}" for n, what in counted if n]
    return " and ".join(parts) or "0 GPUs"


def scaled_note(absolute: float | None, share: float) -> str:
    """What a message adds where an absolute minimum was scaled to a MIG instance's share."""
    if absolute is None or share >= 1:
        return ""
    return f"; its absolute {absolute:g} is a whole GPU's, held at this MIG instance's {share:.3g}"


class CheckBuilder:
    """Collects one check's findings and figures; `finish()` decides the verdicts."""

    def __init__(self, name: str, context: CheckContext | None = None) -> None:
        self.name = name
        self._context = context
        self.started_at = datetime.now(UTC)
        self._start = time.monotonic()
        self.findings: list[Finding] = []
        self.metrics: dict[str, float] = {}
        self._gpu_metrics: dict[int, dict[str, float]] = {}
        self.pairs: list[PairResult] = []
        self.nccl_sizes: list[NcclSize] = []
        self.fingerprints: list[BurnFingerprint] = []
        self.training: TrainingRecord | None = None
        self.log_tail: str | None = None
        self.not_read: list[str] = []

    def add(
        self,
        reason: Reason,
        message: str,
        gpu: int | None = None,
        peer: int | None = None,
        severity: Severity | None = None,
    ) -> None:
        info = REASONS[reason]
        self.findings.append(
            Finding(
                reason=reason,
                severity=severity or info.severity,
                gpu=gpu,
                peer=peer,
                message=message,
                hint=info.hint,
            )
        )

    def gpu_metric(self, gpu: int, key: str, value: float | None) -> None:
        if value is not None:
            self._gpu_metrics.setdefault(gpu, {})[key] = round(value, 4)

    def gpu_metrics(self, gpu: int) -> dict[str, float]:
        return self._gpu_metrics.get(gpu, {})

    @property
    def failed(self) -> bool:
        return any(f.severity is Severity.ERROR for f in self.findings)

    def finish(self, message: str = "", verdict: Verdict | None = None) -> CheckResult:
        judged, first = judge_findings(self.findings)
        if verdict is None:
            verdict = judged
        gpus: list[GpuCheckResult] = []
        for index in sorted(self._gpu_metrics):
            gpu_verdict, gpu_first = judge_findings(
                [f for f in self.findings if index in (f.gpu, f.peer)]
            )
            gpus.append(
                GpuCheckResult(
                    index=index,
                    uuid=self._context.uuid(index) if self._context else None,
                    verdict=gpu_verdict,
                    reason=gpu_first.reason if gpu_first else None,
                    metrics=self._gpu_metrics[index],
                )
            )
        if not message:
            message = first.message if first else "passed"
        return CheckResult(
            name=self.name,
            verdict=verdict,
            reason=first.reason if first else None,
            hint=first.hint if first else None,
            message=message,
            started_at=self.started_at,
            elapsed_seconds=round(time.monotonic() - self._start, 3),
            metrics=self.metrics,
            gpus=gpus,
            pairs=self.pairs,
            nccl_sizes=self.nccl_sizes,
            fingerprints=self.fingerprints,
            training=self.training,
            findings=self.findings,
            not_read=self.not_read,
            log_tail=self.log_tail,
        )


def judge_findings(findings: list[Finding]) -> tuple[Verdict, Finding | None]:
    """A check's (or one GPU's) verdict from its findings, and the finding that decides it:
    Failed on evidence against the GPU, NotRun when the only errors say it was not tested
    (GpuInUse), else Passed (warnings do not count)."""
    errors = [f for f in findings if f.severity is Severity.ERROR]
    failing = [f for f in errors if verdict_of(f.reason) is Verdict.FAILED]
    if failing:
        return Verdict.FAILED, failing[0]
    if errors:
        return Verdict.NOT_RUN, errors[0]
    return Verdict.PASSED, None


def skipped(name: str, why: str) -> CheckResult:
    """A check that did not run because an earlier failure made it meaningless."""
    builder = CheckBuilder(name)
    builder.add(Reason.CHECK_SKIPPED, why)
    return builder.finish(message=f"skipped: {why}", verdict=Verdict.SKIPPED)


def not_applicable(name: str, why: str) -> CheckResult:
    """A check that does not apply to the units the agent was given (e.g. NCCL between MIG
    instances): skipped, saying why by name (NotApplicable)."""
    builder = CheckBuilder(name)
    builder.add(Reason.NOT_APPLICABLE, why)
    result = builder.finish(message=f"not applicable: {why}", verdict=Verdict.SKIPPED)
    # Said by name on the result too, not only in its findings: a reader of the check's line
    # sees why it did not run.
    result.reason, result.hint = Reason.NOT_APPLICABLE, REASONS[Reason.NOT_APPLICABLE].hint
    return result


def version_tuple(text: str) -> tuple[int, ...]:
    """'12.4' -> (12, 4); non-numeric parts end the tuple ('13.0.1-rc' -> (13, 0))."""
    parts: list[int] = []
    for piece in text.split("."):
        digits = ""
        for char in piece:
            if not char.isdigit():
                break
            digits += char
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)
