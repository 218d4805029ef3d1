"""The calls the repair loop makes on the engine's objects (spec.remediation mode Template): which
resource serves the template's kind (API discovery, which every authenticated client may read),
the validation's objects listed by label, made and deleted; and a failing node's report read back
for its GPUs. The rights: gpuval_operator.rbac.REMEDIATION_VERBS on the engine's resources, which
the chart grants through its `remediation.rbac` values."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from gpuval_api import keys, label_value
from gpuval_api.crd import API_VERSION, REPORT_PLURAL, RemediationTemplate
from gpuval_operator.kube.client import ApiError, KubeClient, ResourceExpiredError, q
from gpuval_operator.remediation.template import reference

log = logging.getLogger(__name__)

REPORTS_PATH = f"/apis/{API_VERSION}/{REPORT_PLURAL}"


@dataclass(frozen=True, slots=True)
class Resource:
    """The REST resource that serves a kind."""

    api_version: str
    plural: str
    namespaced: bool

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        base = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{q(namespace)}"
        base += f"/{self.plural}"
        return f"{base}/{q(name)}" if name else base


class NotServedError(Exception):
    """The API server serves no resource of the template's kind (its CRD is not installed)."""


class RemediationEffects:
    def __init__(self, client: KubeClient, validation: str) -> None:
        self.client = client
        self.validation = validation
        self._resources: dict[tuple[str, str], Resource] = {}

    async def resource(self, template: RemediationTemplate) -> Resource:
        """The resource of the template's kind, from API discovery (once per kind)."""
        key = (template.api_version, template.kind)
        found = self._resources.get(key)
        if found is not None:
            return found
        path = "/api/v1" if template.api_version == "v1" else f"/apis/{template.api_version}"
        try:
            listing = await self.client.get(path)
        except ApiError as exc:
            if exc.status == 404:
                raise NotServedError(
                    f"{template.api_version} is not served (is the engine's CRD installed?)"
                ) from exc
            raise
        for item in listing.get("resources") or []:
            if item.get("kind") == template.kind and "/" not in str(item.get("name", "")):
                found = Resource(template.api_version, item["name"], bool(item.get("namespaced")))
                self._resources[key] = found
                return found
        raise NotServedError(f"{template.api_version} serves no kind {template.kind}")

    async def objects(self, template: RemediationTemplate) -> dict[str, dict[str, Any]]:
        """This validation's objects of the template's kind, by namespace/name."""
        resource = await self.resource(template)
        selector = f"{keys.LABEL_VALIDATION}={label_value(self.validation)}"
        while True:
            found: dict[str, dict[str, Any]] = {}
            try:
                async for items, _, _ in self.client.pages(resource.path(), selector):
                    for obj in items:
                        meta = obj.get("metadata") or {}
                        found[reference(meta.get("namespace"), meta.get("name", ""))] = obj
            except ResourceExpiredError:
                continue
            return found

    async def create(self, template: RemediationTemplate, body: dict[str, Any]) -> bool:
        """Make the object: True when made, False when it exists (409); any other refusal
        raises its ApiError."""
        resource = await self.resource(template)
        namespace = (body.get("metadata") or {}).get("namespace")
        try:
            await self.client.create(resource.path(namespace), body)
        except ApiError as exc:
            if exc.status == 409:
                return False
            raise
        return True

    async def get(self, template: RemediationTemplate, ref: str) -> dict[str, Any] | None:
        resource = await self.resource(template)
        namespace, _, name = ref.rpartition("/")
        found: dict[str, Any] | None = await self.client.get_or_none(
            resource.path(namespace or None, name)
        )
        return found

    async def delete(self, template: RemediationTemplate, ref: str) -> None:
        """Delete the object (gone already: nothing to do); its dependents in the background."""
        resource = await self.resource(template)
        namespace, _, name = ref.rpartition("/")
        try:
            await self.client.delete(
                resource.path(namespace or None, name), propagationPolicy="Background"
            )
        except ApiError as exc:
            log.warning("%s: could not delete %s: %s", self.validation, ref, exc)

    async def report(self, name: str) -> dict[str, Any] | None:
        """A report as the API server has it (its failures and environment name the GPUs)."""
        found: dict[str, Any] | None = await self.client.get_or_none(f"{REPORTS_PATH}/{q(name)}")
        return found
