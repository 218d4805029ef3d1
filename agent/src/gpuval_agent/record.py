"""What a run keeps beyond its result document: the state readings and the counters that grew,
for the evidence bundle of a failing node (gpuval_agent.evidence)."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuval_agent.state.model import Reading


@dataclass(frozen=True, slots=True)
class Growth:
    """An error counter that grew while a load check ran."""

    check: str
    counter: str
    delta: int
    before: int
    after: int


@dataclass(slots=True)
class RunRecord:
    readings: list[Reading] = field(default_factory=list)
    growth: list[Growth] = field(default_factory=list)
    counters: list[tuple[str, dict[str, int]]] = field(default_factory=list)
    # Readings that failed (a label and why): their comparison is missing, not clean.
    missed: list[str] = field(default_factory=list)
