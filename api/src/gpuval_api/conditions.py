"""Condition types and reasons of the GpuValidation status (Kubernetes API conventions).

`phase` is a display column only; these conditions are the contract that clients, printer columns
and alerts read.
"""

from __future__ import annotations

from enum import StrEnum


class ConditionType(StrEnum):
    SUCCEEDED = "Succeeded"
    NODES_HEALTHY = "NodesHealthy"
    UNIFORM = "Uniform"
    INVALID = "Invalid"
    # The circuit breaker (spec.nodeActions.maxNodes, the operator-wide limit) or the systemic
    # hold kept the taint and cordon of failing nodes back.
    NODE_ACTIONS_HELD = "NodeActionsHeld"
    # Most tested nodes of the run failed with one reason: the spec or the stack, not the nodes.
    SYSTEMIC_FAILURE = "SystemicFailure"
    # With spec.baseline: False when the run is systemically below its baseline (the stack).
    WITHIN_BASELINE = "WithinBaseline"
    # With spec.baseline mode Learn: True when a GPU stack's passing nodes formed two groups
    # (learning took the better one, or nothing; status.baseline.bimodal says which).
    BIMODAL = "Bimodal"
    # The API server refuses the run's agent pods (admission, quota): the cluster's configuration.
    AGENT_PODS_REFUSED = "AgentPodsRefused"


class ConditionReason(StrEnum):
    """CamelCase reasons of the conditions above."""

    RUNNING = "Running"
    # Succeeded Unknown: every node has its verdict; their node actions are being applied.
    APPLYING_NODE_ACTIONS = "ApplyingNodeActions"
    NODES_FAILED = "NodesFailed"
    ALL_NODES_PASSED = "AllNodesPassed"
    NODES_NOT_RUN = "NodesNotRun"  # every tested node passed; some could not be tested
    NO_NODES_SELECTED = "NoNodesSelected"
    WAITING_FOR_NODES = "WaitingForNodes"  # spec.gating, and no selected node has joined yet
    NOT_COMPARED = "NotCompared"
    # Uniform Unknown after the run: no node recorded an environment, so nothing was compared.
    NO_ENVIRONMENT = "NoEnvironment"
    NOT_UNIFORM = "NotUniform"
    UNIFORM = "Uniform"
    VALID = "Valid"
    INVALID_SPEC = "InvalidSpec"
    # NodeActionsHeld: why the taint and cordon of failing nodes are held (True), or not (False).
    MAX_NODES_REACHED = "MaxNodesReached"  # the validation's nodeActions.maxNodes
    OPERATOR_MAX_NODES_REACHED = "OperatorMaxNodesReached"  # the operator-wide limit
    SYSTEMIC = "Systemic"  # the failures' reason is systemic (SystemicFailure)
    # Not a NodeActionsHeld reason but a node entry's hold: the rest of the run could still make
    # the failure's reason systemic, so its taint and cordon wait for it.
    AWAITING_RUN = "AwaitingRun"
    NOT_HELD = "NotHeld"
    # SystemicFailure: a reason shared by most tested nodes (True), or none (False).
    SAME_REASON_ON_MANY_NODES = "SameReasonOnManyNodes"
    NOT_SYSTEMIC = "NotSystemic"
    WITHIN_BASELINE = "WithinBaseline"  # no figure is below its baseline on most judged nodes
    SYSTEMIC_BELOW_BASELINE = "SystemicBelowBaseline"  # most judged nodes below on a figure
    NO_BASELINE = "NoBaseline"  # no node of the run had a baseline to be judged against
    # Bimodal: learning took the better of two modes (its other nodes named), or learned nothing.
    LEARNED_BETTER_MODE = "LearnedBetterMode"
    NOT_LEARNED_BIMODAL = "NotLearnedBimodal"
    # AgentPodsRefused: what refused the agent pods (True), or that none is refused (False).
    POD_SECURITY = "PodSecurity"  # Pod Security admission (the namespace's enforce level)
    ADMISSION_WEBHOOK = "AdmissionWebhook"  # a validating or mutating webhook denied it
    ADMISSION_POLICY = "AdmissionPolicy"  # a ValidatingAdmissionPolicy denied it
    QUOTA_EXCEEDED = "QuotaExceeded"  # a ResourceQuota of the namespace
    WEBHOOK_UNAVAILABLE = "WebhookUnavailable"  # a webhook that fails closed could not be called
    POD_REFUSED = "PodRefused"  # anything else (a missing namespace or ServiceAccount, RBAC...)
    AGENT_PODS_ADMITTED = "AgentPodsAdmitted"


class ValidationPhase(StrEnum):
    """`status.phase`, for display (printer column) only."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    INVALID = "Invalid"


class EventReason(StrEnum):
    """Reasons of the Events the operator posts on GpuValidations and nodes."""

    RUN_STARTED = "RunStarted"
    RUN_COMPLETED = "RunCompleted"
    NODE_FAILED = "NodeFailed"  # on the GpuValidation, naming the node
    VALIDATION_FAILED = "ValidationFailed"  # on the node, naming the GpuValidation's report
    INVALID_SPEC = "InvalidSpec"
    REPORT_NOT_CREATED = "ReportNotCreated"
    NODE_NOT_RUN = "NodeNotRun"  # on the GpuValidation and the node: not tested, no action
    NODE_QUEUED = "NodeQueued"  # a node added to the run (joined, rebooted, stack changed, retry)
    # Nodes added beyond GPUVAL_EVENTS_PER_RUN NodeQueued Events, counted in one Event per batch.
    NODES_QUEUED = "NodesQueued"
    DRY_RUN = "DryRunNodeAction"  # on the node: what would have been done
    FABRIC_STARTED = "FabricStarted"  # the run's fabric groups are planned
    FABRIC_COMPLETED = "FabricCompleted"  # every group compared: the fabric's verdicts settled
    NODE_ACTIONS_HELD = "NodeActionsHeld"  # taint/cordon of failing nodes held (breaker, systemic)
    SYSTEMIC_FAILURE = "SystemicFailure"  # a reason shared by most tested nodes of the run
    NODE_ACTIONS_RELEASED = "NodeActionsReleased"  # a person released the hold (gpuval.dev/release)
    BASELINE_LEARNED = "BaselineLearned"  # a GpuBaseline learned from the run's passing nodes
    BASELINE_NOT_LEARNED = "BaselineNotLearned"  # a key's nodes did not agree enough, or too few
    BASELINE_MISSING = "BaselineMissing"  # a GpuBaseline spec.baseline.names names is not there
    SYSTEMIC = "SystemicBelowBaseline"  # most judged nodes below their baseline on a figure
    NODE_DRIFTING = "NodeDrifting"  # a node's figure fell against its own history
    # A node's GPUs were replaced (another GPU identity): its history starts again.
    HISTORY_RESTARTED = "HistoryRestarted"
    AGENT_PODS_REFUSED = "AgentPodsRefused"  # the API server refused agent pods (once per cause)
    # spec.remediation, on the GpuValidation and the node: a repair asked of the engine, its end
    # seen (the object done, a reboot, the timeout), the node back in service after it, or
    # NeedsRepair (Warning: repair did not help, no further request); a remediation object the
    # API server refused (Warning: the chart's remediation.rbac, the template).
    REPAIR_REQUESTED = "RepairRequested"
    REPAIR_ENDED = "RepairEnded"
    NODE_REPAIRED = "NodeRepaired"
    NODE_NEEDS_REPAIR = "NodeNeedsRepair"
    REPAIR_NOT_REQUESTED = "RepairNotRequested"
    # A request withdrawn: the node passed by another path (an overruled verdict, a scheduled
    # run, a gating re-validation) before its repair ended.
    REPAIR_WITHDRAWN = "RepairWithdrawn"
    # The operator could not write a node's repair record (Warning: the API server refused it).
    REPAIR_RECORD_REFUSED = "RepairRecordRefused"
