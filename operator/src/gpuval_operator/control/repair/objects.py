"""The remediation objects of one validation's repair loop (spec.remediation mode Template), for
`control.repair.keeper.RepairKeeper`: each request's object made from the template (or found made
before a restart: a repeated create gets 409 and the object carries the request's number), the
objects listed by label to see their ends, leftovers of an end written before a restart deleted.
The calls are `remediation.effects`'; what an object's status means, `remediation.objects`'."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from gpuval_api import keys, label_value
from gpuval_api.crd import GpuValidationSpec, RemediationMode, RemediationTemplate
from gpuval_api.remediation import RepairEnd, RepairState
from gpuval_operator.kube.client import ApiError, KubeClient
from gpuval_operator.nodes.facts import NodeFacts
from gpuval_operator.remediation.effects import NotServedError, RemediationEffects
from gpuval_operator.remediation.objects import object_end
from gpuval_operator.remediation.record import FailingGpus, RepairRecord
from gpuval_operator.remediation.refusals import Refusal, kind_of
from gpuval_operator.remediation.template import Request, reference, render

log = logging.getLogger(__name__)

# The objects are listed at most this often while a request is out (seconds), and this often
# anyway (leftovers of a restart).
LIST_EVERY = 2.0
LIST_ANYWAY = 30.0

# Says a refusal once (node, what, message): the keeper's Events.
Refused = Callable[[str, str, str], Awaitable[None]]


def template_kind(spec: GpuValidationSpec) -> str | None:
    """The kind a spec's requests make (Kind.group/version); None in mode Condition."""
    template = _template(spec)
    return kind_of(template.api_version, template.kind) if template is not None else None


def _template(spec: GpuValidationSpec) -> RemediationTemplate | None:
    remediation = spec.remediation
    if remediation is None or remediation.mode is not RemediationMode.TEMPLATE:
        return None
    return remediation.template


class RepairObjects:
    def __init__(self, client: KubeClient, validation: str, uid: str, refused: Refused) -> None:
        self.effects = RemediationEffects(client, validation)
        self.validation, self.uid = validation, uid
        self.refused = refused
        self.listed_at = float("-inf")
        # The last template seen: a request withdrawn once spec.remediation is gone still has
        # its object deleted.
        self.last_template: RemediationTemplate | None = None
        # This validation's objects as last listed (namespace/name -> object); None: not listed
        # in this pass.
        self.listed: dict[str, dict[str, Any]] | None = None

    def due(self, spec: GpuValidationSpec, now: float) -> bool:
        """A request is out whose object is worth listing again."""
        return _template(spec) is not None and now - self.listed_at >= LIST_EVERY

    async def make(
        self,
        spec: GpuValidationSpec,
        *,
        node: str,
        repair_id: str,
        reason: str,
        action: str,
        gpus: FailingGpus,
    ) -> str | Refusal | None:
        """The request's object made (or found made before a restart): its namespace/name; a
        Refusal when the API server does not make it (said once per request); None when an
        earlier request's object is in the way (deleted now)."""
        template = _template(spec)
        if template is None:
            return None
        request = Request(
            validation=self.validation,
            uid=self.uid,
            node=node,
            repair_id=repair_id,
            reason=reason,
            action=action,
            gpu_uuids=gpus.uuids,
            gpu_pci_bus_ids=gpus.pci_bus_ids,
        )
        body = render(template, request)
        meta = body["metadata"]
        ref = reference(meta.get("namespace"), meta["name"])
        kind = kind_of(template.api_version, template.kind)
        refusal: Refusal | None = None
        try:
            made = await self.effects.create(template, body)
        except NotServedError as exc:
            made, refusal = False, Refusal(kind, None, str(exc))
        except ApiError as exc:
            words = exc.body.get("message") if isinstance(exc.body, dict) else None
            made, refusal = False, Refusal(kind, exc.status, str(words or exc))
        if refusal is None and not made:
            existing = await self.effects.get(template, ref)
            labels = ((existing or {}).get("metadata") or {}).get("labels") or {}
            ours = labels.get(keys.LABEL_VALIDATION) == label_value(self.validation)
            if existing is not None and ours and labels.get(keys.LABEL_REPAIR) == repair_id:
                return ref  # made before a restart: the same request
            if existing is not None and not existing["metadata"].get("deletionTimestamp"):
                await self.effects.delete(template, ref)  # an earlier request's, left over
            return None
        if refusal is not None:
            message = (
                f"could not make {template.kind} {ref} for {node}: {refusal.said()}; install the "
                "engine's CRD, grant the operator its kind (the chart's remediation.rbac) and "
                "check spec.remediation.template (tried again with a growing pause)"
            )
            await self.refused(node, f"refused:{repair_id}", message)
            return refusal
        return ref

    def end_of(self, record: RepairRecord | None) -> RepairEnd | None:
        """How a Requested record's object ended, as last listed (None: going on, or not
        listed in this pass)."""
        if record is None or record.state != RepairState.REQUESTED or not record.obj:
            return None
        if self.listed is None:
            return None
        obj = self.listed.get(record.obj)
        labels = ((obj or {}).get("metadata") or {}).get("labels") or {}
        if obj is None or labels.get(keys.LABEL_REPAIR) != record.repair_id:
            return RepairEnd.GONE
        if obj["metadata"].get("deletionTimestamp"):
            return RepairEnd.GONE
        return object_end(obj)

    async def list(self, spec: GpuValidationSpec, asked: bool, now: float) -> None:
        """List the objects when a request is out (at most every LIST_EVERY seconds) or every
        LIST_ANYWAY seconds; `listed` is None when not listed in this pass."""
        template = _template(spec)
        self.last_template = template or self.last_template
        self.listed = None
        if template is None:
            return
        since = now - self.listed_at
        if not (asked and since >= LIST_EVERY) and since < LIST_ANYWAY:
            return
        try:
            self.listed = await self.effects.objects(template)
        except (NotServedError, ApiError) as exc:
            if isinstance(exc, ApiError) and exc.status not in (403, 404):
                raise
            # Not listed again before LIST_ANYWAY: the kind is not served or not granted, which
            # asking again at once cannot change (RepairRequestsRefused says so).
            log.warning("%s: remediation objects not listed: %s", self.validation, exc)
        self.listed_at = now

    async def clean(self, spec: GpuValidationSpec, nodes: Mapping[str, NodeFacts]) -> None:
        """Delete the listed objects whose node no longer has their request out (its end was
        written, then the operator stopped before the delete)."""
        template = _template(spec)
        if self.listed is None or template is None:
            return
        by_label = {label_value(n): f for n, f in nodes.items()}
        for ref, obj in self.listed.items():
            meta = obj.get("metadata") or {}
            labels = meta.get("labels") or {}
            facts = by_label.get(str(labels.get(keys.LABEL_NODE)))
            record = facts.entry.repair if facts is not None and facts.entry is not None else None
            out = (
                record is not None
                and record.state == RepairState.REQUESTED
                and record.obj == ref
                and record.repair_id == labels.get(keys.LABEL_REPAIR)
            )
            if not out and facts is not None and not meta.get("deletionTimestamp"):
                await self.effects.delete(template, ref)

    async def delete(self, spec: GpuValidationSpec, ref: str) -> None:
        template = _template(spec) or self.last_template
        if template is not None:
            try:
                await self.effects.delete(template, ref)
            except NotServedError as exc:
                log.warning("%s: %s not deleted: %s", self.validation, ref, exc)

    async def report(self, name: str) -> dict[str, Any] | None:
        return await self.effects.report(name)
