"""The training phase (fabric.train), after the all-reduce phases and in the same pods: fresh rank
processes with the training step's deterministic settings, the group's data-parallel run (every GPU
of every node, gradients all-reduced over the fabric), then the pair rounds of `pair_rounds(world)`
(each pair its own data-parallel run), then one confirmation round chosen by `confirmation_pairs`
from the training pairs, alike on every node. As in the all-reduce phases, every phase's reports are
gathered to every node, and a phase that failed anywhere is followed by fresh rank processes
everywhere. Each phase has fabric.train.timeoutSeconds (the rank processes' start-up has
fabric.timeouts.initSeconds within it).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from gpuval_agent.fabric.analysis import PairRecord
from gpuval_agent.fabric.steps import Executor, StepReport, StepStatus
from gpuval_agent.fabric.trainanalysis import (
    TrainPhase,
    group_train_record,
    train_floor,
    train_pair_record,
    train_plan,
)
from gpuval_agent.training import TrainPlan
from gpuval_api.fabric import pair_rounds
from gpuval_api.fabric.isolation import confirmation_pairs, find_suspects
from gpuval_api.fabric.train import FabricTrain, FabricTrainPair


class Phases(Protocol):
    """What the training phase needs of the node's session (gpuval_agent.fabric.driver.Session)."""

    executor: Executor
    names: list[str]
    gpus: list[int]
    generation: int
    init: float

    def exchange(
        self, step: str, report: StepReport, timeout: float | None = None
    ) -> list[StepReport]: ...

    def watched(self, phase: Callable[[], StepReport]) -> StepReport: ...


class TrainRounds:
    def __init__(
        self, session: Phases, config: FabricTrain, infos: Sequence[Mapping[str, Any]]
    ) -> None:
        self.session, self.config = session, config
        self.plan: TrainPlan = train_plan(config, infos)
        self.infos = infos
        self.limit = float(config.timeout_seconds)

    def _fresh(self, end: float) -> StepReport:
        """New rank processes with the deterministic settings, in a new world."""
        session = self.session
        session.executor.stop_ranks()
        session.generation += 1
        return session.executor.start(
            session.generation, min(end, time.monotonic() + session.init), training=True
        )

    def _exchange(self, step: str, phase: Callable[[], StepReport]) -> list[StepReport]:
        session = self.session
        return session.exchange(step, session.watched(phase), session.init + self.limit)

    def group_phase(self) -> TrainPhase:
        def steps() -> StepReport:
            end = time.monotonic() + self.limit
            report = self._fresh(end)
            return self.session.executor.train(self.plan, end) if report.ok else report

        reports = self._exchange("train", steps)
        names = self.session.names
        return TrainPhase(group_train_record(reports, names, self.plan, self.infos))

    def one_round(
        self, number: int, pairs: list[tuple[int, int]], restart: bool
    ) -> tuple[list[PairRecord[FabricTrainPair]], bool]:
        """The round's training pairs, and whether any node failed in it (fresh ranks next)."""

        def steps() -> StepReport:
            end = time.monotonic() + self.limit
            report = self._fresh(end) if restart else StepReport()
            if not report.ok:
                return report
            return self.session.executor.train_pairs(number, pairs, self.plan, end)

        reports = self._exchange(f"train-round{number}", steps)
        session = self.session
        records = [
            train_pair_record(number, p, reports=reports, nodes=session.names, gpus=session.gpus)
            for p in pairs
        ]
        return records, not all(r.ok for r in reports)

    def pair_phases(self, phase: TrainPhase) -> None:
        restart = phase.group.status is not StepStatus.OK
        for number, pairs in enumerate(pair_rounds(len(self.session.names)), start=1):
            found, restart = self.one_round(number, pairs, restart)
            phase.pairs += found
        floor = train_floor(self.config, phase.pairs)
        measured = [p.pair for p in phase.pairs]
        chosen = confirmation_pairs(find_suspects(measured, floor), measured)
        if chosen:
            rank = {name: index for index, name in enumerate(self.session.names)}
            found, _ = self.one_round(0, [(rank[a], rank[b]) for a, b in chosen], restart)
            phase.pairs += found


def run_training(
    session: Phases, config: FabricTrain, infos: Sequence[Mapping[str, Any]]
) -> TrainPhase:
    """The whole training phase of this node (module docstring)."""
    rounds = TrainRounds(session, config, infos)
    phase = rounds.group_phase()
    rounds.pair_phases(phase)
    return phase
