"""Kubernetes' own names that gpuval reads from pods and nodes, spelled once.

They are Kubernetes' contract, not gpuval's, but keeping them here lets the contract check
(tests/unit/test_api_contract.py) forbid bare literals such as "Failed", which would otherwise be
ambiguous between a pod phase and a gpuval verdict.
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
POD_REASON_EVICTED = "Evicted"
CONTAINER_REASON_OOM_KILLED = "OOMKilled"
# The Ready condition type of nodes and pods alike.
READY = "Ready"
CONTAINERS_READY = "ContainersReady"
CONTAINER_REASON_COMPLETED = "Completed"
CONTAINER_REASON_ERROR = "Error"
