"""The API effects of one validation's controller: creating its children, recording verdicts the
agents could not write, node actions, Events, status patches, and clean-up.

Every call the operator makes on behalf of a validation is here (gpuval_operator.rbac lists the
rights they need); what to do and when is decided elsewhere (gpuval_operator.run.lifecycle,
.planning, .rollup; node actions are gpuval_operator.nodes.actor).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from gpuval_api import keys
from gpuval_api.conditions import EventReason
from gpuval_api.crd import API_VERSION, REPORT_PLURAL, VALIDATION_KIND, GpuValidationSpec
from gpuval_api.gfd import GpuSharing
from gpuval_api.labels import children_selector
from gpuval_api.reasons import Reason
from gpuval_api.report import AGENT_CHECK, build_operator_failure_status
from gpuval_operator import planning
from gpuval_operator.config import OperatorConfig
from gpuval_operator.kube import events
from gpuval_operator.kube.client import ApiError, KubeClient, ResourceExpiredError, q
from gpuval_operator.names import run_number
from gpuval_operator.run.facts import ReportFacts
from gpuval_operator.run.state import NodeRecord, RunState

log = logging.getLogger(__name__)

VALIDATIONS_PATH = f"/apis/{API_VERSION}/gpuvalidations"
REPORTS_PATH = f"/apis/{API_VERSION}/{REPORT_PLURAL}"
NODES_PATH = "/api/v1/nodes"


class Effects:
    def __init__(self, client: KubeClient, config: OperatorConfig, *, name: str, uid: str) -> None:
        self.client = client
        self.config = config
        self.name = name
        self.uid = uid
        self.selector = children_selector(name)

    @property
    def pods_path(self) -> str:
        return f"/api/v1/namespaces/{q(self.config.agent_namespace)}/pods"

    def owner(self) -> dict[str, Any]:
        return {
            "apiVersion": API_VERSION,
            "kind": VALIDATION_KIND,
            "name": self.name,
            "uid": self.uid,
        }

    async def bounded(
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

    # -- the validation --

    async def event(self, reason: EventReason, message: str, *, warning: bool = False) -> None:
        await events.post(self.client, self.owner(), reason, message, warning=warning)

    async def patch_status(self, status: dict[str, Any]) -> None:
        await self.client.merge_patch(
            f"{VALIDATIONS_PATH}/{q(self.name)}/status", {"status": status}
        )

    async def mark_planned(self, run_id: str) -> None:
        """Record that every report of the run exists, so a restart need not look for them."""
        await self.annotate(keys.ANNOTATION_PLANNED_RUN, run_id)

    async def annotate(self, key: str, value: str) -> bool:
        """Set an annotation of the GpuValidation (a step of a run done); False when refused."""
        try:
            await self.client.merge_patch(
                f"{VALIDATIONS_PATH}/{q(self.name)}", {"metadata": {"annotations": {key: value}}}
            )
        except ApiError as exc:
            log.warning("%s: could not set %s=%s: %s", self.name, key, value, exc)
            return False
        return True

    async def list_candidates(self, spec: GpuValidationSpec) -> list[planning.Candidate]:
        query = spec.node_selector.to_query() if spec.node_selector else ""
        candidates: list[planning.Candidate] = []
        while True:
            try:
                async for nodes, _, _ in self.client.pages(NODES_PATH, query):
                    candidates.extend(planning.select_nodes(nodes))
            except ResourceExpiredError:
                candidates.clear()
                continue
            return sorted(candidates, key=lambda c: c.name)

    # -- children --

    async def create_report(
        self,
        run: RunState,
        candidate: planning.Candidate,
        history: Sequence[Mapping[str, Any]] = (),
    ) -> bool:
        """Create the node's report (carrying its `history`); False (and the node left out of
        the run) when refused."""
        body = planning.build_report(self.name, self.uid, run.run_id, candidate, history)
        try:
            await self.client.create(REPORTS_PATH, body)
        except ApiError as exc:
            if exc.status != 409:
                # The node cannot be validated without its report; say so rather than hang the run.
                log.warning("%s: no report for node %s: %s", self.name, candidate.name, exc)
                run.nodes.pop(candidate.name, None)
                await self.event(
                    EventReason.REPORT_NOT_CREATED,
                    f"node {candidate.name} left out of run {run.run_id}: {exc}",
                    warning=True,
                )
                return False
        return True

    async def create_pod(
        self,
        run: RunState,
        record: NodeRecord,
        spec: GpuValidationSpec,
        sharing: GpuSharing | None = None,
        baseline: Sequence[Mapping[str, str]] = (),
    ) -> str | None:
        """Create the node's agent pod (`sharing`: its GPUs are shared); the API server's refusal
        as text, None when it exists."""
        body = planning.build_pod(
            validation=self.name,
            uid=self.uid,
            run=run.run_id,
            node=record.node,
            gpus=record.gpus,
            spec=spec,
            config=self.config,
            deadline=(record.pod_created or time.time()) + spec.node_timeout_seconds,
            attempt=record.attempt,
            sharing=sharing,
            baseline=baseline,
            checks=record.checks,
        )
        try:
            await self.client.create(self.pods_path, body)
        except ApiError as exc:
            # A pod the API server refuses (missing namespace or ServiceAccount, quota,
            # admission) fails the node with the server's words instead of retrying forever.
            return None if exc.status == 409 else f"could not create the agent pod: {exc}"
        return None

    async def delete_pod(self, record: NodeRecord) -> None:
        record.deleted_by_us = True
        await self.delete_pod_named(record.pod)

    async def delete_pod_named(self, name: str) -> None:
        await self.client.delete(f"{self.pods_path}/{q(name)}")

    async def create_fabric_pod(self, body: dict[str, Any]) -> str | None:
        """Create a fabric pod; the API server's refusal as text, None when made or it exists."""
        try:
            await self.client.create(self.pods_path, body)
        except ApiError as exc:
            return None if exc.status == 409 else f"could not create the fabric pod: {exc}"
        return None

    async def node_exists(self, node: str) -> bool:
        return await self.client.get_or_none(f"{NODES_PATH}/{q(node)}") is not None

    async def read_report(self, record: NodeRecord, run_id: str) -> ReportFacts | None:
        """The node's report as the API server has it now, when it is of run `run_id` (None when
        it is not there or of another run): what an agent wrote that the report watch has not
        brought yet."""
        found: dict[str, Any] | None = await self.client.get_or_none(
            f"{REPORTS_PATH}/{q(record.report)}"
        )
        if found is None:
            return None
        facts = ReportFacts.parse(found)
        return facts if facts.run == run_id else None

    async def write_report_status(self, record: NodeRecord, status: dict[str, Any]) -> bool:
        """Merge-patch the report's status (top-level nulls dropped); False when refused."""
        status = {k: v for k, v in status.items() if v is not None}
        try:
            await self.client.merge_patch(
                f"{REPORTS_PATH}/{q(record.report)}/status", {"status": status}
            )
        except ApiError as exc:
            log.warning("%s: could not write report %s: %s", self.name, record.report, exc)
            return False
        return True

    async def write_report_failure(
        self, record: NodeRecord, reason: Reason, message: str, check: str = AGENT_CHECK
    ) -> None:
        status = build_operator_failure_status(reason, message, None, datetime.now(UTC), check)
        await self.write_report_status(record, status)

    async def prune(self, run: RunState, history: int, run_ids: set[str]) -> None:
        """Delete pods of earlier runs, and reports of runs beyond the history to keep."""
        await self.client.delete(
            self.pods_path,
            labelSelector=f"{self.selector},{keys.LABEL_RUN} notin ({run.run_id})",
        )
        older = sorted((r for r in run_ids if r != run.run_id), key=run_number)
        drop = older[: max(0, len(older) - (history - 1))]
        if drop:
            await self.client.delete(
                REPORTS_PATH,
                labelSelector=f"{self.selector},{keys.LABEL_RUN} in ({','.join(drop)})",
            )
            run_ids.difference_update(drop)

    async def delete_run(self, run: RunState) -> None:
        """Delete a superseded run's pods and reports."""
        sel = children_selector(self.name, run.run_id)
        await self.client.delete(self.pods_path, labelSelector=sel)
        await self.client.delete(REPORTS_PATH, labelSelector=sel)
