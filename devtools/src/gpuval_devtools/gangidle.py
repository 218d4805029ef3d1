"""Pure: the GPU-seconds that fabric pods held idle waiting for their gang, from the pods as the
API server shows them (issue 21: what a gang that forms outside the cluster's batch scheduler
costs; the benchmarks and the tests print it).

A member holds its node's GPUs from its start (its container running; the scheduler bound it a
moment before) until its group forms, when the last member starts; in a group that never formed,
until the operator gave the group up and deleted its pods (the earliest deletion). Without Kueue
the operator makes a group's pods at once and each starts when the scheduler binds it, so the
first to start waits for the last, and one member whose GPUs are held by work keeps every other
member's GPUs idle for as long; a Kueue pod group is admitted whole, and its members start
together.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuval_api import keys
from gpuval_api.crd import GPU_RESOURCE
from gpuval_api.env import AgentEnv
from gpuval_operator.fabric.podfacts import container_started_at
from gpuval_operator.timestamps import parse_time


@dataclass(frozen=True, slots=True)
class Member:
    """One fabric pod: its group (validation/run/group), rank, the group's size, its GPUs, when
    its container started and when it was deleted (Unix seconds, None: not yet)."""

    group: str
    rank: int
    world: int
    gpus: int
    started_at: float | None
    deleted_at: float | None


@dataclass(frozen=True, slots=True)
class GangIdle:
    """Idle GPU-seconds by group, and how many groups formed and did not."""

    by_group: dict[str, float] = field(default_factory=dict)
    formed: int = 0
    not_formed: int = 0

    @property
    def gpu_seconds(self) -> float:
        return sum(self.by_group.values())


def member(pod: Mapping[str, Any]) -> Member | None:
    """The fabric pod as a member of its group; None for any other pod."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    if keys.LABEL_FABRIC_GROUP not in labels:
        return None
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    container = containers[0]
    env = {e.get("name"): e.get("value") for e in container.get("env") or []}
    limits = (container.get("resources") or {}).get("limits") or {}
    group = "/".join(
        (
            labels.get(keys.LABEL_VALIDATION, ""),
            labels.get(keys.LABEL_RUN, ""),
            labels[keys.LABEL_FABRIC_GROUP],
        )
    )
    return Member(
        group=group,
        rank=int(labels.get(keys.LABEL_FABRIC_RANK) or 0),
        world=len(json.loads(env.get(AgentEnv.FABRIC_NODES) or "[]")),
        gpus=int(limits.get(GPU_RESOURCE) or 0),
        started_at=container_started_at(pod),
        deleted_at=parse_time(meta.get("deletionTimestamp")),
    )


def group_idle(members: Iterable[Member], now: float) -> tuple[float, bool]:
    """One group's idle GPU-seconds and whether it formed. A group still forming counts its
    started members' wait until `now`."""
    by_rank = {m.rank: m for m in members}
    world = max((m.world for m in by_rank.values()), default=0)
    starts = [m.started_at for m in by_rank.values() if m.started_at is not None]
    formed = world > 0 and len(starts) == world == len(by_rank)
    if formed:
        until = max(starts)
    else:
        deletions = [m.deleted_at for m in by_rank.values() if m.deleted_at is not None]
        until = min(deletions, default=now)
    idle = sum(
        max(0.0, until - m.started_at) * m.gpus
        for m in by_rank.values()
        if m.started_at is not None
    )
    return idle, formed


def gang_idle(pods: Iterable[Mapping[str, Any]], now: float) -> GangIdle:
    """The idle GPU-seconds of every fabric group among `pods` (each pod's last state seen; a
    deleted pod's from its DELETED event), other pods ignored."""
    groups: dict[str, list[Member]] = {}
    for pod in pods:
        found = member(pod)
        if found is not None:
            groups.setdefault(found.group, []).append(found)
    by_group: dict[str, float] = {}
    formed = 0
    for name, members in sorted(groups.items()):
        by_group[name], done = group_idle(members, now)
        formed += done
    return GangIdle(by_group, formed, len(groups) - formed)
