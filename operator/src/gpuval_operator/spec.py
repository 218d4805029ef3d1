"""What the CRD schema cannot check, checked before anything is scheduled.

A GpuValidation is parsed into its typed spec; every problem becomes one message naming the field,
the value, why it is wrong and what to do, and the whole list goes into the Invalid condition. No
exception reaches kopf.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from gpuval_api import keys
from gpuval_api.crd import GpuValidationSpec, RemediationMode
from gpuval_api.fabric import ExpectedTransport, FabricSpec
from gpuval_api.labels import MAX_LABEL_VALUE
from gpuval_api.remediation import Placeholder
from gpuval_operator import cron

# A qualified label key: an optional DNS-subdomain prefix and '/', then a name of at most 63.
_LABEL_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_PLACEHOLDER = re.compile(r"\$\([A-Z_]+\)")
# A remediation template bigger than this as JSON is refused (the CRD keeps its spec free-form).
MAX_TEMPLATE_BYTES = 8192
# NCCL_NET values that contradict an expected transport.
_NET_OF = {ExpectedTransport.IB: "socket", ExpectedTransport.SOCKET: "ib"}


def _loc(loc: tuple[int | str, ...]) -> str:
    path = "spec"
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def parse_spec(raw: Mapping[str, Any] | None) -> tuple[GpuValidationSpec | None, list[str]]:
    """The typed spec, or None and the reasons it is invalid."""
    try:
        spec = GpuValidationSpec.model_validate(dict(raw or {}))
    except ValidationError as exc:
        errors = []
        for err in exc.errors():
            value = err.get("input")
            shown = repr(value) if not isinstance(value, dict | list) else type(value).__name__
            errors.append(f"{_loc(tuple(err['loc']))}={shown}: {err['msg']}")
        return None, errors
    return spec, check_spec(spec)


def check_spec(spec: GpuValidationSpec) -> list[str]:
    errors: list[str] = []
    if spec.schedule is not None and not cron.is_valid(spec.schedule):
        errors.append(
            f"spec.schedule={spec.schedule!r}: not a cron expression; use 5 fields "
            "(minute hour day month weekday), e.g. '0 3 * * *', or a 6th for seconds"
        )
    errors += _count_or_percent("spec.maxConcurrent", spec.max_concurrent)
    errors += _count_or_percent("spec.nodeActions.maxNodes", spec.node_actions.max_nodes)
    burn = spec.checks.burn
    if burn.enabled:
        needed = burn.duration_seconds * len(burn.precisions)
        if spec.node_timeout_seconds <= needed:
            errors.append(
                f"spec.nodeTimeoutSeconds={spec.node_timeout_seconds}: not longer than the burn "
                f"alone ({needed:g}s: {len(burn.precisions)} precision(s) of "
                f"checks.burn.durationSeconds={burn.duration_seconds:g}), so every node would "
                f"time out; raise it above {needed:g} (with room for the other checks) or "
                "shorten the burn"
            )
    if spec.fabric is not None:
        errors += check_fabric(spec.fabric)
    if spec.remediation is not None:
        errors += check_remediation(spec)
    expected_gpus = spec.checks.driver.expected_gpus
    if (
        expected_gpus is not None
        and spec.expected is not None
        and spec.expected.gpu_count is not None
        and expected_gpus != spec.expected.gpu_count
    ):
        errors.append(
            f"spec.expected.gpuCount={spec.expected.gpu_count} disagrees with "
            f"spec.checks.driver.expectedGpus={expected_gpus}; set one of them"
        )
    return errors


def _count_or_percent(field: str, value: int | str) -> list[str]:
    """A node count >= 1 or a percentage from 1% to 100% (maxConcurrent, nodeActions.maxNodes)."""
    if isinstance(value, str):
        digits = value[:-1]
        if not value.endswith("%") or not digits.isdigit() or not 1 <= int(digits) <= 100:
            return [
                f"{field}={value!r}: a string must be a percentage from 1% to 100%; "
                "use e.g. '10%' or a node count like 4"
            ]
    elif value < 1:
        return [f"{field}={value}: must be at least 1 node"]
    return []


def label_key_problem(key: str) -> str | None:
    """Why `key` is not a valid Kubernetes label key, or None."""
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return "its prefix is not a DNS subdomain (lowercase letters, digits, '-' and '.')"
    if not _LABEL_NAME.match(name):
        return (
            "its name must be 1-63 letters, digits, '-', '_' or '.', starting and ending "
            "alphanumeric"
        )
    return None


def check_fabric(fabric: FabricSpec) -> list[str]:
    """What the schema cannot check about spec.fabric."""
    errors: list[str] = []
    if fabric.topology_key is not None:
        problem = label_key_problem(fabric.topology_key)
        if problem is not None:
            errors.append(
                f"spec.fabric.topologyKey={fabric.topology_key!r}: not a label key ({problem}); "
                "use a node label such as topology.kubernetes.io/zone"
            )
    names = [v.name for v in fabric.nccl_env]
    for name in sorted({n for n in names if names.count(n) > 1}):
        errors.append(
            f"spec.fabric.ncclEnv[{name}]: given {names.count(name)} times; give each variable once"
        )
    net = next((v.value for v in reversed(fabric.nccl_env) if v.name == "NCCL_NET"), None)
    contradicting = _NET_OF.get(fabric.expected_transport)
    if net is not None and contradicting is not None and net.lower() == contradicting:
        errors.append(
            f"spec.fabric.expectedTransport={fabric.expected_transport}: contradicts "
            f"spec.fabric.ncclEnv NCCL_NET={net!r}, which forces the other transport; drop "
            "NCCL_NET or set expectedTransport to match it"
        )
    return errors


def check_remediation(spec: GpuValidationSpec) -> list[str]:
    """What the schema cannot check about spec.remediation: a node in repair must be out of
    service (the breaker counts it, and only a pass returns it), and a template must make an
    object the API server can take."""
    remediation, actions = spec.remediation, spec.node_actions
    if remediation is None:
        return []
    errors: list[str] = []
    if actions.taint is None and not actions.cordon:
        errors.append(
            f"spec.remediation.mode={remediation.mode}: needs nodeActions.taint or "
            "nodeActions.cordon (both unset): a node in repair is out of service, counted by the "
            "circuit breaker, and returns to work only once it passes; set "
            "nodeActions.taint: {effect: NoSchedule}"
        )
    template = remediation.template
    if remediation.mode is not RemediationMode.TEMPLATE or template is None:
        return errors
    field = "spec.remediation.template"
    dumped = template.model_dump(mode="json", by_alias=True)
    size = len(json.dumps(dumped))
    if size > MAX_TEMPLATE_BYTES:
        errors.append(
            f"{field}={size} bytes as JSON: more than {MAX_TEMPLATE_BYTES}; keep the template to "
            "the fields the engine needs"
        )
    known = {p.value for p in Placeholder}
    unknown = sorted(set(_PLACEHOLDER.findall(json.dumps(dumped))) - known)
    if unknown:
        errors.append(
            f"{field}={', '.join(unknown)}: unknown placeholders; use {', '.join(sorted(known))}"
        )
    name, namespace = template.metadata.name, template.metadata.namespace
    if name is not None and not _DNS_SUBDOMAIN.match(_PLACEHOLDER.sub("x", name)):
        errors.append(
            f"{field}.metadata.name={name!r}: not a DNS subdomain (lowercase letters, digits, "
            "'-' and '.') once its placeholders are filled in"
        )
    if namespace is not None and not _DNS_LABEL.match(_PLACEHOLDER.sub("x", namespace)):
        errors.append(f"{field}.metadata.namespace={namespace!r}: not a namespace name")
    for key, value in sorted(template.metadata.labels.items()):
        if Placeholder.NODE_NAME in value or len(value) > MAX_LABEL_VALUE:
            errors.append(
                f"{field}.metadata.labels.{key}={value!r}: a node name can be longer than a label "
                f"value ({MAX_LABEL_VALUE}); gpuval labels the object with {keys.LABEL_NODE} "
                "itself"
            )
    return errors
