"""The GpuValidation kind: what to validate, how, how many nodes at a time, and what to do with
the verdicts (its status: gpuval_api.crd.validationstatus)."""

from __future__ import annotations

from enum import StrEnum

from pydantic import ConfigDict, Field

from gpuval_api.baselinemodel import BaselineSettings
from gpuval_api.checks import ChecksConfig
from gpuval_api.crd.agent import AgentSettings
from gpuval_api.crd.common import (
    API_VERSION,
    MAX_GPUS_PER_NODE,
    MAX_ITEMS,
    MAX_NODES,
    PRODUCT_LENGTH,
    VALIDATION_KIND,
    VERSION_LENGTH,
    CrdModel,
    LabelKey,
    LabelValue,
    ObjectMeta,
    cel_rules,
    cel_rules_and,
    map_bounds,
)
from gpuval_api.crd.remediation import Remediation
from gpuval_api.crd.validationstatus import GpuValidationStatus
from gpuval_api.fabric import FabricSpec

# nodeActions.maxNodes: NVSentinel's circuit breaker trips at 50 % of the cluster's nodes cordoned
# within 5 minutes, and AMD's GPU operator caps parallel remediation only when asked (its
# maxParallelWorkflows defaults to 0, no limit). A validation's thresholds are the likeliest
# thing to be wrong for a fleet (a new GPU model, a driver update), so gpuval takes at most a
# tenth of the nodes it selects out of service before a person looks
# (docs/operator/verdicts-and-actions.md).
DEFAULT_MAX_NODES_OUT_OF_SERVICE = "10%"


class SelectorOperator(StrEnum):
    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"


class SelectorRequirement(CrdModel):
    """One label requirement (Kubernetes LabelSelectorRequirement)."""

    model_config = ConfigDict(
        json_schema_extra=cel_rules(
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


class NodeSelector(CrdModel):
    """A Kubernetes label selector over nodes."""

    match_labels: dict[LabelKey, LabelValue] = Field(
        default_factory=dict,
        json_schema_extra=map_bounds(317),
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


class ExpectedEnvironment(CrdModel):
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


class FailureTaint(CrdModel):
    """The taint put on a failing node (key gpuval.dev/unhealthy, value the failure's reason)."""

    effect: TaintEffect = Field(
        default=TaintEffect.NO_SCHEDULE,
        description="Taint effect; NoExecute also evicts running pods.",
    )


class NodeActions(CrdModel):
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
        json_schema_extra=cel_rules_and(
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


class RetryPolicy(CrdModel):
    """How a node gpuval could not test (NotRun: GPUs busy, pod evicted...) is tried again."""

    attempts: int = Field(
        default=2, ge=1, le=10, description="Attempts per node and run, the first included."
    )
    backoff_seconds: int = Field(
        default=300, ge=0, le=86400, description="Wait before the next attempt."
    )


class StartupTaint(CrdModel):
    """A taint nodes register with (kubelet --register-with-taints) to take no work until
    validated; gpuval removes it when the node passes and keeps it when it fails."""

    key: LabelKey = Field(description="Taint key, e.g. gpuval.dev/unvalidated.")
    effect: TaintEffect = Field(default=TaintEffect.NO_SCHEDULE, description="Taint effect.")


class Gating(CrdModel):
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


class GpuValidationSpec(CrdModel):
    """What to validate, how, how many nodes at a time, and what to do with the verdicts."""

    model_config = ConfigDict(
        json_schema_extra=cel_rules(
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
        json_schema_extra=cel_rules_and(
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
    max_proof_age_seconds: int | None = Field(
        default=None,
        ge=10,
        le=366 * 86400,
        description=(
            "Most age of a selected node's proof (its gpuval.dev/proven-at: the last pass of any "
            "validation): a run with trigger proof-expired re-validates the nodes whose proof is "
            "older or absent, stalest first, when the first one expires. Unset: off."
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
    remediation: Remediation | None = Field(
        default=None,
        description=(
            "Hand a node whose failure asks for a GPU reset or a reboot to the cluster's repair "
            "engine (a node condition, or an object from a template), validate it again under "
            "load once the repair ended, and stop after maxRepairs. Needs nodeActions.taint or "
            "nodeActions.cordon. Unset: off."
        ),
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


class GpuValidation(CrdModel):
    """A validation of a set of GPU nodes."""

    api_version: str = API_VERSION
    kind: str = VALIDATION_KIND
    metadata: ObjectMeta
    spec: GpuValidationSpec = Field(default_factory=GpuValidationSpec)
    status: GpuValidationStatus | None = None
