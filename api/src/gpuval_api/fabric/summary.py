"""The fabric part of a GpuValidation's status (`status.fabric`): bounded whatever the fleet's
size, like the rest of the status (counts, a handful of the worst groups, the slow groups, the
slow paths between topology domains), and one display string for the printer column. Per-node
detail lives in the reports' status.fabric.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from gpuval_api.checks import camel
from gpuval_api.fabric import MAX_GROUP
from gpuval_api.reasons import Reason

# The worst groups, the slow groups and the slow paths listed in the status, at most this many each.
MAX_LISTED_GROUPS = 5


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=camel, populate_by_name=True, extra="forbid")


class FabricGroupEntry(_Model):
    """One group of the run's fabric phase, as the status lists it."""

    group: str = Field(
        max_length=253, description="The group's name (label gpuval.dev/fabric-group)."
    )
    domain: str | None = Field(
        default=None,
        max_length=63,
        description="The topology domain of a group inside one; absent for a cross-domain group.",
    )
    nodes: int = Field(ge=0, description="Nodes in the group.")
    busbw_gbps: float | None = Field(
        default=None, description="The group's all-reduce busbw at its largest size, GB/s."
    )
    floor_gbps: float | None = Field(
        default=None,
        description="Below this the group is slow: the thresholds against the run's median of "
        "groups of the same size.",
    )
    reason: Reason | None = Field(
        default=None, description="The worst fabric reason of its nodes; absent when all passed."
    )
    message: str = Field(default="", max_length=1024, description="One line about it.")
    train_tokens_per_second_per_gpu: float | None = Field(
        default=None,
        description="Its training phase's tokens per second per GPU (spec.fabric.train).",
    )


class FabricTrainGroupEntry(_Model):
    """A group whose training phase (spec.fabric.train) was slow against the run's groups of its
    size: recorded, no node blamed."""

    group: str = Field(max_length=253, description="The group's name.")
    domain: str | None = Field(
        default=None, max_length=63, description="Its topology domain, if inside one."
    )
    nodes: int = Field(ge=0, description="Nodes in the group.")
    tokens_per_second_per_gpu: float | None = Field(
        default=None, description="The group's training tokens per second per GPU."
    )
    step_seconds: float | None = Field(default=None, description="Its median step time.")
    floor: float | None = Field(
        default=None,
        description="Below this (tokens/s per GPU) a group is slow: fabric.train."
        "fractionOfMedian of the run's median for groups of its size and model.",
    )
    message: str = Field(default="", max_length=1024, description="One line about it.")


class FabricTrainMismatchEntry(_Model):
    """A group whose training losses differ from its peers' (the group's fingerprint)."""

    group: str = Field(max_length=253, description="The group's name.")
    nodes: list[Annotated[str, Field(max_length=253)]] = Field(
        max_length=MAX_GROUP, description="The group's nodes (none of them is blamed for it)."
    )
    step: int = Field(ge=0, description="The first step (1-based) whose loss differs.")
    message: str = Field(default="", max_length=1024, description="One line about it.")


class FabricTrainRunStatus(_Model):
    """What the run's training phase (spec.fabric.train) found, bounded."""

    median_pair_tokens_per_second_per_gpu: float | None = Field(
        default=None,
        description="The run's reference training pair: the median over nodes of each node's "
        "best training pair, tokens/s per GPU (the domain groups' with a topology key).",
    )
    cross_median_pair_tokens_per_second_per_gpu: float | None = Field(
        default=None, description="The same over the cross-domain groups' training pairs."
    )
    slow_groups: list[FabricTrainGroupEntry] = Field(
        default_factory=list,
        max_length=MAX_LISTED_GROUPS,
        description="Groups whose training was below their floor with no node named; at most 5.",
    )
    slow_groups_omitted: int = Field(default=0, description="Slow groups beyond the listed.")
    mismatched_groups: list[FabricTrainMismatchEntry] = Field(
        default_factory=list,
        max_length=MAX_LISTED_GROUPS,
        description="Groups whose training losses differ from the other groups of their size and "
        "GPU stack (bit for bit), or of another stack beyond fabric.train.lossTolerance; at "
        "most 5.",
    )
    mismatched_groups_omitted: int = Field(
        default=0, description="Groups whose losses differ beyond the listed."
    )


class FabricRankWait(_Model):
    """One rank of a forming group, as the operator sees its fabric pod."""

    rank: int = Field(ge=0, le=MAX_GROUP, description="The rank in its group.")
    node: str = Field(max_length=253, description="Its node.")
    state: str = Field(
        default="",
        max_length=256,
        description=(
            "Where its pod is: started, or why not yet (not made yet; "
            "pending, with the scheduler's words; scheduled, its container not started)."
        ),
    )


class FabricGroupWait(_Model):
    """A group whose pods have not all started yet: the gang wait (fabric.timeouts.gangSeconds)."""

    group: str = Field(max_length=253, description="The group's name.")
    nodes: int = Field(ge=0, description="Nodes in the group.")
    joined: list[FabricRankWait] = Field(
        default_factory=list,
        max_length=MAX_GROUP,
        description="Ranks whose fabric pod started.",
    )
    waiting_for: list[FabricRankWait] = Field(
        default_factory=list,
        max_length=MAX_GROUP,
        description="Ranks whose fabric pod has not started, and why.",
    )
    gang_deadline: str | None = Field(
        default=None,
        description=(
            "When the group is given up (FabricGangNotFormed, NotRun) if its pods have not all "
            "started (RFC 3339): gangSeconds from rank 0's pod, never after rank 0 stops waiting."
        ),
        json_schema_extra={"format": "date-time"},
    )


class FabricPathEntry(_Model):
    """A slow network path between topology domains, found by a cross-domain group: out of one
    domain (FabricSlowDomain), or between two (FabricSlowPath). No node is blamed for it."""

    group: str = Field(max_length=253, description="The cross-domain group that found it.")
    domains: list[Annotated[str, Field(max_length=63)]] = Field(
        max_length=2,
        description="One domain (the path out of it) or two (the path between them).",
    )
    nodes: list[Annotated[str, Field(max_length=253)]] = Field(
        max_length=2, description="The representatives it was tested through."
    )
    reason: Reason = Field(description="FabricSlowDomain or FabricSlowPath.")
    busbw_gbps: float | None = Field(
        default=None, description="The slowest pair busbw through it, GB/s (absent: failed)."
    )
    floor_gbps: float | None = Field(
        default=None, description="The cross-domain pairs' floor it was judged against, GB/s."
    )
    message: str = Field(default="", max_length=1024, description="One line about it.")


class FabricNodeCounts(_Model):
    """Nodes of the run's fabric phase by their fabric verdict."""

    total: int = Field(default=0, description="Nodes in the fabric phase.")
    pending: int = Field(default=0, description="Nodes without a fabric verdict yet.")
    passed: int = Field(default=0, description="Nodes whose fabric passed.")
    failed: int = Field(default=0, description="Nodes the fabric named (slow, unreachable...).")
    not_run: int = Field(
        default=0, description="Nodes whose fabric was not tested (their group did not form)."
    )


class FabricRunStatus(_Model):
    """What the run's fabric phase found, bounded."""

    summary: str = Field(
        default="",
        max_length=256,
        description="For display only (printer column), e.g. '1 failed of 8; worst 323.0 GB/s'.",
    )
    started_at: str | None = Field(
        default=None,
        description="When the groups were planned (RFC 3339).",
        json_schema_extra={"format": "date-time"},
    )
    completed_at: str | None = Field(
        default=None,
        description="When every group's verdict was settled (RFC 3339).",
        json_schema_extra={"format": "date-time"},
    )
    groups: int = Field(default=0, description="Groups of the run (cross-domain ones included).")
    groups_done: int = Field(default=0, description="Groups with every node's result in.")
    nodes: FabricNodeCounts = Field(
        default_factory=FabricNodeCounts, description="Nodes by fabric verdict."
    )
    median_pair_gbps: float | None = Field(
        default=None,
        description="The run's reference pair busbw: the median over nodes of each node's best "
        "pair, in the domain groups with a topology key (the pairs' floor is taken from it).",
    )
    cross_median_pair_gbps: float | None = Field(
        default=None,
        description="The same reference over the cross-domain groups' pairs (a topology key).",
    )
    worst_groups: list[FabricGroupEntry] = Field(
        default_factory=list,
        max_length=MAX_LISTED_GROUPS,
        description="The groups with the lowest busbw (failed ones first), at most 5.",
    )
    slow_groups: list[FabricGroupEntry] = Field(
        default_factory=list,
        max_length=MAX_LISTED_GROUPS,
        description=(
            "Groups below their floor in which no node was named: recorded here only, no node "
            "is blamed; at most 5."
        ),
    )
    slow_groups_omitted: int = Field(default=0, description="Slow groups beyond the listed.")
    waiting: list[FabricGroupWait] = Field(
        default_factory=list,
        max_length=MAX_LISTED_GROUPS,
        description=(
            "Groups forming now, whose pods have not all started: who joined, who is awaited "
            "and why, the gang deadline; at most 5, the nearest deadline first."
        ),
    )
    waiting_omitted: int = Field(default=0, description="Forming groups beyond the listed.")
    slow_paths: list[FabricPathEntry] = Field(
        default_factory=list,
        max_length=MAX_LISTED_GROUPS,
        description=(
            "Slow network paths between topology domains the cross-domain groups found (no node "
            "is blamed for them); at most 5."
        ),
    )
    slow_paths_omitted: int = Field(default=0, description="Slow paths beyond the listed.")
    train: FabricTrainRunStatus | None = Field(
        default=None,
        description="The training phase's comparison (spec.fabric.train), once the groups are "
        "compared.",
    )
