"""The gpuval custom resources as typed models: the one source the CRDs in crds/ are generated from.

`GpuValidation` (cluster-scoped, short name `gpuval`) asks for a validation of a set of GPU
nodes; `GpuNodeReport` (cluster-scoped, short name `gpureport`, one per node and run, owned by its
GpuValidation) holds one node's result; `GpuBaseline` (cluster-scoped, short name `gpubaseline`)
holds what healthy nodes of one GPU stack measure (gpuval_api.baseline); `kubectl get gpuval-all`
lists all three. Every field carries a description because it becomes the CRD field's description
(`kubectl explain`). Cross-field constraints the schema can express are CEL rules here; the rest
are checked by the operator (`gpuval_operator.spec`).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from gpuval_api.baseline.model import (
    MAX_HISTORY,
    BaselineRunStatus,
    BaselineSettings,
    GpuBaselineSpec,
    HistoryEntry,
)
from gpuval_api.checks import ChecksConfig
from gpuval_api.conditions import ConditionType
from gpuval_api.evidence import EvidenceStatus
from gpuval_api.fabric import FabricSpec, FabricStatus
from gpuval_api.fabricsummary import FabricRunStatus
from gpuval_api.kueue import queue_field
from gpuval_api.reasons import Reason
from gpuval_api.report import REPORT_VERDICTS, ReportPhase, Settler
from gpuval_api.result import Verdict

GROUP = "gpuval.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

VALIDATION_KIND = "GpuValidation"
VALIDATION_PLURAL = "gpuvalidations"
REPORT_KIND = "GpuNodeReport"
REPORT_PLURAL = "gpunodereports"
BASELINE_KIND = "GpuBaseline"
BASELINE_PLURAL = "gpubaselines"
# `kubectl get gpuval NAME` reads a short name; `kubectl get gpuval-all` the category of both kinds.
# kubectl expands a category before it looks up a short name, so the two must differ: with both
# `gpuval`, `kubectl get gpuval fleet` failed with "you must specify only one resource".
VALIDATION_SHORT_NAME = "gpuval"
REPORT_SHORT_NAME = "gpureport"
BASELINE_SHORT_NAME = "gpubaseline"
CATEGORY = "gpuval-all"

GPU_RESOURCE = "nvidia.com/gpu"


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


def _rules(*rules: tuple[str, str]) -> dict[str, Any]:
    """CEL rules as `x-kubernetes-validations` (rule, message) for a model's or field's schema."""
    return {"x-kubernetes-validations": [{"rule": rule, "message": msg} for rule, msg in rules]}


def _rules_and(extra: dict[str, Any], *rules: tuple[str, str]) -> dict[str, Any]:
    return {**extra, **_rules(*rules)}


# Bounds on everything a user writes into a spec: the API server refuses bigger input, so nothing
# unbounded is ever copied into a status (issue 9: a 10 KiB driverVersion grew every outlier entry).
MAX_ITEMS = 64
MAX_NODES = 100_000
# nodeActions.maxNodes: NVSentinel's circuit breaker trips at 50 % of the cluster's nodes cordoned
# within 5 minutes, and AMD's GPU operator caps parallel remediation only when asked (its
# maxParallelWorkflows defaults to 0, no limit). A validation's thresholds are the likeliest
# thing to be wrong for a fleet (a new GPU model, a driver update), so gpuval takes at most a
# tenth of the nodes it selects out of service before a person looks (docs/operator.md).
DEFAULT_MAX_NODES_OUT_OF_SERVICE = "10%"
MAX_GPUS_PER_NODE = 64
MAX_SECONDS = 7 * 86400
VERSION_LENGTH = 64
PRODUCT_LENGTH = 128
# What the status copies from agents' environment records is cut to this.
OUTLIER_VALUE_LENGTH = 128


def _map_bounds(key_length: int) -> dict[str, Any]:
    """A map's size and its keys' length (a structural schema has no propertyNames)."""
    return _rules_and(
        {"maxProperties": MAX_ITEMS},
        (f"self.all(k, size(k) <= {key_length})", f"keys are at most {key_length} characters"),
    )


# A qualified label key: an optional DNS-subdomain prefix (253) and '/', then a 63-char name.
LabelKey = Annotated[str, Field(min_length=1, max_length=317)]
LabelValue = Annotated[str, Field(max_length=63)]
ResourceName = Annotated[str, Field(min_length=1, max_length=317)]
Quantity = Annotated[str, Field(min_length=1, max_length=64)]


class SelectorOperator(StrEnum):
    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"


class SelectorRequirement(_Model):
    """One label requirement (Kubernetes LabelSelectorRequirement)."""

    model_config = ConfigDict(
        json_schema_extra=_rules(
            (
                "self.operator in ['In', 'NotIn'] ? size(self.values) > 0 : size(self.values) == 0",
                "values must be non-empty for In/NotIn and empty for Exists/DoesNotExist",
            )
        )
    )

    key: LabelKey = Field(description="Label key the requirement applies to.")
    operator: SelectorOperator = Field(description="How the key's value is matched.")
    values: list[LabelValue] = Field(
        default_factory=list,
        max_length=MAX_ITEMS,
        description="Values for In and NotIn; empty for Exists and DoesNotExist.",
    )


class NodeSelector(_Model):
    """A Kubernetes label selector over nodes."""

    match_labels: dict[LabelKey, LabelValue] = Field(
        default_factory=dict,
        json_schema_extra=_map_bounds(317),
        description="Labels a node must carry with exactly these values.",
    )
    match_expressions: list[SelectorRequirement] = Field(
        default_factory=list,
        max_length=MAX_ITEMS,
        description="Label requirements a node must meet, all of them.",
    )

    def to_query(self) -> str:
        """The selector in the `labelSelector` query syntax the API server filters with."""
        parts = [f"{key}={value}" for key, value in sorted(self.match_labels.items())]
        for req in self.match_expressions:
            match req.operator:
                case SelectorOperator.IN:
                    parts.append(f"{req.key} in ({','.join(req.values)})")
                case SelectorOperator.NOT_IN:
                    parts.append(f"{req.key} notin ({','.join(req.values)})")
                case SelectorOperator.EXISTS:
                    parts.append(req.key)
                case SelectorOperator.DOES_NOT_EXIST:
                    parts.append(f"!{req.key}")
        return ",".join(parts)


class ExpectedEnvironment(_Model):
    """Values every node must show; a node that differs is an outlier even when all nodes agree."""

    driver_version: str | None = Field(
        default=None,
        max_length=VERSION_LENGTH,
        description="NVIDIA driver version, e.g. 580.159.04.",
    )
    cuda_driver_version: str | None = Field(
        default=None,
        pattern=r"^\d+\.\d+$",
        max_length=VERSION_LENGTH,
        description="Highest CUDA version the driver supports (major.minor), e.g. 13.0.",
    )
    nccl_version: str | None = Field(
        default=None, max_length=VERSION_LENGTH, description="NCCL version, e.g. 2.28.9."
    )
    gpu_product: str | None = Field(
        default=None,
        max_length=PRODUCT_LENGTH,
        description="GPU model name as NVML reports it, e.g. NVIDIA H200.",
    )
    gpu_count: int | None = Field(
        default=None, ge=1, le=MAX_GPUS_PER_NODE, description="GPUs per node."
    )


class TaintEffect(StrEnum):
    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


class FailureTaint(_Model):
    """The taint put on a failing node (key gpuval.dev/unhealthy, value the failure's reason)."""

    effect: TaintEffect = Field(
        default=TaintEffect.NO_SCHEDULE,
        description="Taint effect; NoExecute also evicts running pods.",
    )


class NodeActions(_Model):
    """What the operator does to validated nodes. It only ever removes what it set itself."""

    label: bool = Field(
        default=True,
        description=(
            "Label every validated node with gpuval.dev/verdict (passed/failed/not-run) and "
            "gpuval.dev/validated-at (Unix seconds), and set its GpuValidated condition."
        ),
    )
    taint: FailureTaint | None = Field(
        default=None,
        description=(
            "Taint failing nodes with gpuval.dev/unhealthy; removed when the node passes again."
        ),
    )
    cordon: bool = Field(
        default=False, description="Cordon failing nodes; uncordoned when the node passes again."
    )
    dry_run: bool = Field(
        default=False,
        description=(
            "Touch no node: record what would be done (labels, taint, cordon, condition) in "
            "status.dryRun and in Events instead."
        ),
    )
    max_nodes: int | str = Field(
        default=DEFAULT_MAX_NODES_OUT_OF_SERVICE,
        json_schema_extra=_rules_and(
            {"maximum": MAX_NODES, "maxLength": 4},
            (
                "type(self) == int ? self >= 1 : self.matches('^([1-9][0-9]?|100)%$')",
                "maxNodes must be a node count >= 1 or a percentage from 1% to 100%",
            ),
        ),
        description=(
            "Circuit breaker: most nodes this validation holds out of service (tainted or "
            "cordoned) at once, a count (e.g. 4) or a percentage of the selected nodes (e.g. "
            "10%), rounded up, at least 1. Past it the taint and cordon of further failing "
            "nodes are held (condition NodeActionsHeld) until a release (kubectl gpuval "
            "release) or a later run under the limit; their label and condition are written."
        ),
    )
    systemic_fraction: float = Field(
        default=0.5,
        gt=0,
        le=1,
        description=(
            "A reason shared by more than this fraction of the run's tested nodes (and by at "
            "least systemicMinNodes) is systemic: the spec or the fleet's stack is the likely "
            "cause, not the nodes (condition SystemicFailure), and the taint and cordon of "
            "those failures are held even under maxNodes. 1 turns it off."
        ),
    )
    systemic_min_nodes: int = Field(
        default=3,
        ge=2,
        le=MAX_NODES,
        description=(
            "Fewest nodes failing with one reason for it to be systemic (so 1 of 2 is not). "
            "A failure's taint and cordon wait while the nodes of the run still to be tested "
            "could make its reason systemic, so a fleet-wide cause shows before the first "
            "nodes are acted on; its label and condition do not wait."
        ),
    )


class RetryPolicy(_Model):
    """How a node gpuval could not test (NotRun: GPUs busy, pod evicted...) is tried again."""

    attempts: int = Field(
        default=2, ge=1, le=10, description="Attempts per node and run, the first included."
    )
    backoff_seconds: int = Field(
        default=300, ge=0, le=86400, description="Wait before the next attempt."
    )


class StartupTaint(_Model):
    """A taint nodes register with (kubelet --register-with-taints) to take no work until
    validated; gpuval removes it when the node passes and keeps it when it fails."""

    key: LabelKey = Field(description="Taint key, e.g. gpuval.dev/unvalidated.")
    effect: TaintEffect = Field(default=TaintEffect.NO_SCHEDULE, description="Taint effect.")


class Gating(_Model):
    """Validate nodes as they change, not only on a schedule: every selected node that joins,
    reboots (its boot ID changes) or changes its GPU stack (driver, CUDA, GPU count) is added to
    the current run, arrivals batched over a short window."""

    join: bool = Field(default=True, description="Validate a node that joins (or was never).")
    reboot: bool = Field(default=True, description="Validate a node again after a reboot.")
    stack_change: bool = Field(
        default=True,
        description=(
            "Validate a node again when its driver, CUDA or GPU count changes (node labels of "
            "GPU feature discovery, nvidia.com/gpu capacity)."
        ),
    )
    batch_seconds: int = Field(
        default=10, ge=0, le=3600, description="Arrivals within this window start together."
    )
    startup_taint: StartupTaint | None = Field(
        default=None,
        description="A taint to remove when a node passes (its agent pod tolerates it).",
    )


class Toleration(_Model):
    """A Kubernetes toleration added to the agent pods."""

    key: LabelKey | None = Field(
        default=None, description="Taint key; empty with Exists tolerates all."
    )
    operator: str = Field(
        default="Equal", pattern=r"^(Equal|Exists)$", max_length=8, description="Equal or Exists."
    )
    value: LabelValue | None = Field(default=None, description="Taint value for Equal.")
    effect: str | None = Field(
        default=None,
        pattern=r"^(NoSchedule|PreferNoSchedule|NoExecute)$",
        max_length=16,
        description="Taint effect to match; empty matches all.",
    )
    toleration_seconds: int | None = Field(
        default=None,
        ge=0,
        le=MAX_SECONDS,
        description="How long a NoExecute taint is tolerated, in seconds.",
    )


class EnvVar(_Model):
    """A plain environment variable for the agent container."""

    name: str = Field(
        min_length=1,
        max_length=256,
        pattern=r"^[-._a-zA-Z][-._a-zA-Z0-9]*$",
        description="Variable name.",
    )
    value: str = Field(default="", max_length=4096, description="Variable value.")


class Resources(_Model):
    """Agent container resources besides the GPUs (the operator asks for all the node's GPUs)."""

    requests: dict[ResourceName, Quantity] = Field(
        default_factory=lambda: {"cpu": "1", "memory": "4Gi"},
        json_schema_extra=_map_bounds(317),
        description="Resource requests.",
    )
    limits: dict[ResourceName, Quantity] = Field(
        default_factory=dict,
        json_schema_extra=_map_bounds(317),
        description="Resource limits.",
    )


DEFAULT_AGENT_IMAGE = "ghcr.io/gpuval/gpuval-agent:0.1.0"


class AgentSettings(_Model):
    """How the agent pods are made."""

    image: str = Field(
        default=DEFAULT_AGENT_IMAGE, min_length=1, max_length=512, description="Agent image."
    )
    image_pull_policy: str = Field(
        default="IfNotPresent",
        pattern=r"^(Always|IfNotPresent|Never)$",
        max_length=16,
        description="Image pull policy of the agent container.",
    )
    privileged: bool = Field(
        default=True,
        description=(
            "Run the agent privileged (full NVML access, e.g. ECC and row-remap counters)."
        ),
    )
    host_pid: bool = Field(
        default=True,
        alias="hostPID",
        description=(
            "Run the agent in the node's PID namespace, so the PIDs NVML reports for other "
            "processes on a GPU are the ones the agent can name (GpuInUse: process name, its pod); "
            "fabric pods too. Off: the agent still sees that a GPU is in use, by PID only."
        ),
    )
    priority_class_name: str | None = Field(
        default=None,
        min_length=1,
        max_length=253,
        pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
        description=(
            "PriorityClass of the agent pods (local checks and fabric). A class below the "
            "workloads' priority (the chart's agentPriorityClass) lets the scheduler preempt a "
            "running agent for real work; the node is then NotRun (AgentPreempted) and tried "
            "again. Unset: the operator's default (the chart's class when it creates one), else "
            "none."
        ),
    )
    resources: Resources = Field(
        default_factory=Resources, description="CPU and memory for the agent."
    )
    tolerations: list[Toleration] = Field(
        default_factory=list,
        max_length=MAX_ITEMS,
        description=(
            "Extra tolerations; nvidia.com/gpu, gpuval.dev/unhealthy and the cordon taint are "
            "always tolerated."
        ),
    )
    env: list[EnvVar] = Field(
        default_factory=list,
        max_length=MAX_ITEMS,
        description="Extra environment variables, e.g. NCCL_SOCKET_IFNAME.",
    )
    metrics_port: int | None = Field(
        default=None,
        ge=1024,
        le=65535,
        description="Port of the agent's live metrics; unset: none.",
    )
    queue: str | None = queue_field("the agent pods, each its own workload")


class GpuValidationSpec(_Model):
    """What to validate, how, how many nodes at a time, and what to do with the verdicts."""

    model_config = ConfigDict(
        json_schema_extra=_rules(
            (
                "!has(self.expected) || !has(self.expected.gpuCount) || !has(self.checks) || "
                "!has(self.checks.driver) || !has(self.checks.driver.expectedGpus) || "
                "self.expected.gpuCount == self.checks.driver.expectedGpus",
                "expected.gpuCount and checks.driver.expectedGpus disagree; set one of them",
            ),
        )
    )

    node_selector: NodeSelector | None = Field(
        default=None,
        description="Nodes to validate. Unset: every node that advertises nvidia.com/gpu.",
    )
    checks: ChecksConfig = Field(
        default_factory=ChecksConfig,
        description="The agent's checks with parameters and thresholds.",
    )
    expected: ExpectedEnvironment | None = Field(
        default=None, description="Expected environment values for the uniformity verdict."
    )
    max_concurrent: int | str = Field(
        default="25%",
        json_schema_extra=_rules_and(
            {"maximum": MAX_NODES, "maxLength": 4},
            (
                "type(self) == int ? self >= 1 : self.matches('^([1-9][0-9]?|100)%$')",
                "maxConcurrent must be a node count >= 1 or a percentage from 1% to 100%",
            ),
        ),
        description=(
            "Most nodes validated at a time: a count (e.g. 4) or a percentage of the selected "
            "nodes (e.g. 10%), rounded up, at least 1."
        ),
    )
    node_timeout_seconds: int = Field(
        default=3600,
        ge=10,
        le=7 * 86400,
        description=(
            "Per node, from its agent pod's creation: past it the node fails as "
            "PodUnschedulable (never scheduled) or TimedOut, and its pod is deleted."
        ),
    )
    schedule: str | None = Field(
        default=None,
        min_length=1,
        max_length=128,
        description=(
            "Cron schedule of repeated runs (5 fields, UTC; a 6th field gives seconds). Unset: "
            "one run, started on creation and on every spec change."
        ),
    )
    node_actions: NodeActions = Field(
        default_factory=NodeActions, description="Labels, taints and cordons on validated nodes."
    )
    agent: AgentSettings = Field(default_factory=AgentSettings, description="Agent pod settings.")
    fabric: FabricSpec | None = Field(
        default=None,
        description=(
            "Test the fabric between nodes: NCCL all-reduce across groups of nodes that passed "
            "their local checks, narrowed down to a slow node or link. Unset: off."
        ),
    )
    retry: RetryPolicy = Field(
        default_factory=RetryPolicy,
        description="How nodes gpuval could not test are tried again within a run.",
    )
    gating: Gating | None = Field(
        default=None,
        description="Validate nodes that join, reboot or change their GPU stack. Unset: off.",
    )
    history: int = Field(
        default=3,
        ge=1,
        le=100,
        description="Runs whose GpuNodeReports are kept (the latest included).",
    )
    baseline: BaselineSettings | None = Field(
        default=None,
        description=(
            "Judge each node against the GpuBaseline of its GPU stack (BelowBaseline) and against "
            "its own recent runs (DriftFromHistory); learn baselines from passing nodes. Unset: "
            "off."
        ),
    )


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(_Model):
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


class NodeCounts(_Model):
    """Node counts of the current run."""

    total: int = Field(default=0, description="Nodes selected for the run.")
    pending: int = Field(default=0, description="Nodes not started yet (waiting for their wave).")
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


class DryRunAction(_Model):
    """What would have been done to a node (nodeActions.dryRun)."""

    node: str = Field(max_length=253, description="Node name.")
    actions: str = Field(max_length=1024, description="The changes, e.g. taint, cordon, labels.")


class FailingNode(_Model):
    """One failing node, for the bounded list in the status."""

    node: str = Field(max_length=253, description="Node name.")
    reason: Reason = Field(description="The failure's reason (a gpuval Reason).")
    message: str = Field(default="", max_length=1024, description="One line about the failure.")


class Outlier(_Model):
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


class NodeTrigger(StrEnum):
    """Why a node was added to the current run after it started (spec.gating, spec.retry)."""

    JOINED = "joined"
    REBOOTED = "rebooted"
    STACK_CHANGED = "stack-changed"
    RETRY = "retry"


class RunInfo(_Model):
    """One run: a pass over the selected nodes."""

    id: str = Field(description="Run id; labels gpuval.dev/run of its reports and pods.")
    number: int = Field(description="Run number, 1 for the first run of this GpuValidation.")
    generation: int = Field(description="Spec generation the run was started for.")
    trigger: RunTrigger = Field(description="What started it: created, spec-changed or schedule.")
    started_at: str = Field(
        description="Start time (RFC 3339).", json_schema_extra={"format": "date-time"}
    )
    completed_at: str | None = Field(
        default=None, description="End time (RFC 3339).", json_schema_extra={"format": "date-time"}
    )


class GpuValidationStatus(_Model):
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
    conditions: list[Condition] = Field(
        default_factory=list,
        description=(
            "Succeeded, NodesHealthy, Uniform, Invalid, NodeActionsHeld and SystemicFailure."
        ),
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )


class GpuNodeReportSpec(_Model):
    """Which node and run the report is for; set by the operator at creation, immutable."""

    model_config = ConfigDict(
        json_schema_extra=_rules(("self == oldSelf", "the spec of a GpuNodeReport is immutable"))
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


class ReportSummary(_Model):
    """Worst GPU of the node for each figure; absent when not measured."""

    gpu_count: int | None = Field(default=None, description="GPUs the agent saw.")
    burn_tflops: float | None = Field(default=None, description="Lowest burn throughput, TFLOP/s.")
    h2d_g_bps: float | None = Field(
        default=None, alias="h2dGBps", description="Lowest host-to-device bandwidth, GB/s."
    )
    d2h_g_bps: float | None = Field(
        default=None, alias="d2hGBps", description="Lowest device-to-host bandwidth, GB/s."
    )
    device_copy_g_bps: float | None = Field(
        default=None,
        alias="deviceCopyGBps",
        description="Lowest device-local copy bandwidth, GB/s.",
    )
    p2p_g_bps: float | None = Field(
        default=None, alias="p2pGBps", description="Lowest GPU-to-GPU bandwidth, GB/s."
    )
    nccl_busbw_g_bps: float | None = Field(
        default=None,
        alias="ncclBusbwGBps",
        description="NCCL all-reduce busbw at the largest size, GB/s.",
    )
    max_temperature_celsius: float | None = Field(
        default=None, description="Highest GPU temperature during the burn, degrees Celsius."
    )


class ReportFailure(_Model):
    """One failed finding."""

    check: str = Field(description="Check name, or agent for failures the operator records.")
    gpu: int | None = Field(default=None, description="GPU index, when about one GPU.")
    reason: Reason = Field(description="The finding's reason (a gpuval Reason).")
    hint: str = Field(default="", description="What to do about it.")
    message: str = Field(default="", description="One line about the failure.")


class GpuNodeReportStatus(_Model):
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


class ObjectMeta(_Model):
    """The parts of metadata the operator reads."""

    model_config = ConfigDict(extra="allow")

    name: str
    uid: str | None = None
    generation: int | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class GpuValidation(_Model):
    """A validation of a set of GPU nodes."""

    api_version: str = API_VERSION
    kind: str = VALIDATION_KIND
    metadata: ObjectMeta
    spec: GpuValidationSpec = Field(default_factory=GpuValidationSpec)
    status: GpuValidationStatus | None = None


class GpuBaseline(_Model):
    """What healthy nodes of one GPU stack (GPU model, count, power limit, PCIe link) measure,
    figure by figure: learned from a run's passing nodes, written by hand, or shipped with gpuval
    for a model measured with its own benchmark; exported and imported as a YAML file."""

    api_version: str = API_VERSION
    kind: str = BASELINE_KIND
    metadata: ObjectMeta
    spec: GpuBaselineSpec


class GpuNodeReport(_Model):
    """One node's result of one run."""

    api_version: str = API_VERSION
    kind: str = REPORT_KIND
    metadata: ObjectMeta
    spec: GpuNodeReportSpec
    status: GpuNodeReportStatus | None = None
