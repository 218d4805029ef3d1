"""The facts of an agent pod: what the operator keeps of each watched pod (a run's, and through
gpuval_operator.fabric.podfacts a fabric group's), and what a pod's end says of who ended it.

Below the run and the fabric, which both read them. Pure and synchronous.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuval_api import keys
from gpuval_api.crd import MAX_DEVICE_HEALTH
from gpuval_api.kubernetes import (
    CONTAINER_REASON_OOM_KILLED,
    DISRUPTION_TARGET,
    EVICTION_REASONS,
    EXIT_CODE_SIGKILL,
    EXIT_CODE_SIGTERM,
    POD_REASON_EVICTED,
    POD_REASON_PREEMPTING,
    POD_SCHEDULED,
    PREEMPTION_REASONS,
    PodPhase,
)
from gpuval_api.kueue import ADMISSION_GATE, QUEUE_NAME_LABEL
from gpuval_api.report import parse_termination_message
from gpuval_operator.timestamps import parse_time


@dataclass(frozen=True, slots=True)
class DeviceHealthFact:
    """One device of the pod's claims as the kubelet reports its health (KEP-4680)."""

    claim: str  # "claim:<claim>/<request>"
    resource_id: str  # "<driver>/<pool>/<device>"
    health: str
    message: str | None = None

    def as_status(self) -> dict[str, str]:
        return {
            "claim": self.claim[:320],
            "resourceId": self.resource_id[:512],
            "health": self.health[:16],
            **({"message": self.message[:1024]} if self.message else {}),
        }


def device_health(container_statuses: list[Any]) -> tuple[DeviceHealthFact, ...]:
    """The claims' devices of every container status (`allocatedResourcesStatus`), in the order
    given; the device plugin's resources (a name without 'claim:') are left out."""
    found = []
    for cs in container_statuses:
        for status in cs.get("allocatedResourcesStatus") or []:
            name = str(status.get("name") or "")
            if not name.startswith("claim:"):
                continue
            for resource in status.get("resources") or []:
                message = resource.get("message")
                found.append(
                    DeviceHealthFact(
                        claim=name,
                        resource_id=str(resource.get("resourceID") or ""),
                        health=str(resource.get("health") or "Unknown"),
                        message=str(message) if message else None,
                    )
                )
    return tuple(found[:MAX_DEVICE_HEALTH])


@dataclass(slots=True)
class PodFacts:
    name: str
    node: str
    run: str
    attempt: int
    phase: str
    created: float
    scheduled: bool
    unschedulable: str | None
    evicted: bool
    exit_code: int | None
    deleting: bool
    terminated_reason: str | None = None
    started: bool = False
    waiting_reason: str | None = None
    # The agent's verdict from the termination message, for a report the agent could not write.
    termination: dict[str, Any] | None = None
    # Preempted for a pod of higher priority (the scheduler's DisruptionTarget, or the kubelet's).
    preempted: bool = False
    # The pod's status.reason (the kubelet's: Evicted, UnexpectedAdmissionError, Preempting...).
    reason: str | None = None
    # The GPU sharing it was made for (keys.ANNOTATION_GPU_SHARING).
    sharing: str | None = None
    # Waiting for Kueue's admission (its scheduling gate is on): it holds no GPU yet.
    gated: bool = False
    # It asks for the node's devices through a ResourceClaim (spec.agent.devices dra).
    claimed: bool = False
    device_health: tuple[DeviceHealthFact, ...] = ()

    @classmethod
    def parse(cls, pod: Mapping[str, Any]) -> PodFacts:
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        status = pod.get("status") or {}
        labels = meta.get("labels") or {}
        annotations = meta.get("annotations") or {}
        scheduled = bool(spec.get("nodeName"))
        unschedulable = None
        evicted = status.get("reason") == POD_REASON_EVICTED
        preempted = status.get("reason") == POD_REASON_PREEMPTING
        for cond in status.get("conditions") or []:
            if cond.get("type") == POD_SCHEDULED and cond.get("status") == "False":
                unschedulable = cond.get("message") or cond.get("reason") or "unschedulable"
            if cond.get("type") == DISRUPTION_TARGET and cond.get("status") == "True":
                evicted = evicted or cond.get("reason") in EVICTION_REASONS
                preempted = preempted or cond.get("reason") in PREEMPTION_REASONS
        gated = any(g.get("name") == ADMISSION_GATE for g in spec.get("schedulingGates") or [])
        if gated:
            queue = labels.get(QUEUE_NAME_LABEL) or "?"
            unschedulable = f"Kueue has not admitted it from LocalQueue {queue} (quota)"
        exit_code, reason, termination, started, waiting = None, None, None, False, None
        for cs in status.get("containerStatuses") or []:
            state = cs.get("state") or {}
            terminated = state.get("terminated")
            started = started or "running" in state or terminated is not None
            waiting = (state.get("waiting") or {}).get("reason") or waiting
            if terminated is not None:
                exit_code = terminated.get("exitCode")
                reason = terminated.get("reason")
                termination = parse_termination_message(terminated.get("message"))
        return cls(
            name=meta.get("name", ""),
            node=annotations.get(keys.ANNOTATION_NODE) or spec.get("nodeName") or "",
            run=labels.get(keys.LABEL_RUN, ""),
            attempt=int(labels.get(keys.LABEL_ATTEMPT) or 1),
            phase=status.get("phase") or PodPhase.PENDING,
            created=parse_time(meta.get("creationTimestamp")) or 0.0,
            scheduled=scheduled,
            unschedulable=unschedulable,
            evicted=evicted,
            exit_code=exit_code,
            deleting=bool(meta.get("deletionTimestamp")),
            terminated_reason=reason,
            termination=termination,
            started=started,
            waiting_reason=waiting,
            preempted=preempted,
            reason=status.get("reason") or None,
            sharing=annotations.get(keys.ANNOTATION_GPU_SHARING) or None,
            gated=gated,
            claimed=bool(spec.get("resourceClaims")),
            device_health=device_health(status.get("containerStatuses") or []),
        )


def killed_from_outside(exit_code: int | None, terminated_reason: str | None) -> bool:
    """SIGKILL or SIGTERM as the kubelet reports it, not the kubelet's own OOM kill."""
    return (
        exit_code in (EXIT_CODE_SIGKILL, EXIT_CODE_SIGTERM)
        and terminated_reason != CONTAINER_REASON_OOM_KILLED
    )
