"""What a node reports of one phase, and what measures it (the executor interface).

A StepReport travels between the agents as JSON (coordinator.py); an Executor is the real
backend (torchfabric.py: rank processes, one per GPU) or the test double (simulated.py).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from gpuval_agent.backends.base import GpuUse, shares_host_pid_namespace
from gpuval_agent.fabric.coordinator import Roster
from gpuval_agent.training import TrainPlan
from gpuval_api.checks import camel


class StepStatus(StrEnum):
    OK = "ok"
    TIMEOUT = "timeout"  # no result within the phase's limit: a hang
    ERROR = "error"  # a process died or NCCL failed
    WRONG_SUM = "wrongSum"  # the all-reduce's checked sum was wrong
    UNREACHABLE = "unreachable"  # the rank processes could not reach their rendezvous store
    ABSENT = "absent"  # the node's agent sent no report at all


# When several nodes' reports disagree, the one a summary names: evidence first, silence last.
SEVERITY = (
    StepStatus.WRONG_SUM,
    StepStatus.ERROR,
    StepStatus.UNREACHABLE,
    StepStatus.TIMEOUT,
    StepStatus.ABSENT,
    StepStatus.OK,
)


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=camel, populate_by_name=True, extra="ignore")


class PairFigure(_Model):
    a: int = Field(description="The pair's first node (rank).")
    b: int
    seconds: float = Field(gt=0, description="One all-reduce, the slowest rank of the pair.")


class TrainFigures(_Model):
    """This node's part of a data-parallel training run across nodes (the group's, or a pair's)."""

    pair: tuple[int, int] | None = Field(
        default=None, description="In a pair round: the pair (node ranks) these are of."
    )
    losses: list[list[str]] = Field(
        default_factory=list, description="Per local GPU, its loss at every step (8 hex digits)."
    )
    step_seconds: list[float] = Field(
        default_factory=list, description="Each timed step's time, this node's slowest GPU."
    )
    tokens: int = Field(default=0, description="Tokens this node's GPUs trained in timed steps.")
    versions: dict[str, str | None] = Field(
        default_factory=dict, description="torch, CUDA and NCCL the ranks ran with."
    )


class StepReport(_Model):
    status: StepStatus = StepStatus.OK
    error: str | None = None
    sizes: list[tuple[int, float]] = Field(
        default_factory=list, description="Group sweep: (bytes, seconds), slowest rank."
    )
    pairs: list[PairFigure] = Field(default_factory=list)
    train: TrainFigures | None = Field(
        default=None, description="A training phase: this node's figures and losses."
    )
    in_use: str | None = Field(
        default=None,
        description="Another process used one of this node's GPUs during the phase: who.",
    )

    @property
    def ok(self) -> bool:
        return self.status is StepStatus.OK

    def payload(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)

    @classmethod
    def from_payload(cls, payload: Any) -> StepReport:
        """A gathered payload; a node that sent none (or nonsense) is ABSENT."""
        if payload is None:
            return cls(status=StepStatus.ABSENT, error="its agent sent no report")
        try:
            return cls.model_validate(payload)
        except ValueError as error:
            return cls(status=StepStatus.ABSENT, error=f"its report is unreadable: {error}")


def failed(status: StepStatus, error: str) -> StepReport:
    return StepReport(status=status, error=error)


class Executor(ABC):
    """Measures this node's part of each phase. Every call returns by its deadline."""

    backend: str

    @abstractmethod
    def info(self) -> dict[str, Any]:
        """What this node tells the group when it joins (at least {"gpus": n}; for the training
        phase also its GPUs' smallest memory, "memoryBytes", and "product" and "driver")."""

    def dial(self, host: str, port: int) -> tuple[str, int]:
        """Where this node dials rank 0's coordinator (the double's unreachable fault)."""
        return host, port

    def listen_port(self, port: int) -> int:
        """Where rank 0 listens (the double's unreachable fault on rank 0)."""
        return port

    @abstractmethod
    def setup(self, roster: Roster, rank: int) -> None:
        """The group as it formed: every node's name and info, by rank."""

    @abstractmethod
    def start(self, generation: int, deadline: float, *, training: bool = False) -> StepReport:
        """Fresh rank processes joined in one world (a new one after a hung phase);
        `training`: with the training step's deterministic settings."""

    @abstractmethod
    def check(self, deadline: float) -> StepReport:
        """One all-reduce over the world with its sum checked: the communicator is up."""

    @abstractmethod
    def group(self, sizes: list[int], iterations: int, deadline: float) -> StepReport:
        """The group's sweep: seconds per all-reduce at each size, the slowest rank's."""

    @abstractmethod
    def pairs(
        self,
        round_number: int,
        pairs: list[tuple[int, int]],
        nbytes: int,
        iterations: int,
        deadline: float,
    ) -> StepReport:
        """One round: every pair its own communicator; this node's pair timed (if it has one)."""

    @abstractmethod
    def train(self, plan: TrainPlan, deadline: float) -> StepReport:
        """The training step data-parallel across the whole group: this node's figures."""

    @abstractmethod
    def train_pairs(
        self, round_number: int, pairs: list[tuple[int, int]], plan: TrainPlan, deadline: float
    ) -> StepReport:
        """One round of training pairs, each data-parallel over its two nodes' GPUs: this node's
        pair's figures (if it has one)."""

    @abstractmethod
    def stop_ranks(self) -> None:
        """End the current rank processes (all of them, whatever they were doing)."""

    @abstractmethod
    def nccl_lines(self) -> list[str]:
        """NCCL's output so far (for the transport)."""

    def rank_logs(self) -> list[tuple[str, list[str]]]:
        """Each rank process's output by name (for the NCCL log the result keeps as evidence)."""
        return [("ranks", self.nccl_lines())]

    @abstractmethod
    def log_tail(self) -> str | None:
        """The rank processes' last words, NCCL INFO lines kept, for a failure's record."""

    @abstractmethod
    def nccl_env(self) -> dict[str, str]:
        """Every NCCL_* variable the measurement ran with."""

    # What reads this node's GPUs' processes (gpuval_agent.watch.UseSource), for GpuInUse.
    @abstractmethod
    def gpu_use(self) -> list[GpuUse] | None:
        """This node's GPUs' compute processes and memory (NVML indices); None: unreadable."""

    def host_pid_namespace(self) -> bool:
        return shares_host_pid_namespace()

    def agent_gpu_processes(self) -> dict[int, int]:
        """The agent's processes on each GPU: its one rank process (the agent holds no context)."""
        return dict.fromkeys((use.gpu for use in self.gpu_use() or []), 1)

    def close(self) -> None:
        self.stop_ranks()
