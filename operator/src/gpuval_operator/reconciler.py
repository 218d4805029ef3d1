"""The controller of one GpuValidation: runs, waves of agent pods, verdicts, status, node
actions.

kopf starts one `ValidationController.run` per GpuValidation (a daemon). It follows the validation's
reports and pods with one list+watch each (`children.Follower`), keeps a compact `RunState`, and
loops about once a second (or at once when a child changes): fail nodes whose pods failed or timed
out, start pods for the next nodes within the concurrency limit, apply node actions to nodes with a
new verdict, and write the status at most once a second and at once when the run completes.

Restart safety: the run id is written to the status before any child is created, children have
deterministic names (a repeated create gets 409), the annotation gpuval.dev/planned-run records that
every report of the run exists, and on start the controller rebuilds the run from the status, the
reports and the pods.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from gpuval_api.crd import GROUP, REPORT_PLURAL, VERSION, GpuValidationSpec
from gpuval_api.reasons import Reason
from gpuval_api.report import build_operator_failure_status
from gpuval_operator import cron, events, names, planning, rollup
from gpuval_operator.children import Follower
from gpuval_operator.config import OperatorConfig
from gpuval_operator.kube import ApiError, KubeClient, ResourceExpiredError, q
from gpuval_operator.nodeactions import plan_node_patch
from gpuval_operator.state import (
    Failure,
    NodeRecord,
    NodeResult,
    Phase,
    PodView,
    ReportView,
    RunState,
    due_failures,
    parse_time,
    run_number,
)
from gpuval_operator.uniformity import Outlier, expected_values, find_outliers
from gpuval_operator.validation import parse_spec

log = logging.getLogger(__name__)

VALIDATIONS_PATH = f"/apis/{GROUP}/{VERSION}/gpuvalidations"
REPORTS_PATH = f"/apis/{GROUP}/{VERSION}/{REPORT_PLURAL}"


@dataclass(slots=True)
class ValidationState:
    """What the metrics and the controller share about one GpuValidation."""

    name: str
    run: RunState | None = None
    latest: dict[str, NodeResult] = field(default_factory=dict)
    run_ids: set[str] = field(default_factory=set)
    invalid: bool = False
    uniform: bool | None = None
    outliers: int = 0
    last_run_started: float | None = None
    last_run_completed: float | None = None
    last_success: float | None = None


class Registry(dict[str, ValidationState]):
    """Validation name -> state; read by the metrics collector at scrape time."""


@dataclass(slots=True)
class Context:
    client: KubeClient
    config: OperatorConfig
    registry: Registry


def _rfc3339(epoch: float) -> str:
    return rollup.rfc3339(epoch)


class SupersededError(Exception):
    """The spec changed (or the object went away) while a run was going on."""


class ValidationController:
    def __init__(
        self,
        ctx: Context,
        *,
        name: str,
        uid: str,
        body: Mapping[str, Any],
        stopped: Callable[[], bool],
    ) -> None:
        self.ctx = ctx
        self.client = ctx.client
        self.config = ctx.config
        self.name = name
        self.uid = uid
        self.body = body  # kopf's live view: metadata.generation and spec follow the object
        self.stopped = stopped
        self.state = ctx.registry.setdefault(name, ValidationState(name))
        self.wake = asyncio.Event()
        self.conditions: list[dict[str, Any]] = list(
            (self._status().get("conditions") or []) if self._status() else []
        )
        self.last_write = 0.0
        self.dirty = False
        self.next_run_at: float | None = parse_time(self._status().get("nextRunAt"))
        self.events_posted = 0
        self.outliers: list[Outlier] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._planning: asyncio.Task[None] | None = None
        self._listed_pods: set[str] = set()
        self.selector = f"{names.LABEL_VALIDATION}={names.label_value(name)}"
        self.invalid_generation: int | None = None

    # -- object access --

    def _status(self) -> dict[str, Any]:
        return dict(self.body.get("status") or {})

    def generation(self) -> int:
        return int((self.body.get("metadata") or {}).get("generation") or 1)

    def _owner(self) -> dict[str, Any]:
        return {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "GpuValidation",
            "name": self.name,
            "uid": self.uid,
        }

    @property
    def pods_path(self) -> str:
        return f"/api/v1/namespaces/{q(self.config.agent_namespace)}/pods"

    # -- children --

    def _on_report(self, obj: dict[str, Any], deleted: bool = False) -> None:
        view = ReportView.parse(obj, per_gpu=self.config.metrics_per_gpu)
        if not view.node:
            return
        if deleted:
            return
        self.state.run_ids.add(view.run)
        if view.completed:
            known = self.state.latest.get(view.node)
            if known is None or run_number(view.run) >= run_number(known.run):
                self.state.latest[view.node] = NodeResult.of(view)
        run = self.state.run
        if run is not None and run.apply_report(view):
            self.dirty = True
            self.wake.set()

    def _on_reports_page(self, items: list[dict[str, Any]], first: bool, last: bool) -> None:
        for obj in items:
            self._on_report(obj)

    def _on_report_event(self, kind: str, obj: dict[str, Any]) -> None:
        self._on_report(obj, deleted=kind == "DELETED")

    def _on_pod(self, kind: str, obj: dict[str, Any]) -> None:
        run = self.state.run
        if run is None:
            return
        view = PodView.parse(obj)
        if kind == "DELETED":
            run.apply_pod_deleted(view)
        else:
            run.apply_pod(view, time.monotonic())
        self.dirty = True
        self.wake.set()

    def _on_pods_page(self, items: list[dict[str, Any]], first: bool, last: bool) -> None:
        run = self.state.run
        if run is None:
            return
        if first:
            self._listed_pods = set()
        for obj in items:
            view = PodView.parse(obj)
            self._listed_pods.add(view.name)
            run.apply_pod(view, time.monotonic())
        if last:
            # A pod that vanished while the watch was down is a deletion we did not see.
            for record in run.nodes.values():
                if (
                    record.phase is Phase.RUNNING
                    and record.pod_seen
                    and record.pod not in self._listed_pods
                ):
                    record.pod_gone = not record.deleted_by_us
            self._listed_pods = set()
        self.wake.set()

    async def _relist_pods(self) -> None:
        first = True
        async for items, _, last in self.client.pages(self.pods_path, self.selector):
            self._on_pods_page(items, first, last)
            first = False

    def _start_followers(self) -> tuple[Follower, Follower]:
        reports = Follower(
            self.client,
            REPORTS_PATH,
            self.selector,
            self._on_reports_page,
            self._on_report_event,
            name=f"{self.name}/reports",
        )
        pods = Follower(
            self.client,
            self.pods_path,
            self.selector,
            self._on_pods_page,
            self._on_pod,
            name=f"{self.name}/pods",
        )
        self._tasks = [
            asyncio.create_task(reports.run(), name=f"{self.name}-reports"),
            asyncio.create_task(pods.run(), name=f"{self.name}-pods"),
        ]
        return reports, pods

    async def _sleep(self, seconds: float) -> None:
        """Sleep until `seconds` pass, a child changes, or the daemon is told to stop."""
        self.wake.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.wake.wait(), timeout=max(0.0, seconds))

    async def _wait(self, until: Callable[[], bool], poll: float = 1.0) -> None:
        while not self.stopped() and not until():
            await self._sleep(poll)

    # -- main loop --

    async def run(self) -> None:
        reports, pods = self._start_followers()
        try:
            await self._wait(reports.synced.is_set, 0.2)
            run = self._resume()
            if run is not None:
                # The followers listed before the run existed; apply its reports, then its pods,
                # again.
                async for items, _, _ in self.client.pages(
                    REPORTS_PATH, f"{self.selector},{names.LABEL_RUN}={run.run_id}"
                ):
                    for obj in items:
                        self._on_report(obj)
            if run is not None and run.completed_at is not None:
                run.finished.clear()
            elif run is not None:
                await self._wait(pods.synced.is_set, 0.2)
                await self._relist_pods()
            while not self.stopped():
                try:
                    await self._step()
                except SupersededError:
                    continue
                except ApiError as exc:
                    log.warning("%s: API error: %s; retrying", self.name, exc)
                    await self._sleep(5)
                except Exception:
                    # Whatever one object does, the others' daemons and this one's next try go on.
                    log.exception("%s: unexpected error; retrying in 10s", self.name)
                    await self._sleep(10)
        finally:
            self._cancel_planning()
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def _resume(self) -> RunState | None:
        """The run recorded in the status, rebuilt (its nodes come from its reports)."""
        status = self._status()
        info = status.get("run")
        if self.state.run is not None:
            return self.state.run
        if not info:
            return None
        run = RunState(
            validation=self.name,
            run_id=info["id"],
            number=int(info.get("number") or run_number(info["id"])),
            generation=int(info.get("generation") or 0),
            trigger=info.get("trigger") or "created",
            started_at=parse_time(info.get("startedAt")) or time.time(),
            completed_at=parse_time(info.get("completedAt")),
        )
        self.state.run = run
        self.state.last_run_started = run.started_at
        last = status.get("lastCompletedRun") or {}
        self.state.last_run_completed = parse_time(last.get("completedAt"))
        conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
        if conditions.get(rollup.UNIFORM) in ("True", "False"):
            self.state.uniform = conditions[rollup.UNIFORM] == "True"
            self.state.outliers = len(status.get("outliers") or []) + int(
                status.get("outliersOmitted") or 0
            )
        if conditions.get(rollup.SUCCEEDED) == "True":
            self.state.last_success = self.state.last_run_completed
        log.info("%s: resuming run %s", self.name, run.run_id)
        return run

    async def _step(self) -> None:
        generation = self.generation()
        spec, errors = parse_spec(self.body.get("spec"))
        run = self.state.run
        if errors or spec is None:
            if run is not None and run.completed_at is None:
                await self._supersede(run)
            await self._mark_invalid(errors, generation)
            await self._wait(lambda: self.generation() != generation)
            return
        self.state.invalid = False
        if run is not None and run.completed_at is None:
            if run.generation == generation:
                await self._execute(run, spec)
                return
            await self._supersede(run)
            await self._start_run(spec, "spec-changed")
            return
        if run is not None and run.generation == generation:
            if spec.schedule is None:
                await self._wait(lambda: self.generation() != generation)
                return
            if self.next_run_at is None:
                self.next_run_at = cron.next_tick(spec.schedule, run.completed_at or time.time())
                await self._write_status(force=True)
            due = self.next_run_at
            await self._wait(lambda: self.generation() != generation or time.time() >= due)
            if self.stopped() or self.generation() != generation:
                return
            await self._start_run(spec, "schedule")
            return
        await self._start_run(spec, "created" if run is None else "spec-changed")

    # -- invalid spec --

    async def _mark_invalid(self, errors: list[str], generation: int) -> None:
        self.state.invalid = True
        if self.invalid_generation == generation:
            return
        self.invalid_generation = generation
        status = rollup.build_invalid_status(
            errors, generation=generation, previous_conditions=self.conditions, now=time.time()
        )
        await self._patch_status(status)
        await events.post(
            self.client,
            self.config.event_namespace,
            self._owner(),
            "InvalidSpec",
            "; ".join(errors),
            warning=True,
        )
        log.warning("%s: invalid spec: %s", self.name, "; ".join(errors))

    # -- runs --

    async def _list_candidates(self, spec: GpuValidationSpec) -> list[planning.Candidate]:
        query = spec.node_selector.to_query() if spec.node_selector else ""
        candidates: list[planning.Candidate] = []
        while True:
            try:
                async for nodes, _, _ in self.client.pages("/api/v1/nodes", query):
                    candidates.extend(planning.select_nodes(nodes))
            except ResourceExpiredError:
                candidates.clear()
                continue
            return sorted(candidates, key=lambda c: c.name)

    async def _start_run(self, spec: GpuValidationSpec, trigger: str) -> None:
        previous = self.state.run
        number = (
            max(
                [previous.number if previous else 0]
                + [run_number(r) for r in self.state.run_ids]
                + [int((self._status().get("run") or {}).get("number") or 0)]
            )
            + 1
        )
        run_id = f"{number}-{secrets.token_hex(2)}"
        try:
            candidates = await self._list_candidates(spec)
        except ApiError as exc:
            if exc.status == 400:
                query = spec.node_selector.to_query() if spec.node_selector else ""
                await self._mark_invalid(
                    [f"spec.nodeSelector={query!r}: the API server refused it: {exc}"],
                    self.generation(),
                )
                return
            raise
        run = RunState(
            validation=self.name,
            run_id=run_id,
            number=number,
            generation=self.generation(),
            trigger=trigger,
            started_at=time.time(),
        )
        for c in candidates:
            run.add(
                c.name,
                c.gpus,
                names.report_name(self.name, run_id, c.name),
                names.pod_name(self.name, run_id, c.name),
            )
        self.state.run = run
        self.state.last_run_started = run.started_at
        self.next_run_at = None
        self.outliers = None
        self.events_posted = 0
        self.invalid_generation = None
        # The run id is persisted before any child exists, so a restart resumes this run instead of
        # starting one.
        await self._write_status(force=True)
        await events.post(
            self.client,
            self.config.event_namespace,
            self._owner(),
            "RunStarted",
            f"run {run_id} ({trigger}) started on {len(candidates)} nodes",
        )
        log.info("%s: run %s (%s) on %d nodes", self.name, run_id, trigger, len(candidates))
        await self._prune(run, spec)
        # The first wave's reports first, the rest while the first wave runs: at 10,000 nodes the
        # reports alone take a minute to create, and the first pods should not wait for them.
        limit = planning.concurrency_limit(spec.max_concurrent, len(candidates))
        await self._create_reports(run, candidates[:limit])
        self._plan_in_background(run, candidates[limit:])

    def _plan_in_background(self, run: RunState, candidates: list[planning.Candidate]) -> None:
        async def plan() -> None:
            # A quarter of the create width, so the waves' pods are not queued behind reports
            # that are needed only when later waves start.
            await self._create_reports(
                run, candidates, concurrency=max(1, self.config.create_concurrency // 4)
            )
            # Every report of the run exists: a restarted operator need not look for missing ones.
            try:
                await self.client.merge_patch(
                    f"{VALIDATIONS_PATH}/{q(self.name)}",
                    {"metadata": {"annotations": {names.ANNOTATION_PLANNED_RUN: run.run_id}}},
                )
            except ApiError as exc:
                log.warning(
                    "%s: could not record that run %s is planned: %s", self.name, run.run_id, exc
                )

        self._planning = asyncio.create_task(plan(), name=f"{self.name}-plan")

    def _planning_busy(self) -> bool:
        return self._planning is not None and not self._planning.done()

    def _cancel_planning(self) -> None:
        if self._planning is not None:
            self._planning.cancel()
            self._planning = None

    async def _create_reports(
        self,
        run: RunState,
        candidates: Iterable[planning.Candidate],
        concurrency: int | None = None,
    ) -> None:
        await self._bounded((self._create_report(run, c) for c in candidates), concurrency)

    async def _create_report(self, run: RunState, candidate: planning.Candidate) -> None:
        body = planning.build_report(self.name, self.uid, run.run_id, candidate)
        try:
            await self.client.create(REPORTS_PATH, body)
        except ApiError as exc:
            if exc.status != 409:
                # The node cannot be validated without its report; say so rather than hang the run.
                log.warning("%s: no report for node %s: %s", self.name, candidate.name, exc)
                run.nodes.pop(candidate.name, None)
                await events.post(
                    self.client,
                    self.config.event_namespace,
                    self._owner(),
                    "ReportNotCreated",
                    f"node {candidate.name} left out of run {run.run_id}: {exc}",
                    warning=True,
                )
                return
        record = run.nodes.get(candidate.name)
        if record is not None:
            record.planned = True
            self.wake.set()

    async def _bounded(
        self, jobs: Iterable[Awaitable[None]], concurrency: int | None = None
    ) -> None:
        """Run `jobs` at most `concurrency` at a time (the client backs off on 429/5xx).

        A few workers share one iterator, so a generator of 10,000 creates makes each coroutine
        only when a worker is free to await it.
        """
        shared = iter(jobs)

        async def worker() -> None:
            for job in shared:
                await job

        width = concurrency or self.config.create_concurrency
        await asyncio.gather(*(worker() for _ in range(width)))

    async def _prune(self, run: RunState, spec: GpuValidationSpec) -> None:
        """Delete pods of earlier runs, and reports of runs beyond the history to keep."""
        await self.client.delete(
            self.pods_path,
            labelSelector=f"{self.selector},{names.LABEL_RUN} notin ({run.run_id})",
        )
        older = sorted((r for r in self.state.run_ids if r != run.run_id), key=run_number)
        drop = older[: max(0, len(older) - (spec.history - 1))]
        if drop:
            await self.client.delete(
                REPORTS_PATH,
                labelSelector=f"{self.selector},{names.LABEL_RUN} in ({','.join(drop)})",
            )
            self.state.run_ids.difference_update(drop)

    async def _supersede(self, run: RunState) -> None:
        log.info("%s: run %s superseded by a spec change", self.name, run.run_id)
        self._cancel_planning()
        sel = f"{self.selector},{names.LABEL_RUN}={run.run_id}"
        await self.client.delete(self.pods_path, labelSelector=sel)
        await self.client.delete(REPORTS_PATH, labelSelector=sel)
        self.state.run_ids.discard(run.run_id)
        self.state.run = None

    async def _ensure_planned(self, run: RunState, spec: GpuValidationSpec) -> None:
        """After a restart mid-creation, create the reports that a crash left out."""
        annotations = (self.body.get("metadata") or {}).get("annotations") or {}
        if annotations.get(names.ANNOTATION_PLANNED_RUN) == run.run_id or self._planning_busy():
            return
        candidates = await self._list_candidates(spec)
        for c in candidates:
            run.add(
                c.name,
                c.gpus,
                names.report_name(self.name, run.run_id, c.name),
                names.pod_name(self.name, run.run_id, c.name),
            )
        self._plan_in_background(run, [c for c in candidates if not run.nodes[c.name].planned])

    async def _execute(self, run: RunState, spec: GpuValidationSpec) -> None:
        await self._ensure_planned(run, spec)
        generation = run.generation
        while not self.stopped():
            if self.generation() != generation:
                raise SupersededError
            now, mono = time.time(), time.monotonic()
            failures = due_failures(
                run,
                now=now,
                monotonic=mono,
                timeout=spec.node_timeout_seconds,
                grace=self.config.pod_grace_seconds,
            )
            if failures:
                await self._bounded(self._fail(run, f) for f in failures)
            await self._launch_wave(run, spec)
            await self._after_verdicts(run, spec)
            if run.all_done():
                await self._complete(run, spec)
                return
            await self._write_status()
            await self._sleep(self.config.status_interval_seconds)

    async def _launch_wave(self, run: RunState, spec: GpuValidationSpec) -> None:
        limit = planning.concurrency_limit(spec.max_concurrent, len(run.nodes))
        slots = limit - run.running()
        if slots <= 0:
            return
        batch: list[NodeRecord] = []
        for record in run.pending():
            if len(batch) >= slots:
                break
            record.phase = Phase.RUNNING
            record.pod_created = time.time()
            batch.append(record)
        if not batch:
            return
        self.dirty = True

        async def create(record_node: str, gpus: int) -> None:
            body = planning.build_pod(
                validation=self.name,
                uid=self.uid,
                run=run.run_id,
                node=record_node,
                gpus=gpus,
                spec=spec,
                config=self.config,
            )
            try:
                await self.client.create(self.pods_path, body)
            except ApiError as exc:
                if exc.status == 409:
                    return
                # A pod the API server refuses (missing namespace or ServiceAccount, quota,
                # admission) fails the node with the server's words instead of retrying forever.
                run.finish_node(
                    record_node,
                    False,
                    str(Reason.POD_FAILED),
                    f"could not create the agent pod: {exc}",
                )
                await self._write_report_failure(
                    run, record_node, Reason.POD_FAILED, f"could not create the agent pod: {exc}"
                )

        await self._bounded(create(r.node, r.gpus) for r in batch)

    async def _fail(self, run: RunState, failure: Failure) -> None:
        reason, message = failure.reason, failure.message
        if failure.check_node:
            node = await self.client.get_or_none(f"/api/v1/nodes/{q(failure.node)}")
            if node is None:
                reason = Reason.NODE_GONE
                message = f"node {failure.node} was deleted during the run ({message})"
        record = run.nodes[failure.node]
        if failure.delete_pod:
            record.deleted_by_us = True
            await self.client.delete(f"{self.pods_path}/{q(record.pod)}")
        if run.finish_node(failure.node, False, str(reason), message):
            await self._write_report_failure(run, failure.node, reason, message)

    async def _write_report_failure(
        self, run: RunState, node: str, reason: Reason, message: str
    ) -> None:
        record = run.nodes[node]
        status = build_operator_failure_status(reason, message, None, datetime.now(UTC))
        status = {k: v for k, v in status.items() if v is not None}
        try:
            await self.client.merge_patch(
                f"{REPORTS_PATH}/{q(record.report)}/status", {"status": status}
            )
        except ApiError as exc:
            log.warning(
                "%s: could not record %s on report %s: %s", self.name, reason, record.report, exc
            )

    async def _after_verdicts(self, run: RunState, spec: GpuValidationSpec) -> None:
        """Node actions and Events for nodes that got a verdict since the last step."""
        # Verdicts that arrive while the nodes are being patched are picked up by the next pass.
        while run.finished:
            finished, run.finished = run.finished, []
            self.dirty = True
            await self._bounded(self._act_on_node(run, node, spec) for node in finished)

    async def _act_on_node(self, run: RunState, node_name: str, spec: GpuValidationSpec) -> None:
        record = run.nodes[node_name]
        passed = record.phase is Phase.PASSED
        for _ in range(3):
            node = await self.client.get_or_none(f"/api/v1/nodes/{q(node_name)}")
            if node is None:
                return
            patch = plan_node_patch(
                node,
                validation=self.name,
                passed=passed,
                reason=record.reason,
                actions=spec.node_actions,
                now=time.time(),
            )
            if patch is not None:
                try:
                    await self.client.merge_patch(f"/api/v1/nodes/{q(node_name)}", patch)
                except ApiError as exc:
                    if exc.status == 409:
                        continue
                    log.warning("%s: could not update node %s: %s", self.name, node_name, exc)
                    return
            break
        else:
            return
        if not passed and self.events_posted < self.config.events_per_run:
            self.events_posted += 1
            message = f"{record.reason}: {record.message} (GpuNodeReport {record.report})"
            involved = {
                "apiVersion": "v1",
                "kind": "Node",
                "name": node_name,
                "uid": node["metadata"]["uid"],
            }
            await events.post(
                self.client,
                self.config.event_namespace,
                involved,
                "ValidationFailed",
                message,
                warning=True,
            )
            await events.post(
                self.client,
                self.config.event_namespace,
                self._owner(),
                "NodeFailed",
                f"{node_name}: {message}",
                warning=True,
            )

    async def _complete(self, run: RunState, spec: GpuValidationSpec) -> None:
        run.completed_at = time.time()
        environments = {
            node: result.environment
            for node, result in self.state.latest.items()
            if node in run.nodes and result.run == run.run_id and result.environment
        }
        self.outliers = (
            find_outliers(environments, expected_values(spec.expected)) if environments else None
        )
        self.state.uniform = None if self.outliers is None else not self.outliers
        self.state.outliers = len(self.outliers or [])
        self.state.last_run_completed = run.completed_at
        failed = run.failed()
        if not failed:
            self.state.last_success = run.completed_at
        if spec.schedule is not None:
            self.next_run_at = cron.next_tick(spec.schedule, run.completed_at)
        await self._write_status(force=True)
        counts = run.counts()
        summary = (
            f"run {run.run_id} completed: {counts['passed']} passed, {counts['failed']} failed"
            f" of {counts['total']}"
        )
        if self.outliers:
            summary += f"; {len({o.node for o in self.outliers})} nodes not uniform"
        await events.post(
            self.client,
            self.config.event_namespace,
            self._owner(),
            "RunCompleted",
            summary,
            warning=bool(failed or self.outliers),
        )
        log.info("%s: %s", self.name, summary)

    # -- status --

    async def _write_status(self, force: bool = False) -> None:
        """Throttled to one write per status interval unless `force` (run start and end)."""
        run = self.state.run
        if run is None:
            return
        mono = time.monotonic()
        if not force and (
            not self.dirty or mono - self.last_write < self.config.status_interval_seconds
        ):
            return
        status = rollup.build_run_status(
            run,
            generation=run.generation,
            previous_conditions=self.conditions,
            outliers=self.outliers,
            now=time.time(),
            next_run_at=self.next_run_at,
        )
        await self._patch_status(status)
        self.dirty = False
        self.last_write = mono

    async def _patch_status(self, status: dict[str, Any]) -> None:
        await self.client.merge_patch(
            f"{VALIDATIONS_PATH}/{q(self.name)}/status", {"status": status}
        )
        self.conditions = status.get("conditions") or self.conditions
