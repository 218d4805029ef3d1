"""Pure: the remediation object of one node and one failure, made from spec.remediation.template
(the External Remediation convention: kind, apiVersion, metadata, spec), and the checks the
operator makes of a template before it is used.

The object is labelled with its validation, its node and the request's identity
(gpuval.dev/repair: the request's number on that node), and owned by the GpuValidation (deleted
with it): a restarted operator lists the objects by label and finds its request again, and its
name is the same for every failure of the node, so a create repeated after a restart gets 409
AlreadyExists instead of a second object (the keeper then compares the request's identity).
What a template must be is checked before it is used (gpuval_operator.spec.check_remediation).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuval_api import keys, label_value
from gpuval_api.crd import RemediationTemplate
from gpuval_api.labels import digest
from gpuval_api.remediation import LIST_PLACEHOLDERS, Placeholder
from gpuval_operator.names import bounded_name
from gpuval_operator.planning import owner_reference

_PLACEHOLDER = re.compile(r"\$\([A-Z_]+\)")


@dataclass(frozen=True, slots=True)
class Request:
    """What fills a template's placeholders for one node and failure."""

    validation: str
    uid: str
    node: str
    repair_id: str
    reason: str
    action: str
    gpu_uuids: tuple[str, ...] = ()
    gpu_pci_bus_ids: tuple[str, ...] = ()

    def values(self) -> dict[str, str | tuple[str, ...]]:
        return {
            Placeholder.NODE_NAME: self.node,
            Placeholder.GPU_UUIDS: self.gpu_uuids,
            Placeholder.GPU_PCI_BUS_IDS: self.gpu_pci_bus_ids,
            Placeholder.REASON: self.reason,
            Placeholder.ACTION: self.action,
            Placeholder.VALIDATION: self.validation,
            Placeholder.REPAIR_ID: self.repair_id,
        }


def _fill(value: Any, values: Mapping[str, str | tuple[str, ...]]) -> Any:
    if isinstance(value, str):
        whole = values.get(value)
        if value in LIST_PLACEHOLDERS and isinstance(whole, tuple):
            return list(whole)

        def one(match: re.Match[str]) -> str:
            found = values.get(match.group(0))
            if found is None:
                return match.group(0)
            return ",".join(found) if isinstance(found, tuple) else found

        return _PLACEHOLDER.sub(one, value)
    if isinstance(value, Mapping):
        return {k: _fill(v, values) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, values) for v in value]
    return value


def default_name(validation: str, node: str) -> str:
    """The object's name when the template gives none: the same for every failure of the node,
    told apart from another validation's by a hash."""
    return bounded_name("gpuval", node, digest(validation, 6))


def object_name(template: RemediationTemplate, request: Request) -> str:
    if template.metadata.name is None:
        return default_name(request.validation, request.node)
    return str(_fill(template.metadata.name, request.values()))


def reference(namespace: str | None, name: str) -> str:
    """An object as status.remediation and the node's record name it: namespace/name."""
    return f"{namespace}/{name}" if namespace else name


def render(template: RemediationTemplate, request: Request) -> dict[str, Any]:
    """The object to create for `request`."""
    values = request.values()
    meta = template.metadata
    labels = {k: str(_fill(v, values)) for k, v in meta.labels.items()}
    labels.update(
        {
            keys.LABEL_VALIDATION: label_value(request.validation),
            keys.LABEL_NODE: label_value(request.node),
            keys.LABEL_REPAIR: request.repair_id,
            keys.LABEL_MANAGED_BY: "gpuval-operator",
        }
    )
    metadata: dict[str, Any] = {
        "name": object_name(template, request),
        "labels": labels,
        "ownerReferences": [owner_reference(request.validation, request.uid)],
    }
    if meta.namespace:
        metadata["namespace"] = str(_fill(meta.namespace, values))
    if meta.annotations:
        metadata["annotations"] = {k: str(_fill(v, values)) for k, v in meta.annotations.items()}
    return {
        "apiVersion": template.api_version,
        "kind": template.kind,
        "metadata": metadata,
        "spec": _fill(template.spec, values),
    }
