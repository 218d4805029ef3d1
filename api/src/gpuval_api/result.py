"""The agent's result document: environment record, every check's result, overall verdict.

One JSON document (camelCase) per agent run; `gpuval-agent run --json` writes it and the
in-cluster agent puts it into its GpuNodeReport's `status.result`. Its JSON Schema is checked in
under api/schemas/.

Figures carry their unit in the key: `...Tflops` (TFLOP/s), `...GBps` (10^9 bytes/s),
`...Celsius`, `...Watts`, `...Mhz`, `...Seconds`, `...Bytes`, `...PerSecond` (a count per second,
e.g. `tokensPerSecond`), `...Ratio` (0-1); a bare count has no unit (`modelParameters`).
"""

from __future__ import annotations

import json
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gpuval_api.baselinecomparison import BaselineComparison
from gpuval_api.checks import ChecksConfig, camel
from gpuval_api.figures import TRAIN_MFU, TRAIN_TOKENS
from gpuval_api.jsonschema import ExplicitDefaults
from gpuval_api.lenient import read_model
from gpuval_api.reasons import Reason, Severity
from gpuval_api.training.record import TrainingRecord
from gpuval_api.verdicts import Verdict

__all__ = ["AgentResult", "CheckResult", "Verdict"]  # Verdict: results and nodes share it

SCHEMA_VERSION: Literal["gpuval.dev/v1alpha1/result"] = "gpuval.dev/v1alpha1/result"


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=camel, populate_by_name=True, extra="forbid")


class Metric:
    """Metric keys of a check's result that are no figure of the registry (a figure's key is its
    `gpuval_api.figures` entry's `metric`)."""

    # The state check's, for the whole node (the operator's state series read them): NVLinks
    # down (below the count each GPU should have), InfiniBand/RoCE ports not up, and per load
    # check `countersGrown.<check>`, the error counters that grew while it ran.
    NVLINKS_DOWN = "nvlinksDown"
    IB_PORTS_DOWN = "ibPortsDown"
    COUNTERS_GROWN = "countersGrown"


class TrainMetric:
    """The training check's figures: the node's in the check's `metrics`, each GPU's in its
    `gpus[].metrics` (docs/agent.md, "The training step")."""

    # The registry's figures' keys (gpuval_api.figures: TRAIN_TOKENS, TRAIN_MFU), which the node's
    # figures share. Tokens/s: node, every GPU's tokens; per GPU, its own.
    TOKENS_PER_SECOND = TRAIN_TOKENS.metric
    # Model FLOPs utilisation against the part's dense bf16 peak (node: mean).
    MFU = TRAIN_MFU.metric
    MODEL_TFLOPS = "modelTflops"  # model TFLOP/s achieved (node: sum; per GPU: its own)
    PEAK_TFLOPS = "peakTflops"  # node: the part's dense bf16 peak MFU is counted against
    STEP_MEDIAN = "stepMedianSeconds"  # node: the slowest GPU's time of each step, median
    STEP_P99 = "stepP99Seconds"  # and its 99th percentile (per GPU: its own)
    PEAK_MEMORY = "peakMemoryBytes"  # allocated by torch at its peak (node: the largest GPU's)
    PARAMETERS = "modelParameters"  # node
    FLOPS_PER_TOKEN = "flopsPerToken"  # node: 6 N + 12 L d S, the count MFU uses
    TOKENS_PER_STEP = "tokensPerStep"  # node: every GPU's sequences x the sequence length
    STEPS = "steps"  # node: timed steps
    WARMUP_STEPS = "warmupSteps"  # node: untimed steps before them
    LOSS_FIRST = "lossFirst"  # node: the mean loss of the first step
    LOSS_LAST = "lossLast"  # and of the last


class PcieLink(_Model):
    """PCIe link generation and width; None where NVML does not report it."""

    current_gen: int | None = None
    max_gen: int | None = None
    current_width: int | None = None
    max_width: int | None = None


class MigInstance(_Model):
    """A MIG device the agent tested as one unit: its profile and its parent GPU. The unit's
    `uuid` is the MIG device's; its other fields (ECC, PCIe, power...) are its parent's."""

    profile: str = Field(description="The MIG profile, e.g. 1g.18gb.")
    parent_index: int = Field(description="NVML index of the parent GPU.")
    parent_uuid: str | None = None
    sm_count: int | None = Field(default=None, description="Its streaming multiprocessors.")
    parent_sm_count: int | None = Field(
        default=None, description="The parent GPU's streaming multiprocessors when whole."
    )
    parent_memory_total_bytes: int | None = None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None


class GpuInfo(_Model):
    """One GPU's inventory and state; an unsupported query is None and named in `unsupported`.
    On a node with MIG mode on, one per MIG device given to the agent (`mig`)."""

    index: int
    name: str | None = None
    uuid: str | None = None
    serial: str | None = None
    vbios: str | None = None
    pci_bus_id: str | None = None
    memory_total_bytes: int | None = None
    pcie: PcieLink = Field(default_factory=PcieLink)
    ecc_enabled: bool | None = None
    ecc_uncorrectable_volatile: int | None = None
    ecc_uncorrectable_aggregate: int | None = None
    remapped_rows_correctable: int | None = None
    remapped_rows_uncorrectable: int | None = None
    remapped_rows_pending: bool | None = None
    remapped_rows_failed: bool | None = None
    persistence_mode: bool | None = None
    mig_mode: bool | None = None
    power_limit_watts: float | None = None
    default_power_limit_watts: float | None = None
    max_sm_clock_mhz: int | None = None
    max_memory_clock_mhz: int | None = None
    temperature_celsius: float | None = None
    slowdown_temperature_celsius: float | None = None
    shutdown_temperature_celsius: float | None = None
    max_operating_temperature_celsius: float | None = None
    throttle_reasons: list[str] = Field(default_factory=list)
    mig: MigInstance | None = Field(
        default=None, description="This unit is a MIG device (None: a whole GPU)."
    )
    unsupported: list[str] = Field(
        default_factory=list, description="Queries this GPU/driver does not support."
    )


class Environment(_Model):
    """The node's software and hardware record, compared across a pool for uniformity."""

    hostname: str | None = None
    kernel: str | None = None
    driver_version: str | None = None
    cuda_driver_version: str | None = Field(
        default=None, description="Highest CUDA version the driver supports (major.minor)."
    )
    cuda_runtime_version: str | None = Field(
        default=None, description="CUDA runtime the agent uses (torch's CUDA)."
    )
    torch_version: str | None = None
    nccl_version: str | None = None
    nvml_version: str | None = None
    gpu_count: int = 0
    gpus: list[GpuInfo] = Field(default_factory=list)
    unsupported: list[str] = Field(default_factory=list)


class Finding(_Model):
    """One named cause found by a check: an error fails the check, a warning does not."""

    reason: Reason
    severity: Severity = Severity.ERROR
    gpu: int | None = Field(
        default=None, description="GPU index, when the finding is about one GPU."
    )
    peer: int | None = Field(default=None, description="Second GPU of a pair (peer bandwidth).")
    message: str
    hint: str


class GpuCheckResult(_Model):
    """One GPU's part of a check."""

    index: int
    uuid: str | None = None
    verdict: Verdict
    reason: Reason | None = None
    metrics: dict[str, float] = Field(default_factory=dict)


class PairResult(_Model):
    """A peer copy from one GPU to another."""

    src: int
    dst: int
    gbps: float | None = Field(
        default=None, description="GB/s; None when peer access is unavailable."
    )
    peer_access: bool = True


class NcclSize(_Model):
    """One size of the NCCL all-reduce sweep (nccl-tests' definitions)."""

    bytes: int
    time_seconds: float
    algbw_gbps: float
    busbw_gbps: float = Field(description="algbw * 2(n-1)/n.")


class BurnFingerprint(_Model):
    """A digest of one GPU's burn reference result. The burn verifies every iteration against the
    reference, so a GPU that computes the same wrong answer every time passes on its own; across
    nodes, equal determinants must give equal fingerprints, and the operator compares them."""

    precision: str
    gpu: int
    value: str = Field(description="Hex digest of the reference result's bits.")
    determinants: str = Field(
        description="What fixes the result besides the inputs: GPU model and SM count, matrix "
        "size, precision, framework and BLAS versions ('|'-separated)."
    )


class InUseWhen(StrEnum):
    """When a check found another process on a GPU."""

    BEFORE = "before"  # before the check loaded the GPU: the check left the GPU out
    DURING = "during"  # while the check ran: its figures for the GPU are set aside


class GpuOccupant(_Model):
    """A process other than the agent's on a GPU around a load check (reason GpuInUse)."""

    gpu: int
    when: InUseWhen
    pid: int | None = Field(
        default=None,
        description="The PID as NVML reports it: the host's, which is the agent's own only when "
        "the agent shares the host's PID namespace (bare metal, a pod with hostPID). None when "
        "the GPU was busy but NVML listed no process to the agent (another PID namespace).",
    )
    name: str | None = Field(
        default=None,
        description="Its command line or executable, where the agent can see it (same PID "
        "namespace only: elsewhere a PID names some other process of the agent's namespace).",
    )
    used_memory_bytes: int | None = Field(
        default=None, description="GPU memory it holds, as NVML reports it."
    )
    sm_percent: int | None = Field(
        default=None, description="Its recent share of the GPU's SMs (NVML process utilization)."
    )
    exact: bool = Field(
        default=True,
        description="Whether this process is known not to be the agent's. False: NVML listed "
        "more compute processes than the agent runs on the GPU, and without a shared PID "
        "namespace the agent cannot tell which ones are its own; every candidate is listed.",
    )


# A check's elapsed time as results before 0.1.0's names were unified call it; read through 0.1.x
# (agents and kept results of a development build), never written.
OLD_ELAPSED_KEY = "durationSeconds"


class CheckResult(_Model):
    name: str
    verdict: Verdict
    reason: Reason | None = Field(default=None, description="The first error finding's reason.")
    hint: str | None = None
    message: str = ""
    started_at: datetime | None = None
    elapsed_seconds: float = Field(default=0.0, description="How long the check took, in seconds.")
    metrics: dict[str, float] = Field(default_factory=dict)
    gpus: list[GpuCheckResult] = Field(default_factory=list)
    pairs: list[PairResult] = Field(default_factory=list)
    nccl_sizes: list[NcclSize] = Field(default_factory=list)
    fingerprints: list[BurnFingerprint] = Field(default_factory=list)
    training: TrainingRecord | None = Field(
        default=None,
        description="The training check's loss at every step and what fixes it (compared across "
        "the run's nodes by the operator).",
    )
    occupants: list[GpuOccupant] = Field(
        default_factory=list,
        description="Processes other than the agent's found on a GPU before or during this "
        "check (reason GpuInUse): those GPUs were not tested by it.",
    )
    findings: list[Finding] = Field(default_factory=list)
    not_read: list[str] = Field(
        default_factory=list,
        description="What the check could not read or the node does not have, each with why "
        "(e.g. 'InfiniBand: no devices under /sys/class/infiniband').",
    )
    log_tail: str | None = Field(
        default=None,
        description="Kept diagnostic output (e.g. NCCL_DEBUG=INFO of a hang), truncated.",
    )

    @model_validator(mode="before")
    @classmethod
    def _elapsed_was_duration(cls, data: Any) -> Any:
        """`durationSeconds` (OLD_ELAPSED_KEY) read as `elapsedSeconds`: the name is the burn's
        configured duration's alone now."""
        if isinstance(data, dict) and OLD_ELAPSED_KEY in data:
            data = dict(data)
            old = data.pop(OLD_ELAPSED_KEY)
            data.setdefault("elapsedSeconds", old)
        return data


def untested_gpus(check: CheckResult) -> set[int]:
    """The GPUs a check did not test (GpuInUse: another process used them): their figures stay
    in the result, and are no evidence for a summary, a median or a baseline."""
    return {g.index for g in check.gpus if g.verdict is Verdict.NOT_RUN}


class AgentResult(_Model):
    schema_version: Literal["gpuval.dev/v1alpha1/result"] = "gpuval.dev/v1alpha1/result"
    agent_version: str
    backend: str = Field(
        description="Which GPU backend measured: 'cuda' or 'simulated' (a test double)."
    )
    node: str | None = None
    started_at: datetime
    completed_at: datetime
    verdict: Verdict
    reason: Reason | None = None
    message: str = ""
    startup_seconds: float | None = Field(
        default=None, description="Process start to the first check running, in seconds."
    )
    checks_config: ChecksConfig
    environment: Environment
    checks: list[CheckResult] = Field(default_factory=list)
    baseline: BaselineComparison | None = Field(
        default=None,
        description=(
            "The figures against the baseline of this GPU stack (gpuval-agent run --baseline, "
            "the shipped ones by default); BelowBaseline findings are in the measuring checks."
        ),
    )

    def check(self, name: str) -> CheckResult | None:
        """The result of the check called `name`, if it ran."""
        return next((c for c in self.checks if c.name == name), None)

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True, indent=2)

    def to_jsonable(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)


def parse_result(document: object) -> AgentResult | None:
    """A result document as a report carries it (`status.result`), or None when absent or of a
    shape this version cannot read; fields a newer agent added are dropped."""
    if not isinstance(document, dict):
        return None
    try:
        return read_model(AgentResult, document)
    except ValidationError:
        return None


def json_schema() -> dict[str, Any]:
    """The AgentResult JSON Schema (serialisation form), as checked in under api/schemas/."""
    schema = AgentResult.model_json_schema(by_alias=True, mode="serialization")
    schema["$id"] = "https://gpuval.dev/schemas/v1alpha1/result.json"
    return schema


def json_schema_text() -> str:
    return json.dumps(json_schema(), indent=2, sort_keys=True) + "\n"


def checks_json_schema() -> dict[str, Any]:
    """The ChecksConfig JSON Schema (validation form), as checked in under api/schemas/."""
    schema = ChecksConfig.model_json_schema(
        by_alias=True, mode="validation", schema_generator=ExplicitDefaults
    )
    schema["$id"] = "https://gpuval.dev/schemas/v1alpha1/checks.json"
    return schema


def checks_json_schema_text() -> str:
    return json.dumps(checks_json_schema(), indent=2, sort_keys=True) + "\n"


SCHEMA_FILES = {
    "result.schema.json": json_schema_text,
    "checks.schema.json": checks_json_schema_text,
}


def write_schemas(directory: str) -> list[str]:
    """Regenerate the checked-in schemas (`python -m gpuval_api.result api/schemas`)."""
    written = []
    for name, render in SCHEMA_FILES.items():
        path = Path(directory) / name
        path.write_text(render())
        written.append(str(path))
    return written


if __name__ == "__main__":
    import sys

    for written_path in write_schemas(sys.argv[1] if len(sys.argv) > 1 else "api/schemas"):
        print(written_path)
