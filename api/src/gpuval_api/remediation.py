"""Names of the repair loop (spec.remediation): where a failed node stands in it, how gpuval learned
that a repair ended, and the placeholders of a remediation template. Defined once here: the
operator writes them (node entries, node conditions, status.remediation, Events), `kubectl gpuval
status` and the docs read them. The action a failure asks for is the reason catalogue's
(`gpuval_api.reasons.RepairAction`)."""

from __future__ import annotations

from enum import StrEnum
from typing import Final


class RepairState(StrEnum):
    """Where a failed node stands in the repair loop (docs/operator/remediation.md,
    "Remediation")."""

    # Asked of the cluster's repair engine (the GpuRepairRequested condition, or an object made
    # from spec.remediation.template); the node is out of service and holds a breaker slot.
    REQUESTED = "Requested"
    # The repair ended (the object is done, the node rebooted, or the timeout passed): the node
    # is validated again under load, its taint and cordon kept until it passes.
    REVALIDATING = "Revalidating"
    # It failed that validation: the next request follows, or NeedsRepair.
    FAILED_AGAIN = "FailedAgain"
    # It passed after the repair: back in service.
    REPAIRED = "Repaired"
    # It passed by another path (a person overruled its verdict, a scheduled run, a gating
    # re-validation) while its repair was still asked: the request was withdrawn (its object
    # deleted, its condition cleared) and the node is back in service. Not a repair.
    WITHDRAWN = "Withdrawn"
    # It failed again after spec.remediation.maxRepairs repairs within windowSeconds: no further
    # request; a person or a hardware ticket takes over.
    NEEDS_REPAIR = "NeedsRepair"
    # Its remediation object was deleted before the repair ended (a person, or anything but
    # gpuval): cancelled. Not counted against maxRepairs, not validated again, not asked again
    # until the node fails anew; its taint and cordon stay (it failed, and nothing repaired it).
    CANCELLED = "Cancelled"


# The states in which a node is in the engine's hands or being proven again: it counts against
# the circuit breaker as out of service.
ACTIVE_STATES: Final = frozenset({RepairState.REQUESTED, RepairState.REVALIDATING})


# The states in which the node is back in service: a new failure starts the loop again.
BACK_STATES: Final = frozenset({RepairState.REPAIRED, RepairState.WITHDRAWN})


class RepairOutcome(StrEnum):
    """How a request ended, as gpuval_repair_requests_total's label `outcome` says."""

    PASSED = "passed"  # its re-validation passed: back in service, repaired
    FAILED = "failed"  # its re-validation failed
    # The node passed by another path before the repair ended: the request was withdrawn (not
    # counted as a repair).
    WITHDRAWN = "withdrawn"


class RepairEnd(StrEnum):
    """How gpuval learned that a repair ended."""

    DONE = "Done"  # the remediation object reports it succeeded
    FAILED = "Failed"  # the remediation object reports it ended without success
    REBOOTED = "Rebooted"  # the node's status.nodeInfo.bootID changed
    # The remediation object was deleted by someone else before it said it ended: the request is
    # Cancelled (RepairState.CANCELLED), not an end that is validated again.
    GONE = "Gone"
    TIMED_OUT = "TimedOut"  # none of these within spec.remediation.timeoutSeconds
    # A person removed the label gpuval.dev/needs-repair: the node was repaired by hand.
    PERSON = "Person"


# Condition reasons of the node conditions gpuval sets for the loop (gpuval_api.keys): a True
# GpuRepairRequested gives the action asked for as its reason (RepairAction), a False one the
# state the node moved on to (RepairState); GpuNeedsRepair is True with NEEDS_REPAIR and False with
# REPAIRED once the node passes again.
NEEDS_REPAIR_REASON: Final = RepairState.NEEDS_REPAIR.value
# Either condition False when no validation keeps a repair record for the node (withdrawn: the
# validation was deleted or its spec.remediation removed).
NOT_REQUESTED_REASON: Final = "NotRequested"


def repairs_text(count: int) -> str:
    """ "1 repair", "2 repairs": how the conditions, Events and `kubectl gpuval status` count."""
    return f"{count} repair" if count == 1 else f"{count} repairs"


class Placeholder(StrEnum):
    """What a remediation template may leave for gpuval to fill in, in any string of its
    metadata or spec. A string that is exactly a list placeholder becomes a list; inside other
    text its items are joined with commas."""

    NODE_NAME = "$(NODE_NAME)"
    GPU_UUIDS = "$(GPU_UUIDS)"  # the failing GPUs' UUIDs (every GPU's when none is named)
    # The failing GPUs' PCI bus IDs, domain:bus:device.function with a 4-digit domain (NVML
    # gives 8), as NVSentinel's GPUReset and `nvidia-smi -r -i` take them.
    GPU_PCI_BUS_IDS = "$(GPU_PCI_BUS_IDS)"
    REASON = "$(REASON)"  # the failure's reason (a gpuval Reason)
    ACTION = "$(ACTION)"  # the action asked for (RepairAction: ResetGpu or Reboot)
    VALIDATION = "$(VALIDATION)"  # the GpuValidation's name
    REPAIR_ID = "$(REPAIR_ID)"  # the request's identity, unique per node and failure


LIST_PLACEHOLDERS: Final = frozenset({Placeholder.GPU_UUIDS, Placeholder.GPU_PCI_BUS_IDS})


class EngineCondition(StrEnum):
    """The condition types the engines' remediation objects use to say a repair ended (read by
    gpuval_operator.remediation.objects): Medik8s' (medik8s/common: Processing, Succeeded),
    NVIDIA NVSentinel janitor's (RebootNode's NodeReady; Completed, its fault remediation's
    completion type for GPUReset), and Job-like ones."""

    SUCCEEDED = "Succeeded"
    PROCESSING = "Processing"
    NODE_READY = "NodeReady"
    READY = "Ready"
    COMPLETED = "Completed"
    COMPLETE = "Complete"
    DONE = "Done"
    FAILED = "Failed"


# An object's status.phase that says its repair ended, done or failed (Job-like kinds).
ENGINE_DONE_PHASES: Final = frozenset({"Succeeded", "Completed", "Complete", "Done"})
ENGINE_FAILED_PHASES: Final = frozenset({"Failed", "Error"})
