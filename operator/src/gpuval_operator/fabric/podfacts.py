"""The compact facts of a fabric pod: the agent pod's facts (gpuval_operator.podfacts.PodFacts) and
what the fabric phase adds. Pure and synchronous.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuval_api import keys
from gpuval_api.fabric import parse_fabric_termination_message
from gpuval_operator.podfacts import PodFacts
from gpuval_operator.timestamps import parse_time


def container_started_at(pod: Mapping[str, Any]) -> float | None:
    """When the pod's container started (wall clock, from its status), None before."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        state = cs.get("state") or {}
        for key in ("running", "terminated"):
            started = parse_time((state.get(key) or {}).get("startedAt"))
            if started is not None:
                return started
    return None


@dataclass(slots=True)
class FabricPodFacts:
    """A fabric pod: the agent pod's facts, its group and rank, the group's port, when its
    container started (wall clock, from the pod's status), and the fabric verdict its agent
    left in its termination message."""

    pod: PodFacts
    group: str
    rank: int
    port: int | None
    started_at: float | None
    termination: dict[str, Any] | None

    @property
    def name(self) -> str:
        return self.pod.name

    @classmethod
    def parse(cls, pod: Mapping[str, Any]) -> FabricPodFacts:
        meta = pod.get("metadata") or {}
        labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
        port = str(annotations.get(keys.ANNOTATION_FABRIC_PORT) or "")
        rank = str(labels.get(keys.LABEL_FABRIC_RANK) or "")
        termination = None
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            terminated = (cs.get("state") or {}).get("terminated")
            if terminated is not None:
                termination = parse_fabric_termination_message(terminated.get("message"))
        return cls(
            pod=PodFacts.parse(pod),
            group=str(labels.get(keys.LABEL_FABRIC_GROUP) or ""),
            rank=int(rank) if rank.isdigit() else -1,
            port=int(port) if port.isdigit() else None,
            started_at=container_started_at(pod),
            termination=termination,
        )


def is_fabric_pod(pod: Mapping[str, Any]) -> bool:
    return keys.LABEL_FABRIC_GROUP in ((pod.get("metadata") or {}).get("labels") or {})
