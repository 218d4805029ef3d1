"""spec.remediation and status.remediation of a GpuValidation: how a failed node is handed to the
cluster's repair engine, proven again under load after the repair, and left to a person when
repair does not help (docs/operator/remediation.md, "Remediation"). gpuval never reboots or resets
anything itself."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import ConfigDict, Field

from gpuval_api.crd.common import (
    MAX_SECONDS,
    CrdModel,
    LabelKey,
    LabelValue,
    cel_rules,
    map_bounds,
)
from gpuval_api.reasons import Reason, RepairAction
from gpuval_api.remediation import RepairEnd, RepairState

# A request's object, as one node and one failure name it: namespace/name, at most this long.
OBJECT_REF_LENGTH = 317

DEFAULT_MAX_REPAIRS = 2
DEFAULT_WINDOW_SECONDS = 86400
DEFAULT_TIMEOUT_SECONDS = 3600


class RemediationMode(StrEnum):
    """How a failed node is handed to the repair engine."""

    # The node condition GpuRepairRequested=True (reason: the action), which a NodeHealthCheck or
    # MachineHealthCheck `unhealthyConditions` entry acts on.
    CONDITION = "Condition"
    # One object made from spec.remediation.template (the External Remediation convention:
    # NVSentinel's RebootNode and GPUReset, Medik8s' SelfNodeRemediation).
    TEMPLATE = "Template"


class TemplateMetadata(CrdModel):
    """The metadata of the objects made from the template."""

    name: str | None = Field(
        default=None,
        min_length=1,
        max_length=253,
        description=(
            "The object's name; placeholders are filled in, e.g. $(NODE_NAME) (a "
            "SelfNodeRemediation must be named after its node). Unset: "
            "gpuval-<node>-<hash of the validation>, the same for every failure of the node."
        ),
    )
    namespace: str | None = Field(
        default=None,
        min_length=1,
        max_length=63,
        description=(
            "Its namespace, for a namespaced kind (the engine's); unset for a cluster-scoped one."
        ),
    )
    labels: dict[LabelKey, LabelValue] = Field(
        default_factory=dict,
        json_schema_extra=map_bounds(317),
        description=(
            "Labels added to gpuval's own (gpuval.dev/validation, gpuval.dev/node, "
            "gpuval.dev/repair); values at most 63 characters after placeholders are filled in."
        ),
    )
    annotations: dict[LabelKey, Annotated[str, Field(max_length=1024)]] = Field(
        default_factory=dict,
        json_schema_extra=map_bounds(317),
        description="Annotations; placeholders are filled in.",
    )


class RemediationTemplate(CrdModel):
    """The object gpuval makes for a node whose failure asks for a GPU reset or a reboot: the
    External Remediation convention (kind, apiVersion, metadata, spec). Strings may hold the
    placeholders $(NODE_NAME), $(GPU_UUIDS), $(GPU_PCI_BUS_IDS), $(REASON), $(ACTION),
    $(VALIDATION) and $(REPAIR_ID); a string that is exactly $(GPU_UUIDS) or $(GPU_PCI_BUS_IDS)
    becomes the list."""

    api_version: str = Field(
        min_length=3,
        max_length=253,
        pattern=r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?v[0-9]+[a-z0-9]*$",
        description="The engine's API group and version, e.g. janitor.dgxc.nvidia.com/v1alpha1.",
    )
    kind: str = Field(
        min_length=1,
        max_length=63,
        pattern=r"^[A-Z][A-Za-z0-9]*$",
        description="Its kind, e.g. RebootNode, GPUReset or SelfNodeRemediation.",
    )
    metadata: TemplateMetadata = Field(
        default_factory=TemplateMetadata, description="Name, namespace, labels, annotations."
    )
    spec: dict[str, Any] = Field(
        default_factory=dict,
        description=(
            "The object's spec, as the engine's CRD defines it, e.g. {nodeName: $(NODE_NAME), "
            "force: false} for a RebootNode (at most 8 KiB as JSON)."
        ),
    )


class Remediation(CrdModel):
    """Hand a failed node whose failure asks for a GPU reset or a reboot to the cluster's repair
    engine, validate it again under load once the repair ended, and leave it to a person when
    repair does not help. Needs nodeActions.taint or nodeActions.cordon: a node in repair is out
    of service, counted by the circuit breaker, and returns to service only when it passes."""

    model_config = ConfigDict(
        json_schema_extra=cel_rules(
            (
                "self.mode != 'Template' || has(self.template)",
                "mode Template needs a template (apiVersion, kind, metadata, spec)",
            ),
        )
    )

    mode: RemediationMode = Field(
        default=RemediationMode.CONDITION,
        description=(
            "Condition: set the node condition GpuRepairRequested=True (reason: ResetGpu or "
            "Reboot) for a NodeHealthCheck or MachineHealthCheck to act on. Template: make one "
            "object from `template` per node and failure."
        ),
    )
    max_repairs: int = Field(
        default=DEFAULT_MAX_REPAIRS,
        ge=1,
        le=10,
        description=(
            "Repairs asked for a node within windowSeconds; a node that fails again after this "
            "many gets NeedsRepair (a label, a condition, an Event, an alert) and no further "
            "request."
        ),
    )
    window_seconds: int = Field(
        default=DEFAULT_WINDOW_SECONDS,
        ge=60,
        le=30 * 86400,
        description="The window maxRepairs counts in (a day by default).",
    )
    timeout_seconds: int = Field(
        default=DEFAULT_TIMEOUT_SECONDS,
        ge=60,
        le=MAX_SECONDS,
        description=(
            "A repair that has not ended within this (no object done, no reboot) is taken as "
            "ended: the node is validated again under load, so a silent engine never holds a "
            "breaker slot for good."
        ),
    )
    template: RemediationTemplate | None = Field(
        default=None, description="The object to make in mode Template."
    )


class RepairNode(CrdModel):
    """One node's way through the repair loop, with its times (RFC 3339)."""

    node: str = Field(max_length=253, description="Node name.")
    state: RepairState = Field(
        description=(
            "Requested, Revalidating, FailedAgain, Repaired, NeedsRepair, or Cancelled (its "
            "object deleted before it ended: not counted, not asked again until it fails anew)."
        )
    )
    reason: Reason | None = Field(default=None, description="The failure's reason.")
    action: RepairAction = Field(description="The action asked for: ResetGpu or Reboot.")
    repairs: int = Field(default=0, description="Repairs asked within the window.")
    failed_at: str | None = Field(
        default=None, description="When it failed.", json_schema_extra={"format": "date-time"}
    )
    requested_at: str | None = Field(
        default=None,
        description="When the last repair was asked.",
        json_schema_extra={"format": "date-time"},
    )
    object: str | None = Field(
        default=None,
        max_length=OBJECT_REF_LENGTH,
        description="The last request's object (mode Template), namespace/name.",
    )
    ended_at: str | None = Field(
        default=None,
        description="When the last repair ended.",
        json_schema_extra={"format": "date-time"},
    )
    ended_by: RepairEnd | None = Field(
        default=None,
        description="How its end was seen: Done, Failed, Rebooted, Gone, TimedOut or Person.",
    )
    revalidated_at: str | None = Field(
        default=None,
        description="When its validation after the repair gave a verdict.",
        json_schema_extra={"format": "date-time"},
    )
    back_in_service_at: str | None = Field(
        default=None,
        description="When it passed after the repair and returned to service.",
        json_schema_extra={"format": "date-time"},
    )


class RemediationStatus(CrdModel):
    """The nodes in the repair loop (spec.remediation), across runs."""

    in_repair: int = Field(
        default=0,
        description="Nodes whose repair is asked or being proven (Requested, Revalidating).",
    )
    needs_repair: int = Field(default=0, description="Nodes that need a person (NeedsRepair).")
    nodes: list[RepairNode] = Field(
        default_factory=list,
        max_length=50,
        description=(
            "Nodes in the loop, or back in service after a repair within the window, at most 50 "
            "(NeedsRepair first)."
        ),
    )
    nodes_omitted: int = Field(default=0, description="Nodes beyond the listed ones.")
