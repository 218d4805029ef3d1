"""The GpuNodeReport kind: one node's result of one run, written by its agent (or by the operator
when the agent could not), owned by its GpuValidation."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import ConfigDict, Field

from gpuval_api import figures
from gpuval_api.baselinemodel import MAX_HISTORY, HistoryEntry
from gpuval_api.crd.common import API_VERSION, REPORT_KIND, CrdModel, ObjectMeta, cel_rules
from gpuval_api.evidence import EvidenceStatus
from gpuval_api.fabric import FabricStatus
from gpuval_api.figures.model import with_figures
from gpuval_api.reasons import Reason
from gpuval_api.report import REPORT_VERDICTS, ReportPhase, Settler
from gpuval_api.result import Verdict


class GpuNodeReportSpec(CrdModel):
    """Which node and run the report is for; set by the operator at creation, immutable."""

    model_config = ConfigDict(
        json_schema_extra=cel_rules(("self == oldSelf", "the spec of a GpuNodeReport is immutable"))
    )

    validation: str = Field(min_length=1, description="Name of the owning GpuValidation.")
    run: str = Field(min_length=1, description="Run id (the GpuValidation's status.run.id).")
    node: str = Field(min_length=1, description="Node name.")
    history: list[HistoryEntry] = Field(
        default_factory=list,
        max_length=MAX_HISTORY,
        description=(
            "The node's key figures in its last runs before this one, oldest first "
            "(spec.baseline.history.runs of them), carried from report to report."
        ),
    )


class _ReportSummary(CrdModel):
    """Worst GPU of the node for each figure; absent when not measured."""

    gpu_count: int | None = Field(default=None, description="GPUs the agent saw.")


# One field per summary figure of the registry (gpuval_api.figures), keyed and described there.
if TYPE_CHECKING:
    ReportSummary = _ReportSummary
else:
    ReportSummary = with_figures(
        _ReportSummary, "ReportSummary", figures.summary_figures(), bounded=False
    )


class ReportFailure(CrdModel):
    """One failed finding."""

    check: str = Field(description="Check name, or agent for failures the operator records.")
    gpu: int | None = Field(default=None, description="GPU index, when about one GPU.")
    reason: Reason = Field(description="The finding's reason (a gpuval Reason).")
    hint: str = Field(default="", description="What to do about it.")
    message: str = Field(default="", description="One line about the failure.")


# The kubelet's word on a device that is fine (KEP-4680: Healthy, Unhealthy or Unknown).
DEVICE_HEALTHY = "Healthy"
# NVIDIA's DRA driver publishes up to 8 GPUs, or 56 MIG devices (7 on each of 8 GPUs), per node.
MAX_DEVICE_HEALTH = 64


class DeviceHealth(CrdModel):
    """The kubelet's word on one device of the agent pod's claims (KEP-4680)."""

    resource_id: str = Field(
        max_length=512, description="The device as <driver>/<pool>/<device> (its ResourceSlice's)."
    )
    health: str = Field(max_length=16, description="Healthy, Unhealthy or Unknown.")
    claim: str = Field(default="", max_length=320, description="The pod's claim and request.")
    message: str | None = Field(default=None, max_length=1024, description="Why, when said.")


class GpuNodeReportStatus(CrdModel):
    """Written by the node's agent (docs/contracts.md), or by the operator when it could not."""

    phase: ReportPhase | None = Field(
        default=None, description="Running or Completed; absent until the agent starts."
    )
    verdict: Verdict | None = Field(
        default=None,
        json_schema_extra={"enum": [str(v) for v in REPORT_VERDICTS]},
        description="Passed or Failed; absent while running.",
    )
    reason: Reason | None = Field(
        default=None, description="The first failure's reason; absent when passed."
    )
    message: str | None = Field(default=None, description="One line about the result.")
    started_at: str | None = Field(
        default=None,
        description="Agent start (RFC 3339).",
        json_schema_extra={"format": "date-time"},
    )
    completed_at: str | None = Field(
        default=None,
        description="Completion (RFC 3339).",
        json_schema_extra={"format": "date-time"},
    )
    summary: ReportSummary | None = Field(
        default=None, description="Worst-GPU figures of the node."
    )
    failures: list[ReportFailure] = Field(
        default_factory=list, max_length=16, description="Failed findings, at most 16."
    )
    result: dict[str, Any] | None = Field(
        default=None,
        description=(
            "The agent's whole result document (schema gpuval.dev/v1alpha1/result, api/schemas/)."
        ),
    )
    fabric: FabricStatus | None = Field(
        default=None,
        description="The node's cross-node NCCL result, when the run tests the fabric.",
    )
    evidence: EvidenceStatus | None = Field(
        default=None,
        description=(
            "A failing node's evidence bundle (gzip+base64 JSON, at most 64 KiB; "
            "`kubectl gpuval evidence NODE` writes it to a file)."
        ),
    )
    settled_by: Settler | None = Field(
        default=None,
        description=(
            "operator: the operator wrote this verdict itself (the agent could not, or the run "
            "overruled it); the agents' admission policy then refuses their writes to the "
            "report. Cleared before a node's next attempt."
        ),
    )
    device_health: list[DeviceHealth] | None = Field(
        default=None,
        max_length=MAX_DEVICE_HEALTH,
        description=(
            "The health the kubelet reported for the devices of the agent pod's ResourceClaims "
            "(its containerStatuses' allocatedResourcesStatus, KEP-4680), as the operator saw it; "
            "absent where the cluster reports none."
        ),
    )


class GpuNodeReport(CrdModel):
    """One node's result of one run."""

    api_version: str = API_VERSION
    kind: str = REPORT_KIND
    metadata: ObjectMeta
    spec: GpuNodeReportSpec
    status: GpuNodeReportStatus | None = None
