"""Cross-node NCCL, the fabric: what a group of agents is asked to measure, what each reports, and
the pure decisions both the agents and the operator make from the figures (design.md, "Fabric").

A group is a few nodes (8 by default) whose agents run one all-reduce across all their GPUs, then
pair rounds in the same pods: every node in two pairs with different partners (three rounds for an
odd group), then one confirmation round that pairs each suspect with a node known good and tests
each slow link again; who the rounds name is gpuval_api.fabric.isolation's. Pairs and groups are
all-reduces pinned to NCCL's ring algorithm, so a pair's bus bandwidth compares with the group's
(a 2-node tree can show twice the network rate).

With `fabric.train` on, the group then runs the agent's training step data-parallel across its
nodes and in the same pair rounds (`train`: what is asked and reported of it, below this module).

This module holds what a group is asked (FabricConfig, `spec.fabric`), what each agent reports
(FabricResult, a report's `status.fabric`) and the pair schedule; beside it, each importing only
what is here and below:
- `isolation`: who a group's pair rounds name (pure; the agents and the operator alike);
- `summary`: the fabric part of a GpuValidation's status (`status.fabric`), bounded;
- `evidence`: the evidence bundle of a node the fabric failed;
- `view`: a node's fabric result as a person looks at it (gpuval_api.views).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gpuval_api import termination
from gpuval_api.checks import MAX_FIGURE, camel
from gpuval_api.fabric.train import FabricTrain, FabricTrainResult
from gpuval_api.kueue import queue_field
from gpuval_api.reasons import Reason, verdict_of
from gpuval_api.report import TERMINATION_MESSAGE_CHARS, StatusKey, one_line, tighten_message
from gpuval_api.result import NcclSize, Verdict

FABRIC_SCHEMA_VERSION: Literal["gpuval.dev/v1alpha1/fabric"] = "gpuval.dev/v1alpha1/fabric"
MAX_GROUP = 64
GIB = 1 << 30
# The agent's subcommand, and the fabric pod's command (the operator sets it; the agent's CLI and
# the pod runner read the same names).
FABRIC_SUBCOMMAND = "fabric"
FABRIC_POD_COMMAND = ("gpuval-agent", FABRIC_SUBCOMMAND, "--cluster")
# The check a fabric failure is listed under in a report's status.failures.
FABRIC_CHECK = FABRIC_SUBCOMMAND


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=camel, populate_by_name=True, extra="forbid")


class Transport(StrEnum):
    """How NCCL moved the data between nodes, from its own INFO lines ('via NET/IB/0/GDRDMA')."""

    IB_GDRDMA = "IB/GDRDMA"  # InfiniBand or RoCE with GPUDirect RDMA
    IB = "IB"  # InfiniBand or RoCE through host memory
    SOCKET = "Socket"  # TCP sockets
    P2P = "P2P"  # no network at all (the ranks share a host)
    UNKNOWN = "Unknown"  # NCCL said nothing about it (NCCL_DEBUG off, or no channel line)


class ExpectedTransport(StrEnum):
    ANY = "Any"
    IB = "IB"  # IB or IB/GDRDMA; falling back to sockets fails (FabricTransportFallback)
    SOCKET = "Socket"


class NcclVar(_Model):
    """One NCCL (or other) environment variable for the fabric's processes."""

    name: str = Field(
        min_length=1, max_length=128, pattern=r"^[A-Z_][A-Z0-9_]*$", description="Variable name."
    )
    value: str = Field(default="", max_length=1024, description="Variable value.")


class FabricThresholds(_Model):
    """When a group or a pair is slow: below either minimum."""

    absolute_busbw_gbps: float | None = Field(
        default=None,
        ge=0,
        le=MAX_FIGURE,
        description="Minimum bus bandwidth in GB/s (at the largest size for a group). Unset: none.",
    )
    fraction_of_median: float = Field(
        default=0.9,
        gt=0,
        le=1,
        description=(
            "Minimum as a fraction of the run's median for groups of the same size (and of the "
            "median pair for pairs). One NIC down of 8 costs 12.5 %, so stay at 0.9 or above."
        ),
    )

    def floor(self, median: float | None) -> float:
        """The figure below which a group or pair is slow, given the comparable median."""
        candidates = [self.absolute_busbw_gbps or 0.0]
        if median is not None:
            candidates.append(self.fraction_of_median * median)
        return max(candidates)


class FabricTimeouts(_Model):
    gang_seconds: int = Field(
        default=600,
        ge=10,
        le=86400,
        description="Every pod of a group must run within this; else the group is NotRun.",
    )
    init_seconds: int = Field(
        default=180, ge=5, le=3600, description="Rendezvous and NCCL communicator set-up."
    )
    phase_seconds: int = Field(
        default=120,
        ge=5,
        le=3600,
        description="Each phase (the group sweep, each pair round); a hang past it is NcclTimeout.",
    )


class FabricConfig(_Model):
    """What the agents of a group are told to measure (GPUVAL_FABRIC_CONFIG, or by hand)."""

    min_bytes: int = Field(
        default=1 << 20, ge=4, le=1 << 36, description="Smallest all-reduce of the group sweep."
    )
    max_bytes: int = Field(
        default=8 * GIB, ge=4, le=1 << 36, description="Largest all-reduce of the group sweep."
    )
    iterations: int = Field(default=20, ge=1, le=10000, description="Timed all-reduces per size.")
    pair_bytes: int = Field(
        default=GIB,
        ge=4,
        le=1 << 36,
        description="All-reduce size of the pair and confirmation rounds (at most maxBytes).",
    )
    thresholds: FabricThresholds = Field(
        default_factory=FabricThresholds, description="When a group or a pair is slow."
    )
    expected_transport: ExpectedTransport = Field(
        default=ExpectedTransport.ANY,
        description="IB: falling back to sockets fails the node. Socket: expected. Any: recorded.",
    )
    nccl_env: list[NcclVar] = Field(
        default_factory=list,
        max_length=32,
        description="Extra NCCL environment, e.g. NCCL_SOCKET_IFNAME=eth1, NCCL_IB_HCA=mlx5_0.",
    )
    timeouts: FabricTimeouts = Field(
        default_factory=FabricTimeouts, description="Gang formation, set-up and phase limits."
    )
    train: FabricTrain = Field(
        default_factory=FabricTrain,
        description="The training step data-parallel across the group's nodes (gradients "
        "all-reduced over the fabric), after the all-reduce phases; off unless enabled.",
    )

    @model_validator(mode="after")
    def _sizes_ordered(self) -> FabricConfig:
        if self.min_bytes > self.max_bytes:
            raise ValueError(
                f"fabric.minBytes ({self.min_bytes}) is larger than fabric.maxBytes "
                f"({self.max_bytes}); set minBytes <= maxBytes"
            )
        return self

    @property
    def pair_size(self) -> int:
        return min(self.pair_bytes, self.max_bytes)


class FabricSpec(FabricConfig):
    """`GpuValidation.spec.fabric`: off unless given. Nodes that passed their local checks are
    grouped, and each group's agents all-reduce across nodes."""

    group_size: int = Field(
        default=8, ge=2, le=MAX_GROUP, description="Nodes per group (the last may be smaller)."
    )
    topology_key: str | None = Field(
        default=None,
        min_length=1,
        max_length=317,
        description=(
            "A node label naming its domain (e.g. a rack): groups stay inside a domain, and one "
            "more group of a representative per domain crosses them."
        ),
    )
    host_network: bool = Field(
        default=False,
        description="Run the fabric pods on the node's network (as NCCL jobs often do).",
    )
    queue: str | None = queue_field(
        "each group's pods, as one pod group admitted whole (no member holds a GPU while the "
        "quota cannot hold them all)"
    )


class FabricPair(_Model):
    """One pair (or confirmation) all-reduce between two nodes of the group."""

    round: int = Field(description="1, 2 (and 3 for an odd group): pair rounds; 0: confirmation.")
    a: str
    b: str
    bytes: int
    busbw_gbps: float | None = Field(default=None, description="None when it failed.")
    error: str | None = None

    @property
    def figure(self) -> float | None:
        """What the pair rounds judge (gpuval_api.fabric.isolation): its busbw."""
        return self.busbw_gbps


class FabricResult(_Model):
    """What one node's agent reports about its group (`status.fabric.result`, `--json`)."""

    schema_version: Literal["gpuval.dev/v1alpha1/fabric"] = FABRIC_SCHEMA_VERSION
    agent_version: str
    backend: str
    group: str
    node: str
    rank: int
    nodes: list[str] = Field(description="The group's nodes by rank.")
    gpus_per_node: int
    transport: Transport = Transport.UNKNOWN
    transport_lines: list[str] = Field(
        default_factory=list, description="NCCL's own words about the transport, a few lines."
    )
    nccl_env: dict[str, str] = Field(
        default_factory=dict, description="Every NCCL_* variable in effect for the measurement."
    )
    sizes: list[NcclSize] = Field(default_factory=list, description="The group's sweep.")
    busbw_gbps: float | None = Field(default=None, description="Group busbw at the largest size.")
    pairs: list[FabricPair] = Field(default_factory=list, description="Every pair of the group.")
    train: FabricTrainResult | None = Field(
        default=None, description="The group's training phase (fabric.train.enabled)."
    )
    verdict: Verdict
    reason: Reason | None = None
    message: str = ""
    nccl_log: str | None = Field(
        default=None,
        description="NCCL's own lines kept as evidence, on every run (a node its agent passed "
        "may fail the run-wide comparison): each warning or error with the lines around it, "
        "the set-up lines (version, network, interfaces, one per transport); at most 4 KiB "
        "when every phase went well, 12 KiB otherwise.",
    )
    log_tail: str | None = Field(
        default=None,
        description="The rank processes' last words (at most 8,000 characters), when a phase "
        "failed.",
    )


class WaitingRank(_Model):
    """One rank of a group that is forming."""

    rank: int = Field(ge=0, le=MAX_GROUP)
    node: str | None = Field(default=None, description="Its node's name, where known.")
    address: str | None = Field(
        default=None,
        description="Where it is: the address a joined rank connected from, rank 0's ADDR:PORT.",
    )


class FabricWait(_Model):
    """What a fabric agent waits for while its group forms: the joined ranks, the missing ones,
    the time left before fabric.timeouts.initSeconds gives up. `gpuval-agent fabric` prints it
    every few seconds; the in-cluster agent can put it in its report for the operator to show."""

    group: str
    rank: int = Field(ge=0, le=MAX_GROUP, description="The waiting agent's rank.")
    world: int = Field(ge=1, le=MAX_GROUP)
    master: str = Field(description="Rank 0's rendezvous ADDR:PORT.")
    connected: bool = Field(
        default=True,
        description="False: this rank has not reached rank 0 yet (joined and waitingFor are "
        "then unknown); rank 0 is always connected.",
    )
    joined: list[WaitingRank] = Field(default_factory=list)
    waiting_for: list[WaitingRank] = Field(default_factory=list)
    seconds_left: float = Field(description="Until the group gives up (initSeconds).")
    last_error: str | None = Field(
        default=None, description="Why this rank could not reach rank 0 yet (its last attempt)."
    )


def _ranks(ranks: Sequence[WaitingRank]) -> str:
    def one(r: WaitingRank) -> str:
        details = ", ".join(d for d in (r.node, r.address) if d)
        return f"rank {r.rank}" + (f" ({details})" if details else "")

    return ", ".join(one(r) for r in ranks) or "none"


def describe_wait(wait: FabricWait) -> str:
    """One line about a forming group, e.g. 'fabric group g: rank 0 waits for rank 2 (gpu-c);
    joined: rank 0 (gpu-a, 10.0.0.1:29500), rank 1 (gpu-b, 10.0.0.2); 163 s left of
    fabric.timeouts.initSeconds'."""
    left = f"{wait.seconds_left:.0f} s left of fabric.timeouts.initSeconds"
    head = f"fabric group {wait.group}: rank {wait.rank}"
    if not wait.connected:
        last = f" (last attempt: {wait.last_error})" if wait.last_error else ""
        return f"{head} cannot reach rank 0 at {wait.master} yet{last}; {left}"
    return f"{head} waits for {_ranks(wait.waiting_for)}; joined: {_ranks(wait.joined)}; {left}"


# -- the pure decisions --


def pair_rounds(world: int) -> list[list[tuple[int, int]]]:
    """Rounds of disjoint pairs (ranks) so that every node sits in two pairs with different
    partners: the edges of the ring 0-1-...-(n-1)-0, two rounds for an even group, three for an
    odd one (an odd ring's edges cannot be split into two matchings); one pair for two nodes."""
    if world < 2:
        return []
    if world == 2:
        return [[(0, 1)]]
    edges = [(i, (i + 1) % world) for i in range(world)]
    if world % 2 == 0:
        return [edges[0::2], edges[1::2]]
    return [edges[0 : world - 1 : 2], edges[1 : world - 1 : 2], [edges[-1]]]


def read_pairs(result: object) -> tuple[FabricPair, ...]:
    """The pairs of a fabric agent's result document (a report's status.fabric.result); a pair of
    a shape this version cannot read is left out, not guessed."""
    pairs = result.get("pairs") if isinstance(result, Mapping) else None
    found: list[FabricPair] = []
    for item in pairs if isinstance(pairs, list) else []:
        try:
            found.append(FabricPair.model_validate(item))
        except ValidationError:
            continue
    return tuple(found)


class FabricKey(StrEnum):
    """Keys of a GpuNodeReport's `status.fabric` (FabricStatus's field names)."""

    GROUP = "group"
    RANK = "rank"
    WORLD = "world"
    NODES = "nodes"
    VERDICT = "verdict"
    REASON = "reason"
    MESSAGE = "message"
    BUSBW = "busbwGBps"
    TRANSPORT = "transport"
    RESULT = "result"
    CLASSIFIED = "classified"


class FabricStatus(_Model):
    """`status.fabric` of a node's GpuNodeReport: its group's figures and its fabric verdict
    (written by its fabric agent; the operator writes the group alone when it plans the run's
    groups, records what an agent could not, and rewrites the verdict once it has compared the
    run's groups and pairs)."""

    group: str = Field(max_length=253, description="The fabric group's name.")
    rank: int = Field(ge=0, le=MAX_GROUP, description="This node's rank in the group.")
    world: int = Field(ge=1, le=MAX_GROUP, description="Nodes in the group.")
    nodes: list[Annotated[str, Field(max_length=253)]] | None = Field(
        default=None, max_length=MAX_GROUP, description="The group's nodes by rank."
    )
    verdict: Verdict | None = Field(
        default=None,
        json_schema_extra={
            "enum": [str(Verdict.PASSED), str(Verdict.FAILED), str(Verdict.NOT_RUN)]
        },
        description="Passed, Failed (the fabric named this node) or NotRun; absent: planned.",
    )
    reason: Reason | None = Field(default=None, description="Why, when not Passed.")
    message: str = Field(default="", max_length=1024, description="One line about it.")
    busbw_gbps: float | None = Field(
        default=None, description="The group's all-reduce busbw at its largest size, GB/s."
    )
    transport: Transport | None = Field(default=None, description="What NCCL used across nodes.")
    result: dict[str, object] | None = Field(
        default=None,
        description="The fabric agent's whole result (schema gpuval.dev/v1alpha1/fabric).",
    )
    classified: bool | None = Field(
        default=None,
        description=(
            "True where the operator's comparison of the run's groups changed verdict, reason or "
            "message and rewrote them (result keeps the agent's own); absent where the agent's "
            "pass stands as written."
        ),
    )


def build_fabric_status(result: FabricResult) -> dict[str, object]:
    """`status.fabric` of the node's GpuNodeReport, as its fabric agent writes it (merge patch)."""
    status = FabricStatus(
        group=result.group,
        rank=result.rank,
        world=len(result.nodes),
        nodes=list(result.nodes),
        verdict=result.verdict,
        reason=result.reason,
        message=result.message[:1024],
        busbw_gbps=result.busbw_gbps,
        transport=result.transport,
        result=result.model_dump(mode="json", by_alias=True),
    )
    return status.model_dump(mode="json", by_alias=True)


def build_planned_fabric_status(group: str, nodes: Sequence[str], node: str) -> dict[str, object]:
    """`status.fabric` as the operator writes it when it plans the run's groups: the group and
    the node's rank in it, every other field cleared (a merge patch's null), so a node's earlier
    group (a representative's, before its cross-domain group) is not read as this one's."""
    status = FabricStatus(group=group, rank=list(nodes).index(node), world=len(nodes))
    status.nodes = list(nodes)
    body = status.model_dump(mode="json", by_alias=True)
    body[FabricKey.MESSAGE] = None
    return body


def build_operator_fabric_status(
    group: str, nodes: Sequence[str], node: str, reason: Reason, message: str
) -> dict[str, object]:
    """`status.fabric` the operator records for a node whose fabric agent could not (its pod
    never started, hung past its deadline, failed without a verdict): the verdict is the
    reason's class (gpuval_api.reasons), the figures cleared."""
    body = build_planned_fabric_status(group, nodes, node)
    body[FabricKey.VERDICT] = str(verdict_of(reason))
    body[FabricKey.REASON] = str(reason)
    body[FabricKey.MESSAGE] = one_line(message)
    return body


# What a termination message leaves out: the result document and the group's node list (too big
# for the kubelet's 4096 bytes), and the operator's mark (an agent's verdict is never classified).
_NOT_IN_TERMINATION = {"result", "nodes", "classified"}


def _compact_fabric(status: Mapping[str, object]) -> dict[str, Any]:
    compact = FabricStatus.model_validate(status).model_dump(
        mode="json", by_alias=True, exclude=_NOT_IN_TERMINATION
    )
    compact[FabricKey.MESSAGE] = one_line(
        str(compact.get(FabricKey.MESSAGE) or ""), TERMINATION_MESSAGE_CHARS
    )
    return compact


def _read_fabric(document: dict[str, Any]) -> dict[str, Any] | None:
    try:
        status = FabricStatus.model_validate(document)
    except ValueError:
        return None
    if status.verdict is None:
        return None
    return status.model_dump(mode="json", by_alias=True, exclude=_NOT_IN_TERMINATION)


# The fabric pod's termination message: {"fabric": <status.fabric without the result document and
# the node list>}, the message given up first when it does not fit.
FABRIC_TERMINATION = termination.Kind(
    key=str(StatusKey.FABRIC), compact=_compact_fabric, read=_read_fabric, shrink=(tighten_message,)
)


def build_fabric_termination_message(status: Mapping[str, object]) -> str:
    """A fabric agent's `status.fabric` as its termination message: the node's fabric verdict
    survives an API server the agent could not reach (read back with
    `parse_fabric_termination_message`)."""
    return termination.build(FABRIC_TERMINATION, status)


def parse_fabric_termination_message(text: str | None) -> dict[str, object] | None:
    """The compact `status.fabric` a fabric agent left in its termination message; None when
    the text carries none (an agent that died before its verdict, or text that is not ours)."""
    return termination.read(FABRIC_TERMINATION, text)
