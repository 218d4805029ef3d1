"""The simulated backend's configuration (GPUVAL_SIMULATE / --simulate): the GPUs it pretends to
have and the faults it plays (docs/contracts.md, "Simulated backend"). A TEST DOUBLE's settings,
read by the per-node double (backends/simulated/backend.py) and the fabric's (fabric/simulated.py).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gpuval_agent.errors import AgentError
from gpuval_api import AgentEnv
from gpuval_api.checks import CheckName, MemoryPattern, camel
from gpuval_api.fabric import FABRIC_SUBCOMMAND
from gpuval_api.mig import COMPUTE_SLICES, compute_slices_of
from gpuval_api.parts import H200


class FaultKind(StrEnum):
    MISCOMPARE = "miscompare"
    NAN = "nan"
    OVERHEAT = "overheat"
    THERMAL_SLOWDOWN = "thermal-slowdown"
    POWER_CAPPED = "power-capped"
    PCIE_DEGRADED = "pcie-degraded"
    PCIE_REPLAYS = "pcie-replays"  # the GPU's PCIe replay counter reads `count` (no finding)
    MISSING_GPU = "missing-gpu"
    SLOW_NCCL = "slow-nccl"
    ECC_UNCORRECTABLE = "ecc-uncorrectable"
    ROW_REMAP_PENDING = "row-remap-pending"
    XID = "xid"
    LOW_BANDWIDTH = "low-bandwidth"
    HANG = "hang"
    NO_DRIVER = "no-driver"
    CUDA_INVISIBLE = "cuda-invisible"  # NVML sees the GPU, CUDA does not (CUDA_VISIBLE_DEVICES)
    WRONG_REFERENCE = "wrong-reference"  # the GPU computes the same wrong answer every time
    # Another process on the GPU: computing (3 GiB, its load halves the agent's figures), or
    # holding most of its memory (135 GiB: the agent's allocations run out of memory). There
    # from the start, or appearing as the load check named by `during` starts.
    FOREIGN_COMPUTE = "foreign-compute"
    FOREIGN_MEMORY = "foreign-memory"
    # The hardware state (the state check): an NVLink down at rest, NVLink CRC errors that grow
    # while the burn runs, an InfiniBand port down, one that went down `count` times (3), symbol
    # errors that grow during the burn, an XID in the kernel log since boot.
    NVLINK_DOWN = "nvlink-down"
    NVLINK_ERRORS_GROW = "nvlink-errors-grow"
    IB_PORT_DOWN = "ib-port-down"
    IB_LINK_FLAPPING = "ib-link-flapping"
    IB_ERRORS_GROW = "ib-errors-grow"
    KERNEL_XID = "kernel-xid"
    # Every figure of the GPU at `factor` (0.85) of a healthy one, nothing else wrong: what only
    # a baseline (or the node's history) sees; one per GPU slows a whole node (a regression).
    SLOW_GPU = "slow-gpu"
    # The memory test: one bit flips between a pattern's write and its read-back; another
    # process takes part of the GPU's memory while the test allocates (allocations refused).
    MEMORY_FLIP = "memory-flip"
    MEMORY_HELD = "memory-held"
    # The training step: the node trains at `factor` (0.7) of a healthy one's tokens/s (its
    # data-parallel ranks wait for the slow GPU); the GPU's losses leave the healthy ones' from
    # the 1-based `step` (10) on, by a part in a thousand, so the node passes on its own and only
    # a comparison across nodes can tell.
    TRAIN_SLOW = "train-slow"
    TRAIN_WRONG_LOSS = "train-wrong-loss"
    # The fabric (`gpuval-agent fabric`): the node's network is slow; its link to `peer` is
    # slow; the network path between its topology domain (`fabricDomain`) and the domain `peer`
    # is slow (every other domain's without a peer: a slow uplink); it cannot reach rank 0 (a
    # blocked port: it dials a closed one); its collectives hang; its NCCL falls back to TCP
    # sockets (with NCCL_NET=IB it fails at init instead). fabric-train-slow: in the fabric's
    # training phase the node's GPUs train at `factor` (0.7) of a healthy node's rate, its network
    # and its own train check unharmed (train-slow slows both the train check and the fabric's
    # training; train-wrong-loss makes the losses of every fabric training run it is in differ).
    FABRIC_SLOW_NODE = "fabric-slow-node"
    FABRIC_SLOW_LINK = "fabric-slow-link"
    FABRIC_SLOW_PATH = "fabric-slow-path"
    FABRIC_UNREACHABLE = "fabric-unreachable"
    FABRIC_HANG = "fabric-hang"
    FABRIC_SOCKET_FALLBACK = "fabric-socket-fallback"
    FABRIC_TRAIN_SLOW = "fabric-train-slow"


class LoadCheck(StrEnum):
    """The loads a foreign process may appear in (`Fault.during`)."""

    MEMORY = CheckName.MEMORY.value
    BURN = CheckName.BURN.value
    BANDWIDTH = CheckName.BANDWIDTH.value
    NCCL = CheckName.NCCL.value
    TRAIN = CheckName.TRAIN.value
    FABRIC = FABRIC_SUBCOMMAND


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=camel, populate_by_name=True, extra="forbid")


class Fault(_Model):
    kind: FaultKind
    gpu: int = Field(default=0, ge=0, description="The GPU the fault hits.")
    iteration: int | None = Field(
        default=None,
        ge=0,
        description="miscompare/nan: the burn iteration corrupted (default: middle).",
    )
    xid: int = Field(default=79, description="xid, kernel-xid: the XID number reported.")
    link: int | None = Field(
        default=None, ge=0, lt=64, description="nvlink-down/-errors-grow: the NVLink (0)."
    )
    count: int | None = Field(
        default=None,
        ge=1,
        description="ib-link-flapping: times the port went down (3); pcie-replays: the "
        "replays the GPU counted (1000).",
    )
    peer: str | None = Field(
        default=None,
        min_length=1,
        description="fabric-slow-link: the other node's name; fabric-slow-path: the other "
        "topology domain (unset: every other domain).",
    )
    during: LoadCheck | None = Field(
        default=None,
        description="foreign-compute/-memory: appears as this load starts (default: from the "
        "start, before the agent's first CUDA context).",
    )
    pid: int | None = Field(
        default=None,
        ge=1,
        description="foreign-compute/-memory: its PID as NVML reports it (default: 5000000 + "
        "gpu, a PID no real process has).",
    )
    after_seconds: float = Field(
        default=0,
        ge=0,
        le=3600,
        description="foreign-compute/-memory with `during`: appears this many seconds (real "
        "time, not scaled) after the load starts (default: as it starts).",
    )
    for_seconds: float | None = Field(
        default=None,
        gt=0,
        le=3600,
        description="foreign-compute/-memory with `during`: leaves after this many seconds (real "
        "time): a brief context between two readings a second apart (default: stays).",
    )
    factor: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description=(
            "slow-gpu, fabric-slow-node/-link/-path, train-slow, fabric-train-slow: the fraction "
            "of the healthy figure (0.85 / 0.85 / 0.6 / 0.7 / 0.7 / 0.7); "
            "memory-held: the fraction of the GPU's memory the other process takes (0.5)."
        ),
    )
    offset: int | None = Field(
        default=None,
        ge=0,
        description="memory-flip: byte offset into the tested memory (default: its middle).",
    )
    bit: int = Field(default=0, ge=0, le=63, description="memory-flip: the bit flipped.")
    pattern: MemoryPattern = Field(
        default=MemoryPattern.RANDOM, description="memory-flip: the pattern it flips during."
    )
    step: int | None = Field(
        default=None,
        ge=0,
        le=100_000,
        description="memory-flip: the pattern's step, 0-63 (walking: the bit; default 0); "
        "train-wrong-loss: the 1-based training step from which the losses differ (10).",
    )

    @model_validator(mode="after")
    def _link_names_its_peer(self) -> Fault:
        if self.kind is FaultKind.FABRIC_SLOW_LINK and self.peer is None:
            raise ValueError("a fabric-slow-link fault names its other node in 'peer'")
        if self.kind is FaultKind.MEMORY_FLIP and self.step is not None and self.step > 63:
            raise ValueError(f"a memory-flip fault's step is 0-63 (the pattern's), not {self.step}")
        if self.kind is FaultKind.TRAIN_WRONG_LOSS and self.step == 0:
            raise ValueError("a train-wrong-loss fault's step is 1-based: give 1 or more")
        return self


class MigGpu(_Model):
    """One GPU of the double with MIG mode on, and the MIG devices made on it."""

    gpu: int = Field(ge=0, description="The physical GPU (its index).")
    profiles: list[str] = Field(
        min_length=1,
        max_length=COMPUTE_SLICES,
        description="Its MIG devices' profiles, e.g. ['1g.18gb'] * 7 or ['7g.141gb'].",
    )
    uuids: list[str] | None = Field(
        default=None,
        description="Their UUIDs, in the same order (default MIG-sim-<node>-<gpu>-<k>).",
    )

    @model_validator(mode="after")
    def _fits(self) -> MigGpu:
        slices = [compute_slices_of(p) for p in self.profiles]
        if None in slices:
            bad = next(p for p, n in zip(self.profiles, slices, strict=True) if n is None)
            raise ValueError(f"MIG profile {bad!r} is not <slices>g.<memory>gb, e.g. 1g.18gb")
        if sum(n or 0 for n in slices) > COMPUTE_SLICES:
            raise ValueError(
                f"the MIG devices {self.profiles} of GPU {self.gpu} take more than its "
                f"{COMPUTE_SLICES} compute slices"
            )
        if self.uuids is not None and len(self.uuids) != len(self.profiles):
            raise ValueError(f"GPU {self.gpu}: one UUID per MIG device, got {len(self.uuids)}")
        return self


class SimulationConfig(_Model):
    gpus: int = Field(default=8, ge=0, le=64)
    product: str = H200
    driver: str = "580.159.04"
    cuda: str = "13.0"
    cuda_runtime: str | None = None
    nccl: str = "2.28.9"
    faults: list[Fault] = Field(default_factory=list)
    time_scale: float = Field(default=0.01, ge=0, le=10)
    fabric_domain: str | None = Field(
        default=None,
        description="The node's topology domain (its value of spec.fabric.topologyKey), which "
        "the fabric-slow-path fault reads; the double's peers learn it from the node's hello.",
    )
    gpu_set: int = Field(
        default=0,
        ge=0,
        le=999,
        description="Which GPUs the node holds: another number is its GPUs replaced (other "
        "UUIDs and serials), as after a repair.",
    )
    uuids: list[str] | None = Field(
        default=None,
        description="The GPUs' UUIDs by index (default GPU-sim-<node>-<index>): what a test "
        "publishes in the node's ResourceSlices gives the double the same.",
    )
    mig: list[MigGpu] = Field(
        default_factory=list,
        description="GPUs with MIG mode on and their MIG devices; the double then tests each "
        "MIG device as a unit, as the agent does on a real MIG node.",
    )
    host_pid: bool = Field(
        default=True,
        description="Whether NVML's PIDs are the agent's own namespace's (bare metal, hostPID); "
        "false: a pod without hostPID, where the agent's own processes show under other PIDs.",
    )

    @model_validator(mode="after")
    def _devices_exist(self) -> SimulationConfig:
        if self.uuids is not None and len(self.uuids) != self.gpus:
            raise ValueError(f"uuids names {len(self.uuids)} GPUs, the node has {self.gpus}")
        for entry in self.mig:
            if entry.gpu >= self.gpus:
                raise ValueError(f"mig names GPU {entry.gpu}, the node has {self.gpus}")
        return self

    @classmethod
    def parse(cls, text: str) -> Self:
        try:
            return cls.model_validate_json(text or "{}")
        except ValidationError as error:
            raise AgentError(
                f"the simulation config (--simulate or {AgentEnv.SIMULATE}) is invalid: "
                f"{_first_error(error)}; see docs/contracts.md, 'Simulated backend'"
            ) from None


def _first_error(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "(document)"
    return f"{where}: {first['msg']} (got {first.get('input')!r})"
