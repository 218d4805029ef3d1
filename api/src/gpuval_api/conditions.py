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
    # With spec.baseline: False when the run is systemically below its baseline (the stack).
    WITHIN_BASELINE = "WithinBaseline"


class ConditionReason(StrEnum):
    """CamelCase reasons of the conditions above."""

    RUNNING = "Running"
    NODES_FAILED = "NodesFailed"
    ALL_NODES_PASSED = "AllNodesPassed"
    NODES_NOT_RUN = "NodesNotRun"  # every tested node passed; some could not be tested
    NO_NODES_SELECTED = "NoNodesSelected"
    NOT_COMPARED = "NotCompared"
    NOT_UNIFORM = "NotUniform"
    UNIFORM = "Uniform"
    VALID = "Valid"
    INVALID_SPEC = "InvalidSpec"
    WITHIN_BASELINE = "WithinBaseline"  # no figure is below its baseline on most judged nodes
    SYSTEMIC_BELOW_BASELINE = "SystemicBelowBaseline"  # most judged nodes below on a figure
    NO_BASELINE = "NoBaseline"  # no node of the run had a baseline to be judged against


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
    DRY_RUN = "DryRunNodeAction"  # on the node: what would have been done
    FABRIC_STARTED = "FabricStarted"  # the run's fabric groups are planned
    FABRIC_COMPLETED = "FabricCompleted"  # every group compared: the fabric's verdicts settled
    BASELINE_LEARNED = "BaselineLearned"  # a GpuBaseline learned from the run's passing nodes
    BASELINE_NOT_LEARNED = "BaselineNotLearned"  # a key's nodes did not agree enough, or too few
    BASELINE_MISSING = "BaselineMissing"  # a GpuBaseline spec.baseline.names names is not there
    SYSTEMIC = "SystemicBelowBaseline"  # most judged nodes below their baseline on a figure
    NODE_DRIFTING = "NodeDrifting"  # a node's figure fell against its own history
