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
    # spec.agent.devices dra: False while selected nodes publish no device (left out of the run).
    DEVICES_PUBLISHED = "DevicesPublished"

    # spec.remediation mode Template: the API server cannot make the repair objects (the
    # template's kind is not served, or the create is refused: RBAC, admission), so the nodes'
    # requests wait, retried with a growing pause.
    REPAIR_REQUESTS_REFUSED = "RepairRequestsRefused"
    # spec.checks.profile names a check that its section's own `enabled: false` keeps off (the
    # section wins): True naming them, False when the profile runs all it names.
    PROFILE_OVERRIDDEN = "ProfileOverridden"


# The status of each condition type that is good news. A condition's status says whether its
# statement holds, and some statements are bad news (SystemicFailure, NodeActionsHeld, Invalid):
# whatever shows a condition as good or bad (the HTML page) reads it here, never its status alone.
# Unknown is neither (still running, nothing to compare).
GOOD_STATUS: dict[ConditionType, str] = {
    ConditionType.SUCCEEDED: "True",
    ConditionType.NODES_HEALTHY: "True",
    ConditionType.UNIFORM: "True",
    ConditionType.INVALID: "False",
    ConditionType.NODE_ACTIONS_HELD: "False",
    ConditionType.SYSTEMIC_FAILURE: "False",
    ConditionType.WITHIN_BASELINE: "True",
    ConditionType.BIMODAL: "False",
    ConditionType.AGENT_PODS_REFUSED: "False",
    ConditionType.DEVICES_PUBLISHED: "True",
    ConditionType.REPAIR_REQUESTS_REFUSED: "False",
    ConditionType.PROFILE_OVERRIDDEN: "False",
}


def is_bad(condition_type: str, status: str) -> bool:
    """True when a condition of this type and status is bad news (GOOD_STATUS); a type this
    version does not know is bad when False, as Kubernetes' own conditions read."""
    if status not in ("True", "False"):
        return False
    try:
        good = GOOD_STATUS[ConditionType(condition_type)]
    except (ValueError, KeyError):
        good = "True"
    return status != good


class ConditionReason(StrEnum):
    """CamelCase reasons of the conditions above."""

    RUNNING = "Running"
    # Succeeded Unknown: every node has its verdict; their node actions are being applied.
    APPLYING_NODE_ACTIONS = "ApplyingNodeActions"
    NODES_FAILED = "NodesFailed"
    ALL_NODES_PASSED = "AllNodesPassed"
    NODES_NOT_RUN = "NodesNotRun"  # every tested node passed; some could not be tested
    # DevicesPublished: every selected node publishes devices (True), or some publish none (False).
    ALL_NODES_PUBLISH = "AllNodesPublish"
    NODES_WITHOUT_DEVICES = "NodesWithoutDevices"
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
    BASELINE_OFF = "BaselineOff"  # spec.baseline.mode Off: no baseline is applied (history kept)
    # Bimodal: learning found two modes, named both and learned nothing until a person chooses.
    NOT_LEARNED_BIMODAL = "NotLearnedBimodal"
    # AgentPodsRefused: what refused the agent pods (True), or that none is refused (False).
    POD_SECURITY = "PodSecurity"  # Pod Security admission (the namespace's enforce level)
    ADMISSION_WEBHOOK = "AdmissionWebhook"  # a validating or mutating webhook denied it
    ADMISSION_POLICY = "AdmissionPolicy"  # a ValidatingAdmissionPolicy denied it
    QUOTA_EXCEEDED = "QuotaExceeded"  # a ResourceQuota of the namespace
    WEBHOOK_UNAVAILABLE = "WebhookUnavailable"  # a webhook that fails closed could not be called
    POD_REFUSED = "PodRefused"  # anything else (a missing namespace or ServiceAccount, RBAC...)
    AGENT_PODS_ADMITTED = "AgentPodsAdmitted"
    # RepairRequestsRefused: the template's kind is not served (its CRD is not installed), the
    # API server refused the object (403 RBAC, 422 admission...) (True), or neither (False).
    KIND_NOT_SERVED = "KindNotServed"
    REPAIR_OBJECT_REFUSED = "RepairObjectRefused"
    REPAIR_REQUESTS_ACCEPTED = "RepairRequestsAccepted"
    # ProfileOverridden: a section's `enabled: false` keeps a check of the profile off (True), or
    # the profile runs every check it names (False).
    ENABLED_FALSE_WINS = "EnabledFalseWins"
    PROFILE_APPLIED = "ProfileApplied"


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
    # Nodes of one stack whose training losses differ with no majority (two nodes): named, not
    # failed (status.training.undecided).
    TRAINING_UNDECIDED = "TrainingUndecided"
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
    # The request's object was deleted before its repair ended: cancelled, not counted, not asked
    # again until the node fails anew.
    REPAIR_CANCELLED = "RepairCancelled"
    # A request withdrawn: the node passed by another path (an overruled verdict, a scheduled
    # run, a gating re-validation) before its repair ended.
    REPAIR_WITHDRAWN = "RepairWithdrawn"
    # The operator could not write a node's repair record (Warning: the API server refused it).
    REPAIR_RECORD_REFUSED = "RepairRecordRefused"
