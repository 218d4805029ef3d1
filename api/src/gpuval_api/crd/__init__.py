"""The gpuval custom resources as typed models: the one source the CRDs in crds/ are generated from.

`GpuValidation` (cluster-scoped, short name `gpuval`) asks for a validation of a set of GPU
nodes; `GpuNodeReport` (cluster-scoped, short name `gpureport`, one per node and run, owned by its
GpuValidation) holds one node's result; `GpuBaseline` (cluster-scoped, short name `gpubaseline`)
holds what healthy nodes of one GPU stack measure (gpuval_api.baseline); `kubectl get gpuval-all`
lists all three. Every field carries a description because it becomes the CRD field's description
(`kubectl explain`). Cross-field constraints the schema can express are CEL rules here; the rest
are checked by the operator (`gpuval_operator.spec`).

One module per kind, as Kueue keeps one types file per kind: `validation` (GpuValidation and its
spec; the agent pods' settings in `agent`, its status in `validationstatus`), `report`
(GpuNodeReport), `baseline` (GpuBaseline; its spec's types are gpuval_api.baseline's), and `common`
(the group, version and names, the base model, bounds, ObjectMeta). Every public name is imported
here: code outside the package imports `from gpuval_api.crd import X`.
"""

from gpuval_api.crd.agent import (
    DEFAULT_AGENT_IMAGE,
    AgentSettings,
    EnvVar,
    Resources,
    Toleration,
)
from gpuval_api.crd.baseline import (
    GpuBaseline,
)
from gpuval_api.crd.common import (
    API_VERSION,
    BASELINE_KIND,
    BASELINE_PLURAL,
    BASELINE_SHORT_NAME,
    CATEGORY,
    GPU_RESOURCE,
    GROUP,
    MAX_GPUS_PER_NODE,
    MAX_ITEMS,
    MAX_NODES,
    MAX_SECONDS,
    OUTLIER_VALUE_LENGTH,
    PRODUCT_LENGTH,
    REPORT_KIND,
    REPORT_PLURAL,
    REPORT_SHORT_NAME,
    VALIDATION_KIND,
    VALIDATION_PLURAL,
    VALIDATION_SHORT_NAME,
    VERSION,
    VERSION_LENGTH,
    LabelKey,
    LabelValue,
    ObjectMeta,
    Quantity,
    ResourceName,
)
from gpuval_api.crd.remediation import (
    DEFAULT_MAX_REPAIRS,
    DEFAULT_TIMEOUT_SECONDS,
    DEFAULT_WINDOW_SECONDS,
    OBJECT_REF_LENGTH,
    Remediation,
    RemediationMode,
    RemediationStatus,
    RemediationTemplate,
    RepairNode,
    TemplateMetadata,
)
from gpuval_api.crd.report import (
    GpuNodeReport,
    GpuNodeReportSpec,
    GpuNodeReportStatus,
    ReportFailure,
    ReportSummary,
)
from gpuval_api.crd.validation import (
    DEFAULT_MAX_NODES_OUT_OF_SERVICE,
    ExpectedEnvironment,
    FailureTaint,
    Gating,
    GpuValidation,
    GpuValidationSpec,
    NodeActions,
    NodeSelector,
    RetryPolicy,
    SelectorOperator,
    SelectorRequirement,
    StartupTaint,
    TaintEffect,
)
from gpuval_api.crd.validationstatus import (
    Condition,
    ConditionStatus,
    DryRunAction,
    FailingNode,
    GpuValidationStatus,
    NodeCounts,
    NodeTrigger,
    Outlier,
    RunInfo,
    RunTrigger,
)

__all__ = [
    "API_VERSION",
    "BASELINE_KIND",
    "BASELINE_PLURAL",
    "BASELINE_SHORT_NAME",
    "CATEGORY",
    "DEFAULT_AGENT_IMAGE",
    "DEFAULT_MAX_NODES_OUT_OF_SERVICE",
    "DEFAULT_MAX_REPAIRS",
    "DEFAULT_TIMEOUT_SECONDS",
    "DEFAULT_WINDOW_SECONDS",
    "GPU_RESOURCE",
    "GROUP",
    "MAX_GPUS_PER_NODE",
    "MAX_ITEMS",
    "MAX_NODES",
    "MAX_SECONDS",
    "OBJECT_REF_LENGTH",
    "OUTLIER_VALUE_LENGTH",
    "PRODUCT_LENGTH",
    "REPORT_KIND",
    "REPORT_PLURAL",
    "REPORT_SHORT_NAME",
    "VALIDATION_KIND",
    "VALIDATION_PLURAL",
    "VALIDATION_SHORT_NAME",
    "VERSION",
    "VERSION_LENGTH",
    "AgentSettings",
    "Condition",
    "ConditionStatus",
    "DryRunAction",
    "EnvVar",
    "ExpectedEnvironment",
    "FailingNode",
    "FailureTaint",
    "Gating",
    "GpuBaseline",
    "GpuNodeReport",
    "GpuNodeReportSpec",
    "GpuNodeReportStatus",
    "GpuValidation",
    "GpuValidationSpec",
    "GpuValidationStatus",
    "LabelKey",
    "LabelValue",
    "NodeActions",
    "NodeCounts",
    "NodeSelector",
    "NodeTrigger",
    "ObjectMeta",
    "Outlier",
    "Quantity",
    "Remediation",
    "RemediationMode",
    "RemediationStatus",
    "RemediationTemplate",
    "RepairNode",
    "ReportFailure",
    "ReportSummary",
    "ResourceName",
    "Resources",
    "RetryPolicy",
    "RunInfo",
    "RunTrigger",
    "SelectorOperator",
    "SelectorRequirement",
    "StartupTaint",
    "TaintEffect",
    "TemplateMetadata",
    "Toleration",
]
