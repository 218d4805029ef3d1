"""Kubernetes' own names that gpuval reads from pods and nodes, spelled once.

They are Kubernetes' contract, not gpuval's, but keeping them here lets the contract check
(tests/unit/api/test_api_contract.py) forbid bare literals such as "Failed", which would
otherwise be ambiguous between a pod phase and a gpuval verdict.
"""

from __future__ import annotations

from enum import StrEnum


class PodPhase(StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    UNKNOWN = "Unknown"


TERMINAL_POD_PHASES = frozenset({PodPhase.SUCCEEDED, PodPhase.FAILED})

POD_SCHEDULED = "PodScheduled"
DISRUPTION_TARGET = "DisruptionTarget"
# DisruptionTarget reasons that mean the pod was evicted rather than deleted by hand.
EVICTION_REASONS = frozenset({"EvictionByEvictionAPI", "TerminationByKubelet"})
# DisruptionTarget reasons of a pod the scheduler preempted for a pod of higher priority (the
# second is the spelling before Kubernetes 1.27), and the pod reason the kubelet sets when it
# preempts a pod to admit a critical one.
PREEMPTION_REASONS = frozenset({"PreemptionByScheduler", "PreemptionByKubeScheduler"})
POD_REASON_PREEMPTING = "Preempting"
POD_REASON_EVICTED = "Evicted"
# The kubelet refused the pod at admission (a device plugin's Allocate failed, e.g. a shared GPU
# that gives no pod more than one replica): the pod is Failed before any container started.
POD_REASON_ADMISSION_ERROR = "UnexpectedAdmissionError"
CONTAINER_REASON_OOM_KILLED = "OOMKilled"
# The exit code a kubelet reports for a container killed by SIGKILL (128 + 9), and by SIGTERM.
EXIT_CODE_SIGKILL = 137
EXIT_CODE_SIGTERM = 143
# The Ready condition type of nodes and pods alike.
READY = "Ready"
CONTAINERS_READY = "ContainersReady"
CONTAINER_REASON_COMPLETED = "Completed"
CONTAINER_REASON_ERROR = "Error"
