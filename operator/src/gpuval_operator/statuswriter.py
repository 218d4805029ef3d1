"""Writing a GpuValidation's status: throttled to one JSON merge patch per interval while a run
goes on (as the Job controller does), at once at a run's start and end, and the conditions'
lastTransitionTime carried from one write to the next (gpuval_operator.rollup builds the body).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from gpuval_operator import rollup
from gpuval_operator.effects import Effects
from gpuval_operator.state import RunState
from gpuval_operator.uniformity import Outlier


class StatusWriter:
    def __init__(
        self, effects: Effects, interval: float, conditions: Sequence[dict[str, Any]]
    ) -> None:
        self.effects = effects
        self.interval = interval
        self.conditions: list[dict[str, Any]] = list(conditions)
        self.last_write = 0.0

    async def run(
        self,
        run: RunState,
        *,
        outliers: Sequence[Outlier] | None,
        next_run_at: float | None,
        dirty: bool,
        force: bool = False,
        dry_run: Mapping[str, str] | None = None,
    ) -> bool:
        """Write the run's status if forced, or changed and the interval has passed; True when
        written."""
        mono = time.monotonic()
        if not force and (not dirty or mono - self.last_write < self.interval):
            return False
        status = rollup.build_run_status(
            run,
            generation=run.generation,
            previous_conditions=self.conditions,
            outliers=outliers,
            now=time.time(),
            next_run_at=next_run_at,
            dry_run=dry_run,
        )
        await self._patch(status)
        self.last_write = mono
        return True

    async def invalid(self, errors: list[str], generation: int) -> None:
        status = rollup.build_invalid_status(
            errors, generation=generation, previous_conditions=self.conditions, now=time.time()
        )
        await self._patch(status)

    async def _patch(self, status: dict[str, Any]) -> None:
        await self.effects.patch_status(status)
        self.conditions = status.get("conditions") or self.conditions
