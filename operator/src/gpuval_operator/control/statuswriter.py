"""Writing a GpuValidation's status: throttled to one JSON merge patch per interval while a run
goes on (as the Job controller does), at once at a run's start and end, and the conditions'
lastTransitionTime carried from one write to the next (gpuval_operator.run.rollup builds the body).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from gpuval_operator.run import rollup
from gpuval_operator.run.effects import Effects
from gpuval_operator.run.state import RunState


class StatusWriter:
    def __init__(
        self, effects: Effects, interval: float, conditions: Sequence[dict[str, Any]]
    ) -> None:
        self.effects = effects
        self.interval = interval
        self.conditions: list[dict[str, Any]] = list(conditions)
        self.last_write = 0.0
        # status.proof (spec.maxProofAgeSeconds), kept current by the controller; None: off.
        self.proof: dict[str, Any] | None = None
        # status.capacity (healthy capacity), kept current by the controller; None: not counted.
        self.capacity: dict[str, Any] | None = None

    async def run(self, run: RunState, *, force: bool = False) -> bool:
        """Write the run's status if forced, or if it is behind and the interval has passed; True
        when written."""
        mono = time.monotonic()
        if not force and (not run.dirty or mono - self.last_write < self.interval):
            return False
        status = rollup.build_run_status(run, previous_conditions=self.conditions, now=time.time())
        status["proof"] = self.proof
        if self.capacity is not None:
            status["capacity"] = self.capacity
        # Cleared before the write: a change that arrives while it is under way is written next.
        run.dirty = False
        try:
            await self._patch(status)
        except BaseException:
            run.dirty = True
            raise
        self.last_write = mono
        return True

    async def soon(self, run: RunState) -> bool:
        """Write the status of a run that is behind once the interval has passed (waiting out its
        rest): for a finished run nothing else writes it (spec.remediation's passes change it
        between runs); True when written."""
        if not run.dirty:
            return False
        rest = self.interval - (time.monotonic() - self.last_write)
        if rest > 0:
            await asyncio.sleep(rest)
        return await self.run(run)

    async def invalid(self, errors: list[str], generation: int) -> None:
        status = rollup.build_invalid_status(
            errors, generation=generation, previous_conditions=self.conditions, now=time.time()
        )
        await self._patch(status)

    async def _patch(self, status: dict[str, Any]) -> None:
        await self.effects.patch_status(status)
        self.conditions = status.get("conditions") or self.conditions
