"""The GpuValidation's status: the bounded summary of its current run (per-node detail lives in
the GpuNodeReports), with its conditions."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from gpuval_api.baselinemodel import BaselineRunStatus
from gpuval_api.conditions import ConditionType
from gpuval_api.crd.common import OUTLIER_VALUE_LENGTH, CrdModel
from gpuval_api.crd.remediation import RemediationStatus
from gpuval_api.fabric.summary import FabricRunStatus
from gpuval_api.reasons import Reason
from gpuval_api.training.runstatus import TrainingRunStatus


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(CrdModel):
    """A Kubernetes-style condition."""

    type: ConditionType = Field(
        description=(
            "Succeeded, NodesHealthy, Uniform, Invalid, NodeActionsHeld or SystemicFailure."
        )
    )
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: str = Field(max_length=128, description="CamelCase reason.")
    message: str = Field(default="", max_length=1024, description="Human-readable detail.")
    observed_generation: int = Field(
        description="The spec generation the condition was computed for."
    )
    last_transition_time: str = Field(
        description="When the status last changed (RFC 3339).",
        json_schema_extra={"format": "date-time"},
    )


class NodeCounts(CrdModel):
    """Node counts of the current run."""

    total: int = Field(default=0, description="Nodes selected for the run.")
    pending: int = Field(default=0, description="Nodes not started yet (waiting for their wave).")
    waiting: int = Field(
        default=0,
        description=(
            "Nodes whose agent pod the API server refuses for now (a ResourceQuota that admits "
            "fewer pods at once, an admission policy; condition AgentPodsRefused): not tested "
            "yet, not NotRun, created again in the same run."
        ),
    )
    running: int = Field(
        default=0,
        description=(
            "Nodes whose agent pod exists and has no verdict yet, or that passed their local "
            "checks and wait for their fabric verdict (spec.fabric)."
        ),
    )
    passed: int = Field(default=0, description="Nodes that passed.")
    failed: int = Field(default=0, description="Nodes that failed.")
    not_run: int = Field(
        default=0, description="Nodes gpuval could not test (after every attempt): no action."
    )


class DryRunAction(CrdModel):
    """What would have been done to a node (nodeActions.dryRun)."""

    node: str = Field(max_length=253, description="Node name.")
    actions: str = Field(max_length=1024, description="The changes, e.g. taint, cordon, labels.")


class FailingNode(CrdModel):
    """One failing node, for the bounded list in the status."""

    node: str = Field(max_length=253, description="Node name.")
    reason: Reason = Field(description="The failure's reason (a gpuval Reason).")
    message: str = Field(default="", max_length=1024, description="One line about the failure.")


class UnhealthyDevice(CrdModel):
    """A device of a node's agent-pod claim that the kubelet does not report Healthy
    (KEP-4680, spec.agent.devices dra); the node's report keeps every device's word."""

    node: str = Field(max_length=253, description="Node name.")
    resource_id: str = Field(
        max_length=512, description="The device as <driver>/<pool>/<device> (its ResourceSlice's)."
    )
    health: str = Field(max_length=16, description="Unhealthy or Unknown.")
    message: str = Field(default="", max_length=1024, description="Why, when the driver said.")


class Outlier(CrdModel):
    """One node whose environment value differs from the expected or majority value."""

    field: str = Field(max_length=64, description="Environment field, e.g. driverVersion.")
    node: str = Field(max_length=253, description="Node name.")
    value: str = Field(max_length=OUTLIER_VALUE_LENGTH, description="The node's value.")
    expected: str = Field(
        max_length=OUTLIER_VALUE_LENGTH,
        description="The expected value (from the spec) or the majority value.",
    )
    source: str = Field(max_length=16, description="Where `expected` came from: spec or majority.")


class RunTrigger(StrEnum):
    """What started a run (`status.run.trigger`)."""

    CREATED = "created"
    SPEC_CHANGED = "spec-changed"
    SCHEDULE = "schedule"
    # spec.maxProofAgeSeconds: a run over the selected nodes whose proof grew too old.
    PROOF_EXPIRED = "proof-expired"


class NodeTrigger(StrEnum):
    """Why a node was added to the current run after it started (spec.gating, spec.retry)."""

    JOINED = "joined"
    REBOOTED = "rebooted"
    STACK_CHANGED = "stack-changed"
    RETRY = "retry"
    REPAIRED = "repaired"  # spec.remediation: its repair ended, proven again under load


class RunInfo(CrdModel):
    """One run: a pass over the selected nodes."""

    id: str = Field(description="Run id; labels gpuval.dev/run of its reports and pods.")
    number: int = Field(description="Run number, 1 for the first run of this GpuValidation.")
    generation: int = Field(description="Spec generation the run was started for.")
    trigger: RunTrigger = Field(
        description=(
            "What started it: created, spec-changed, schedule or proof-expired "
            "(spec.maxProofAgeSeconds)."
        )
    )
    started_at: str = Field(
        description="Start time (RFC 3339).", json_schema_extra={"format": "date-time"}
    )
    completed_at: str | None = Field(
        default=None, description="End time (RFC 3339).", json_schema_extra={"format": "date-time"}
    )


class ProofStatus(CrdModel):
    """spec.maxProofAgeSeconds: how many of the selected nodes' GPUs were proven within the age
    (docs/operator/proof-age.md)."""

    max_age_seconds: int = Field(description="spec.maxProofAgeSeconds as it was applied.")
    within_age: int = Field(default=0, description="Selected nodes proven within the age.")
    stale: int = Field(
        default=0, description="Selected nodes whose proof is older, absent or void (failed)."
    )
    oldest: str | None = Field(
        default=None,
        description="The oldest proof of a selected node (RFC 3339); unset: none has one.",
        json_schema_extra={"format": "date-time"},
    )
    next_expiry_at: str | None = Field(
        default=None,
        description="When the next proof outgrows the age: a proof-expired run starts then.",
        json_schema_extra={"format": "date-time"},
    )


class CapacityCounts(CrdModel):
    """Counts by healthy-capacity state (gpuval_api.capacity.CapacityState)."""

    healthy: int = Field(default=0, description="Passed, and proven within the age when set.")
    stale: int = Field(
        default=0, description="Passed, but the proof is older than spec.maxProofAgeSeconds."
    )
    untested: int = Field(default=0, description="No tested verdict yet (never tested, NotRun).")
    failed: int = Field(default=0, description="Failed (GPUs: those the report names).")
    withheld: int = Field(
        default=0,
        description="GPUs only: a failed node's other GPUs, out of service with their node.",
    )
    repair: int = Field(default=0, description="Repair asked or being proven again.")
    needs_person: int = Field(default=0, description="NeedsRepair: a person takes over.")


class CapacityStatus(CrdModel):
    """Healthy capacity: the selected GPUs and nodes by state, each in one
    (docs/operator/capacity.md)."""

    gpus: CapacityCounts = Field(description="The selected nodes' GPUs by state.")
    nodes: CapacityCounts = Field(description="The selected nodes by state (withheld: 0).")
    healthy_ratio: str = Field(
        description="Healthy GPUs over the selected GPUs, as a decimal string (1 when none)."
    )


class GpuValidationStatus(CrdModel):
    """The bounded summary of the current run; per-node detail lives in the GpuNodeReports."""

    observed_generation: int | None = Field(
        default=None, description="Spec generation last acted on."
    )
    phase: str | None = Field(
        default=None,
        description="For display only: Pending, Running, Succeeded, Failed or Invalid.",
    )
    run: RunInfo | None = Field(default=None, description="The current (or last) run.")
    last_completed_run: RunInfo | None = Field(default=None, description="The last completed run.")
    next_run_at: str | None = Field(
        default=None,
        description="When the schedule starts the next run (RFC 3339).",
        json_schema_extra={"format": "date-time"},
    )
    nodes: NodeCounts | None = Field(default=None, description="Node counts of the current run.")
    failing_nodes: list[FailingNode] = Field(
        default_factory=list,
        max_length=50,
        description="Failing nodes of the current run, at most 50 (see failingNodesOmitted).",
    )
    failing_nodes_omitted: int = Field(
        default=0, description="Failing nodes beyond the listed ones (see the GpuNodeReports)."
    )
    not_run_nodes: list[FailingNode] = Field(
        default_factory=list,
        max_length=50,
        description="Nodes gpuval could not test in the current run (no action taken), at most 50.",
    )
    not_run_nodes_omitted: int = Field(default=0, description="NotRun nodes beyond the listed.")
    nodes_without_devices: list[str] = Field(
        default_factory=list,
        max_length=50,
        description=(
            "With spec.agent.devices dra: nodes spec.nodeSelector selects (Ready, schedulable) "
            "for which the DRA driver publishes no device, left out of the run, at most 50."
        ),
    )
    nodes_without_devices_omitted: int = Field(
        default=0, description="Nodes without devices beyond the listed."
    )
    unhealthy_devices: list[UnhealthyDevice] = Field(
        default_factory=list,
        max_length=50,
        description=(
            "Devices of the run's agent-pod claims the kubelet reports not Healthy "
            "(spec.agent.devices dra), at most 50."
        ),
    )
    unhealthy_devices_omitted: int = Field(
        default=0, description="Unhealthy devices beyond the listed."
    )
    dry_run: list[DryRunAction] = Field(
        default_factory=list,
        max_length=50,
        description="With nodeActions.dryRun: what would have been done, at most 50 nodes.",
    )
    dry_run_omitted: int = Field(default=0, description="Dry-run entries beyond the listed.")
    outliers: list[Outlier] = Field(
        default_factory=list, max_length=50, description="Uniformity outliers, at most 50."
    )
    outliers_omitted: int = Field(default=0, description="Outliers beyond the listed ones.")
    fabric: FabricRunStatus | None = Field(
        default=None, description="The run's fabric phase (spec.fabric): counts and worst groups."
    )
    baseline: BaselineRunStatus | None = Field(
        default=None,
        description="The run against its baselines (spec.baseline): judged, below, systemic.",
    )
    training: TrainingRunStatus | None = Field(
        default=None,
        description=(
            "The run's training losses once it completed: how each stack's nodes were compared "
            "(bit for bit, within train.lossTolerance, not at all) and why, and the stacks that "
            "could not be decided (TrainingUndecided)."
        ),
    )
    remediation: RemediationStatus | None = Field(
        default=None,
        description=(
            "spec.remediation: the nodes in the repair loop, with their times (across runs)."
        ),
    )
    proof: ProofStatus | None = Field(
        default=None,
        description="spec.maxProofAgeSeconds: the nodes proven within the age, the oldest.",
    )
    capacity: CapacityStatus | None = Field(
        default=None,
        description="Healthy capacity: the selected GPUs and nodes by state.",
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        description=(
            "Succeeded, NodesHealthy, Uniform, Invalid, NodeActionsHeld and SystemicFailure."
        ),
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
