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

from gpuval_api import EventReason, Reason, keys, label_value
from gpuval_api.crd import (
    API_VERSION,
    REPORT_PLURAL,
    VALIDATION_KIND,
    DraSettings,
    GpuValidationSpec,
)
from gpuval_api.dra import (
    DRIVER,
    RESOURCE_API,
    RESOURCE_CLAIMS_PATH,
    RESOURCE_SLICES_PATH,
    ClaimHold,
    PublishedSlice,
    claim_hold,
    parse_slice,
)
from gpuval_api.gfd import GpuSharing
from gpuval_api.labels import children_selector
from gpuval_api.report import (
    AGENT_CHECK,
    Settler,
    StatusKey,
    build_operator_failure_status,
    build_reset_status,
    build_waiting_status,
)
from gpuval_operator import names, planning
from gpuval_operator.config import OperatorConfig
from gpuval_operator.devices import DeviceRequest, NodeDevices, claim_template
from gpuval_operator.kube import events
from gpuval_operator.kube.client import ApiError, KubeClient, ResourceExpiredError, q
from gpuval_operator.names import run_number
from gpuval_operator.run.facts import ReportFacts
from gpuval_operator.run.refusals import Refusal
from gpuval_operator.run.state import NodeRecord, RunState

log = logging.getLogger(__name__)

VALIDATIONS_PATH = f"/apis/{API_VERSION}/gpuvalidations"
REPORTS_PATH = f"/apis/{API_VERSION}/{REPORT_PLURAL}"
NODES_PATH = "/api/v1/nodes"
# The NVIDIA DRA driver's ResourceSlices (a field selector the API server applies).
SLICES_OF = f"spec.driver={DRIVER}"


class Effects:
    def __init__(self, client: KubeClient, config: OperatorConfig, *, name: str, uid: str) -> None:
        self.client = client
        self.config = config
        self.name = name
        self.uid = uid
        self.selector = children_selector(name)
        # ResourceClaimTemplates known to exist (spec.agent.devices dra), made once per run/shape.
        self._templates: set[str] = set()
        self._template_runs: set[str] = set()
        self._templates_lock = asyncio.Lock()

    @property
    def pods_path(self) -> str:
        return f"/api/v1/namespaces/{q(self.config.agent_namespace)}/pods"

    @property
    def templates_path(self) -> str:
        namespace = q(self.config.agent_namespace)
        return f"/apis/{RESOURCE_API}/namespaces/{namespace}/resourceclaimtemplates"

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

    async def list_candidates(
        self, spec: GpuValidationSpec, dra: bool = False
    ) -> list[planning.Candidate]:
        """The selected nodes, listed (the node watch could not say); with `dra`, each node's
        GPUs counted from its ResourceSlices."""
        query = spec.node_selector.to_query() if spec.node_selector else ""
        published = await self.published_devices() if dra else None
        candidates: list[planning.Candidate] = []
        while True:
            try:
                async for nodes, _, _ in self.client.pages(NODES_PATH, query):
                    candidates.extend(planning.select_nodes(nodes, published))
            except ResourceExpiredError:
                candidates.clear()
                continue
            return sorted(candidates, key=lambda c: c.name)

    async def published_devices(self) -> dict[str, int]:
        """Each node's devices in the NVIDIA DRA driver's ResourceSlices, counted as the
        scheduler counts them (its pools' highest generation: NodeDevices.of)."""
        items, _ = await self.client.list_pages(RESOURCE_SLICES_PATH, field_selector=SLICES_OF)
        by_node: dict[str, list[PublishedSlice]] = {}
        for obj in items:
            found = parse_slice(obj)
            if found is not None:
                by_node.setdefault(found.node, []).append(found)
        return {node: NodeDevices.of(found).count for node, found in by_node.items()}

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
        *,
        request: DeviceRequest | None = None,
    ) -> Refusal | None:
        """Create the node's agent pod (`sharing`: its GPUs are shared; `request`: how it asks
        for them); the API server's refusal, None when made or it exists."""
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
            request=request,
            checks=record.checks,
        )
        try:
            await self.client.create(self.pods_path, body)
        except ApiError as exc:
            # Refused before any node saw it (admission, quota, a missing namespace or
            # ServiceAccount): the cluster's configuration, never the node's (run.refusals).
            if exc.status == 409:
                return None
            words = exc.body.get("message") if isinstance(exc.body, dict) else None
            return Refusal.of(exc.status, str(words or exc))
        return None

    async def ensure_claim_template(self, run_id: str, shape: str, settings: DraSettings) -> str:
        """The run's ResourceClaimTemplate for nodes with devices of `shape`, created the first
        time a pod needs it (409: it exists, e.g. made before a restart); its name. A refusal
        (no resource.k8s.io/v1, no right) is raised: the pod made from it could never start."""
        name = names.claim_template_name(self.name, run_id, shape)
        if name in self._templates:
            return name
        async with self._templates_lock:
            if name not in self._templates:
                body = claim_template(
                    name=name,
                    namespace=self.config.agent_namespace,
                    labels=self._run_labels(run_id),
                    owner=planning.owner_reference(self.name, self.uid),
                    shape=shape,
                    settings=settings,
                )
                try:
                    await self.client.create(self.templates_path, body)
                except ApiError as exc:
                    if exc.status != 409:
                        raise
                self._templates.add(name)
                self._template_runs.add(run_id)
        return name

    def _run_labels(self, run_id: str) -> dict[str, str]:
        return {
            keys.LABEL_NAME: "gpuval",
            keys.LABEL_MANAGED_BY: "gpuval-operator",
            keys.LABEL_VALIDATION: label_value(self.name),
            keys.LABEL_RUN: run_id,
        }

    async def claims_holding(self, pools: Sequence[str] | None) -> list[ClaimHold]:
        """The ResourceClaims (any namespace) that hold devices of the NVIDIA driver's `pools`
        (a node's; None: any pool): who keeps a DRA agent pod from being scheduled. A list of
        every claim, each cut to what it holds: it is read only when nodes' pods waited the
        whole node timeout, once for all of them."""
        items, _ = await self.client.list_pages(RESOURCE_CLAIMS_PATH)
        found = (claim_hold(obj) for obj in items)
        holds = [hold for hold in found if hold is not None]
        if pools is None:
            return holds
        wanted = {(DRIVER, pool) for pool in pools}
        return [hold for hold in holds if hold.pools & wanted]

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

    async def reset_report(self, record: NodeRecord) -> bool:
        """Before a node's next attempt: its report Pending, the operator's settled mark removed
        (a null in the merge patch), so that attempt's agent may write it. False when refused."""
        try:
            await self.client.merge_patch(
                f"{REPORTS_PATH}/{q(record.report)}/status", {"status": build_reset_status()}
            )
        except ApiError as exc:
            log.warning("%s: could not reset report %s: %s", self.name, record.report, exc)
            return False
        return True

    async def write_report_waiting(self, record: NodeRecord, reason: Reason, message: str) -> bool:
        """The node waits for the API server to admit its agent pod: its report Waiting, with
        no verdict (a merge patch whose nulls remove an earlier one). False when refused."""
        try:
            await self.client.merge_patch(
                f"{REPORTS_PATH}/{q(record.report)}/status",
                {"status": build_waiting_status(reason, message)},
            )
        except ApiError as exc:
            log.warning("%s: could not write report %s: %s", self.name, record.report, exc)
            return False
        return True

    async def settle_report(self, record: NodeRecord, status: dict[str, Any]) -> bool:
        """Write a verdict the operator settled itself, marked so (`status.settledBy`): the
        agents' admission policy refuses their writes to the report from then on (a stalled
        agent's late write). False when refused."""
        return await self.write_report_status(
            record, {**status, StatusKey.SETTLED_BY: str(Settler.OPERATOR)}
        )

    async def write_report_failure(
        self, record: NodeRecord, reason: Reason, message: str, check: str = AGENT_CHECK
    ) -> None:
        status = build_operator_failure_status(reason, message, None, datetime.now(UTC), check)
        await self.write_report_status(record, status)

    async def prune(
        self, run: RunState, history: int, run_ids: set[str], claims: bool = False
    ) -> None:
        """Delete pods of earlier runs (and, with `claims`, their ResourceClaimTemplates), and
        reports of runs beyond the history to keep."""
        earlier = f"{self.selector},{keys.LABEL_RUN} notin ({run.run_id})"
        await self.client.delete(self.pods_path, labelSelector=earlier)
        if claims:
            await self.client.delete(self.templates_path, labelSelector=earlier)
        older = sorted((r for r in run_ids if r != run.run_id), key=run_number)
        drop = older[: max(0, len(older) - (history - 1))]
        if drop:
            await self.client.delete(
                REPORTS_PATH,
                labelSelector=f"{self.selector},{keys.LABEL_RUN} in ({','.join(drop)})",
            )
            run_ids.difference_update(drop)

    async def delete_run(self, run: RunState) -> None:
        """Delete a superseded run's pods and reports (and its ResourceClaimTemplates, where it
        made any)."""
        sel = children_selector(self.name, run.run_id)
        await self.client.delete(self.pods_path, labelSelector=sel)
        await self.client.delete(REPORTS_PATH, labelSelector=sel)
        if run.run_id in self._template_runs:
            await self.client.delete(self.templates_path, labelSelector=sel)
            self._template_runs.discard(run.run_id)
