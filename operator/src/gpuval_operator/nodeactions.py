"""Node actions: labels with the verdict, and the taint and cordon the spec asks for on failing
nodes.

`plan_node_patch` is pure: given the node as it is now and the verdict, it returns the JSON merge
patch that brings the node to the wanted state, or None when nothing changes. It only ever touches
gpuval.dev/ keys, the gpuval.dev/unhealthy taint and a cordon it made itself (recorded in an
annotation): an administrator's cordon or taints are never changed. The patch carries the node's
resourceVersion because merge patch replaces the whole taint list: a concurrent change makes it fail
with 409 and the caller plans again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuval_api import keys
from gpuval_api.crd import NodeActions
from gpuval_api.result import Verdict
from gpuval_operator import names


def plan_node_patch(
    node: Mapping[str, Any],
    *,
    validation: str,
    passed: bool,
    reason: str | None,
    actions: NodeActions,
    now: float,
) -> dict[str, Any] | None:
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    label_patch: dict[str, str | None] = {}
    annotation_patch: dict[str, str | None] = {}
    spec_patch: dict[str, Any] = {}

    if actions.label:
        label_patch[keys.NODE_LABEL_VERDICT] = (
            keys.NODE_VERDICT_PASSED if passed else keys.NODE_VERDICT_FAILED
        )
        label_patch[keys.NODE_LABEL_VALIDATED_AT] = str(int(now))
        label_patch[keys.NODE_LABEL_REASON] = None if passed else names.label_value(reason or "")
        annotation_patch[keys.NODE_ANNOTATION_VALIDATION] = validation

    taints: list[dict[str, Any]] = list(spec.get("taints") or [])
    others = [t for t in taints if t.get("key") != keys.TAINT_KEY]
    wanted = list(others)
    if not passed and actions.taint is not None:
        wanted.append(
            {
                "key": keys.TAINT_KEY,
                "value": names.label_value(reason or Verdict.FAILED),
                "effect": str(actions.taint.effect),
            }
        )
    if wanted != taints:
        spec_patch["taints"] = wanted

    cordoned_by = annotations.get(keys.NODE_ANNOTATION_CORDONED_BY)
    if not passed and actions.cordon and not spec.get("unschedulable"):
        spec_patch["unschedulable"] = True
        annotation_patch[keys.NODE_ANNOTATION_CORDONED_BY] = validation
    elif (passed or not actions.cordon) and cordoned_by is not None:
        spec_patch["unschedulable"] = None
        annotation_patch[keys.NODE_ANNOTATION_CORDONED_BY] = None

    label_patch = {k: v for k, v in label_patch.items() if labels.get(k) != v}
    annotation_patch = {k: v for k, v in annotation_patch.items() if annotations.get(k) != v}
    if not label_patch and not annotation_patch and not spec_patch:
        return None
    patch: dict[str, Any] = {"metadata": {"resourceVersion": meta.get("resourceVersion")}}
    if label_patch:
        patch["metadata"]["labels"] = label_patch
    if annotation_patch:
        patch["metadata"]["annotations"] = annotation_patch
    if spec_patch:
        patch["spec"] = spec_patch
    return patch
