"""A run's start: its number and id, the nodes it takes (the node watch's candidates, or a list of
its own; a proof-expired run only the due nodes, stalest first), the new `RunState`, the run id
persisted before any child exists, the RunStarted Event, the first wave's reports at once and the
rest in the background, then the earlier runs pruned. `ValidationController` decides when a run
starts; `RunStarter` carries the start out. The run's number and the Event's words are pure
(`next_run_number`, `started_message`)."""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from gpuval_api import EventReason
from gpuval_api.crd import GpuValidationSpec, RunTrigger
from gpuval_operator import planning
from gpuval_operator.control.baseline.driver import BaselineDriver
from gpuval_operator.control.fleetstatus import FleetStatus
from gpuval_operator.control.reports import ReportPlanner
from gpuval_operator.kube.client import ApiError
from gpuval_operator.names import run_number
from gpuval_operator.nodes.watch import NodeWatch
from gpuval_operator.readmodel.validation import ValidationState
from gpuval_operator.run.effects import Effects
from gpuval_operator.run.state import RunState

log = logging.getLogger(__name__)
# How long a run's start waits for the node watch's first list before listing the nodes itself.
CANDIDATES_WAIT_SECONDS = 60.0


def next_run_number(
    previous: RunState | None, run_ids: Iterable[str], status: Mapping[str, Any]
) -> int:
    """One past the highest number known: the last run's, its children's run ids', the status's."""
    return 1 + max(
        [previous.number if previous else 0]
        + [run_number(r) for r in run_ids]
        + [int((status.get("run") or {}).get("number") or 0)]
    )


def started_message(
    run_id: str, trigger: RunTrigger, candidates: int, without_devices: tuple[str, ...] | None
) -> str:
    """The RunStarted Event's words: the nodes it started on, and those publishing no device."""
    missing = len(without_devices or ())
    message = f"run {run_id} ({trigger}) started on {candidates} nodes"
    if missing:
        message += (
            f" of {candidates + missing} selected: "
            f"{missing} publish"
            f"{'es' if missing == 1 else ''} no device (condition "
            "DevicesPublished)"
        )
    return message


class RunStarter:
    def __init__(
        self,
        *,
        name: str,
        state: ValidationState,
        effects: Effects,
        node_watch: NodeWatch,
        baseline: BaselineDriver,
        reports: ReportPlanner,
        fleet: FleetStatus,
        status: Callable[[], Mapping[str, Any]],
        generation: Callable[[], int],
        write_status: Callable[..., Awaitable[None]],
        mark_invalid: Callable[[list[str], int], Awaitable[None]],
    ) -> None:
        self.name = name
        self.state = state
        self.effects = effects
        self.node_watch = node_watch
        self.baseline = baseline
        self.reports = reports
        self.fleet = fleet
        self._status = status
        self._generation = generation
        self._write_status = write_status
        self._mark_invalid = mark_invalid

    async def start(self, spec: GpuValidationSpec, trigger: RunTrigger) -> None:
        previous = self.state.run
        number = next_run_number(previous, self.state.run_ids, self._status())
        run_id = f"{number}-{secrets.token_hex(2)}"
        try:
            # The node watch lists the selected nodes anyway: a second list of 10,000 nodes would
            # hold back the first wave by tens of seconds on a busy API server.
            candidates = await self.node_watch.candidates(CANDIDATES_WAIT_SECONDS)
            if candidates is None:
                candidates = await self.effects.list_candidates(spec, self.node_watch.dra)
        except ApiError as exc:
            if exc.status != 400:
                raise
            query = spec.node_selector.to_query() if spec.node_selector else ""
            await self._mark_invalid(
                [f"spec.nodeSelector={query!r}: the API server refused it: {exc}"],
                self._generation(),
            )
            return
        if trigger is RunTrigger.PROOF_EXPIRED:
            candidates = self.fleet.stale_first(spec, candidates)
            if not candidates:
                self.fleet.rest_after_empty_proof_run()
                return
        run = RunState(
            validation=self.name,
            run_id=run_id,
            number=number,
            generation=self._generation(),
            trigger=trigger,
            started_at=time.time(),
        )
        run.add_candidates(candidates)
        run.without_devices = self.node_watch.without_devices()
        run.gating = spec.gating is not None
        run.note_checks(spec.checks)
        # The repair loop spans runs: its status stays until its next pass.
        run.remediation = previous.remediation if previous is not None else None
        run.repair_requests = previous.repair_requests if previous is not None else None
        if spec.fabric is not None:
            run.expect_fabric()
        self.state.begin(run)
        await self.baseline.prepare(run, spec.baseline)
        # The run id is persisted before any child exists, so a restart resumes this run instead of
        # starting one.
        await self._write_status(force=True)
        message = started_message(run_id, trigger, len(candidates), run.without_devices)
        await self.effects.event(EventReason.RUN_STARTED, message)
        log.info("%s: %s", self.name, message)
        # The first wave's reports first, the rest while the first wave runs: at 10,000 nodes the
        # reports alone take a minute to create, and the first pods should not wait for them.
        # The earlier runs' pods and reports are pruned after this run's reports exist: deleting
        # 10,000 pods keeps the API server busy for minutes (docs/operator/architecture.md, "How it
        # is built").
        limit = planning.concurrency_limit(spec.max_concurrent, len(candidates))
        await self.reports.create(run, candidates[:limit])
        self.reports.in_background(
            run, candidates[limit:], then=lambda: self._prune(run, spec.history)
        )

    async def _prune(self, run: RunState, history: int) -> None:
        """Earlier runs' pods, and their reports beyond `history`; what fails now is pruned by
        the next run (it deletes every earlier run's children, not only the last one's)."""
        try:
            await self.effects.prune(run, history, self.state.run_ids, claims=self.node_watch.dra)
        except ApiError as exc:
            log.warning("%s: earlier runs not pruned: %s", self.name, exc)
