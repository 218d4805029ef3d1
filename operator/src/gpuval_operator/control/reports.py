"""Creating a run's GpuNodeReports: the first wave's at once, the rest in the background.

A node's agent pod may start only once its report exists (the agent writes to it), so a node is
`planned` when its report is created. At 10,000 nodes the reports alone take a minute to create;
the first wave's pods should not wait for the last wave's reports. What the run does once its
reports exist (pruning the earlier runs' children) follows them in the same background task.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from gpuval_api import keys
from gpuval_api.crd import GpuValidationSpec
from gpuval_operator import planning
from gpuval_operator.run.effects import Effects
from gpuval_operator.run.state import RunState

# The node's history its report carries (spec.baseline): gpuval_operator.control.baseline.driver.
HistoryOf = Callable[[RunState, str], Sequence[Mapping[str, Any]]]


class ReportPlanner:
    def __init__(
        self, effects: Effects, on_planned: Callable[[], None], history: HistoryOf | None = None
    ) -> None:
        self.effects = effects
        self.on_planned = on_planned
        self.history = history
        self._task: asyncio.Task[None] | None = None

    async def create(
        self, run: RunState, candidates: list[planning.Candidate], concurrency: int | None = None
    ) -> None:
        async def one(candidate: planning.Candidate) -> None:
            carried = self.history(run, candidate.name) if self.history is not None else ()
            if await self.effects.create_report(run, candidate, carried):
                record = run.nodes.get(candidate.name)
                if record is not None:
                    record.planned = True
                    self.on_planned()

        await self.effects.bounded((one(c) for c in candidates), concurrency)

    def in_background(
        self,
        run: RunState,
        candidates: list[planning.Candidate],
        then: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """Create the candidates' reports behind the first wave, then run `then`."""

        async def plan() -> None:
            # A quarter of the create width, so the waves' pods are not queued behind reports
            # that are needed only when later waves start.
            width = max(1, self.effects.config.create_concurrency // 4)
            await self.create(run, candidates, concurrency=width)
            await self.effects.mark_planned(run.run_id)
            if then is not None:
                await then()

        self._task = asyncio.create_task(plan(), name=f"{self.effects.name}-plan")

    @property
    def busy(self) -> bool:
        return self._task is not None and not self._task.done()

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def ensure(
        self, run: RunState, spec: GpuValidationSpec, annotations: dict[str, str]
    ) -> None:
        """After a restart mid-creation, create the reports that a crash left out."""
        if annotations.get(keys.ANNOTATION_PLANNED_RUN) == run.run_id or self.busy:
            return
        candidates = await self.effects.list_candidates(spec)
        run.add_candidates(candidates)
        self.in_background(run, [c for c in candidates if not run.nodes[c.name].planned])
