"""Label, annotation, taint and finalizer keys gpuval puts on objects: defined here once.

Every key gpuval owns lives under gpuval.dev/, so the operator can tell what it set from what others
set. The operator writes them, the pod runner and the chart's alerts and docs read them.
"""

from __future__ import annotations

from typing import Final

PREFIX: Final = "gpuval.dev"

FINALIZER: Final = f"{PREFIX}/finalizer"

# On agent pods and GpuNodeReports.
LABEL_VALIDATION: Final = f"{PREFIX}/validation"
LABEL_RUN: Final = f"{PREFIX}/run"
LABEL_NODE: Final = f"{PREFIX}/node"
LABEL_ATTEMPT: Final = f"{PREFIX}/attempt"
LABEL_COMPONENT: Final = "app.kubernetes.io/component"
LABEL_NAME: Final = "app.kubernetes.io/name"
LABEL_MANAGED_BY: Final = "app.kubernetes.io/managed-by"
AGENT_COMPONENT: Final = "agent"
ANNOTATION_NODE: Final = f"{PREFIX}/node"
ANNOTATION_GPUS: Final = f"{PREFIX}/gpus"
# On fabric pods (cross-node NCCL): the group's name and the pod's rank in it, and the rendezvous
# port the operator picked for the group (a restarted operator reuses it).
LABEL_FABRIC_GROUP: Final = f"{PREFIX}/fabric-group"
LABEL_FABRIC_RANK: Final = f"{PREFIX}/fabric-rank"
ANNOTATION_FABRIC_PORT: Final = f"{PREFIX}/fabric-port"
# On agent pods of a node whose device plugin shares its GPUs: the sharing they were made for,
# "<strategy>/<replicas per GPU>" (gpuval_operator.nodes.sharing), read back after a restart.
ANNOTATION_GPU_SHARING: Final = f"{PREFIX}/gpu-sharing"

# On the remediation objects gpuval makes from spec.remediation.template (with LABEL_VALIDATION and
# LABEL_NODE): the request's identity, one per node and failure, so a restarted operator finds
# the object again and never makes a second one for the same failure.
LABEL_REPAIR: Final = f"{PREFIX}/repair"

# On GpuValidations.
ANNOTATION_PLANNED_RUN: Final = f"{PREFIX}/planned-run"
# Every member of the run's fabric plan has its group in its report's status.fabric: the run's id
# once the groups inside domains are written, FABRIC_CROSS_SUFFIX added once the cross-domain
# groups are too.
ANNOTATION_FABRIC_PLANNED: Final = f"{PREFIX}/fabric-planned"
FABRIC_CROSS_SUFFIX: Final = "/cross"
# A person released the hold on the validation's node actions (`kubectl gpuval release`): JSON
# {"run": <the run's id>, "at": <Unix seconds>}. Nodes it held out of service before `at` no longer
# count against its nodeActions.maxNodes, and the systemic hold of that run is lifted.
ANNOTATION_RELEASE: Final = f"{PREFIX}/release"

# On nodes.
NODE_LABEL_VERDICT: Final = f"{PREFIX}/verdict"
NODE_LABEL_VALIDATED_AT: Final = f"{PREFIX}/validated-at"
NODE_LABEL_REASON: Final = f"{PREFIX}/reason"
NODE_ANNOTATION_CORDONED_BY: Final = f"{PREFIX}/cordoned-by"
# On a node gpuval holds out of service (its gpuval.dev/unhealthy taint or a cordon it made, on a
# node that was in service): the index the operator-wide limit counts by (a label selector).
NODE_LABEL_OUT_OF_SERVICE: Final = f"{PREFIX}/out-of-service"
# The validations whose latest verdict on the node is Failed, comma-separated.
NODE_ANNOTATION_FAILED_BY: Final = f"{PREFIX}/failed-by"
# One annotation per GpuValidation covering the node, "verdict.gpuval.dev/<validation>": its
# latest verdict there and the actions it asks for (gpuval_operator.nodes.entries), so the node's
# labels, taint, cordon and condition reflect every validation, not the last writer.
NODE_VERDICT_ANNOTATION_PREFIX: Final = f"verdict.{PREFIX}/"
# The node condition the operator sets (kubernetes-sigs/node-readiness-controller can gate on it).
NODE_CONDITION: Final = "GpuValidated"
TAINT_KEY: Final = f"{PREFIX}/unhealthy"
# spec.remediation: a node condition True while gpuval asks the cluster's repair engine to repair
# the node (its reason the action, ResetGpu or Reboot): what a NodeHealthCheck or
# MachineHealthCheck `unhealthyConditions` entry matches. It turns True within the circuit
# breaker only, never for a systemic failure, and never again once the node needs repair.
NODE_CONDITION_REPAIR_REQUESTED: Final = "GpuRepairRequested"
# A node that failed again after spec.remediation.maxRepairs repairs within its window: the
# condition (True) and the label (value "true"); no further repair is asked. A person removes the
# label once the node is repaired by hand: gpuval then validates it again under load.
NODE_CONDITION_NEEDS_REPAIR: Final = "GpuNeedsRepair"
NODE_LABEL_NEEDS_REPAIR: Final = f"{PREFIX}/needs-repair"
# The proof of the node's GPUs (docs/operator/proof-age.md): when a validation last passed it,
# RFC 3339 (PROVEN_AT), and by what, "<validation>/<run> <trigger>" (PROVEN_BY: the run's trigger,
# or the node's own when it joined the run: joined, rebooted, stack-changed, retry, repaired).
# Written in the same patch as the verdict entry; removed while any validation's verdict on the
# node is Failed (a failed node's proof is void), kept as it was by a NotRun (no evidence either
# way).
NODE_ANNOTATION_PROVEN_AT: Final = f"{PREFIX}/proven-at"
NODE_ANNOTATION_PROVEN_BY: Final = f"{PREFIX}/proven-by"
# Kubernetes' own: the taint a cordon puts on a node.
UNSCHEDULABLE_TAINT_KEY: Final = "node.kubernetes.io/unschedulable"

# Values of NODE_LABEL_VERDICT.
NODE_VERDICT_PASSED: Final = "passed"
NODE_VERDICT_FAILED: Final = "failed"
NODE_VERDICT_NOT_RUN: Final = "not-run"
