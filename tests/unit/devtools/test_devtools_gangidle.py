"""The GPU-seconds fabric pods held idle waiting for their gang, from the pods as the API server
shows them (gpuval_devtools.gangidle, pure)."""

from __future__ import annotations

import json
from typing import Any

from gpuval_api import keys
from gpuval_api.env import AgentEnv
from gpuval_devtools.gangidle import gang_idle

NODES = ["a", "b", "c"]
T0 = 1767225600.0  # 2026-01-01T00:00:00Z


def stamp(seconds: int) -> str:
    return f"2026-01-01T00:{seconds // 60:02d}:{seconds % 60:02d}Z"


def fabric_pod(
    group: str, rank: int, started: int | None, deleted: int | None = None, gpus: int = 8
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": f"{group}-r{rank}",
        "labels": {
            keys.LABEL_VALIDATION: "v",
            keys.LABEL_RUN: "1-aaaa",
            keys.LABEL_FABRIC_GROUP: group,
            keys.LABEL_FABRIC_RANK: str(rank),
        },
    }
    if deleted is not None:
        meta["deletionTimestamp"] = stamp(deleted)
    state = {} if started is None else {"running": {"startedAt": stamp(started)}}
    env = [{"name": AgentEnv.FABRIC_NODES, "value": json.dumps(NODES)}]
    container = {"name": "agent", "env": env, "resources": {"limits": {"nvidia.com/gpu": gpus}}}
    return {
        "metadata": meta,
        "spec": {"containers": [container]},
        "status": {"containerStatuses": [{"name": "agent", "state": state}] if state else []},
    }


def test_members_that_started_first_held_their_gpus_until_the_last_one_started() -> None:
    # Rank 0 at 0 s, rank 2 at 2 s, rank 1 blocked by work until 30 s: (30 + 28) x 8 GPUs.
    pods = [fabric_pod("g1", 0, 0), fabric_pod("g1", 1, 30), fabric_pod("g1", 2, 2)]
    idle = gang_idle(pods, now=T0 + 100)
    assert idle.by_group == {"v/1-aaaa/g1": 58 * 8.0}
    assert (idle.formed, idle.not_formed, idle.gpu_seconds) == (1, 0, 464.0)


def test_a_group_given_up_counts_its_started_members_until_its_pods_were_deleted() -> None:
    pods = [
        fabric_pod("g1", 0, 0, deleted=60),
        fabric_pod("g1", 1, None, deleted=60),
        fabric_pod("g1", 2, 5, deleted=61, gpus=4),
    ]
    idle = gang_idle(pods, now=T0 + 100)
    assert idle.by_group == {"v/1-aaaa/g1": 60 * 8.0 + 55 * 4.0}
    assert (idle.formed, idle.not_formed) == (0, 1)


def test_a_group_admitted_whole_holds_nothing_idle_and_other_pods_are_ignored() -> None:
    pods = [fabric_pod("g2", r, 7) for r in range(3)]
    other = {"metadata": {"name": "agent", "labels": {}}, "spec": {}, "status": {}}
    idle = gang_idle([*pods, other], now=T0 + 100)
    assert idle.by_group == {"v/1-aaaa/g2": 0.0} and idle.formed == 1


def test_a_group_still_forming_counts_until_now() -> None:
    idle = gang_idle([fabric_pod("g3", 0, 10)], now=T0 + 40)
    assert idle.by_group == {"v/1-aaaa/g3": 30 * 8.0} and idle.not_formed == 1
