"""Which checks the agent runs, with their parameters and thresholds (`GpuValidation.spec.checks`).

The same model is embedded in the GpuValidation CRD, passed to the agent pod as JSON in
`GPUVAL_CHECKS`, and built from the CLI's flags, so every field carries a description (it becomes
the CRD field's description).

A threshold is absolute (in the figure's unit) or a fraction of the part's expected figure (the
agent holds a table of expected figures per GPU model); when both are given the stricter applies,
and on a part the agent has no figure for, only the absolute threshold applies.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gpuval_api.reasons import REASONS, STATE_REASONS, Reason, Severity

# Highest threshold accepted for any figure (TFLOP/s or GB/s): far above any part, yet bounded.
MAX_FIGURE = 100_000.0

# Unit words keep their usual capitals (h2dGBps, transferMiB), as the report status spells them.
_UNIT_WORDS = {"gbps": "GBps", "mib": "MiB"}


def camel(name: str) -> str:
    """snake_case field name to its camelCase JSON alias."""
    first, *rest = name.split("_")
    return first + "".join(_UNIT_WORDS.get(word, word.capitalize()) for word in rest)


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
    )


class CheckName(StrEnum):
    """The agent's checks, in the order they run."""

    STATE = "state"
    DRIVER = "driver"
    HEALTH = "health"
    MEMORY = "memory"
    BURN = "burn"
    BANDWIDTH = "bandwidth"
    NCCL = "nccl"
    TRAIN = "train"
    DCGM = "dcgm"


class Profile(StrEnum):
    """A named set of checks: `default` is the list that fits the default wall time (the memory
    test and the training step left out); `full` adds them (docs/agent.md, "Profiles")."""

    DEFAULT = "default"
    FULL = "full"


# The checks a profile decides: their section's `enabled` has no default (unset: the profile's
# word; a section that says `enabled` itself keeps its word). No default, so that the CRD stores
# none: a stored `enabled: false` would be indistinguishable from the user's and the CR's
# profile would do nothing (issue 42).
PROFILED = (CheckName.MEMORY, CheckName.TRAIN)

# Which of PROFILED each profile runs.
PROFILE_RUNS: dict[Profile, tuple[CheckName, ...]] = {
    Profile.DEFAULT: (),
    Profile.FULL: PROFILED,
}


class TrainModel(StrEnum):
    """The training check's model: a decoder-only transformer of one of four shapes
    (docs/agent.md, "The training step"); `auto` picks by the GPUs' memory."""

    AUTO = "auto"
    LARGE = "large"  # about 1 B parameters (d_model 2048, 18 layers)
    MEDIUM = "medium"  # about 235 M (1024, 16)
    SMALL = "small"  # about 110 M (768, 12)
    TINY = "tiny"  # about 5 M (256, 4): for tests and small GPUs


class TrainAttention(StrEnum):
    """The scaled_dot_product_attention backend the training step pins (each computes the same
    function with its own rounding, so it is part of what makes losses bit-identical)."""

    FLASH = "flash"
    EFFICIENT = "efficient"
    CUDNN = "cudnn"
    MATH = "math"


class Precision(StrEnum):
    """Matrix-multiply precision of the burn (tf32 means fp32 inputs on the tensor cores)."""

    BF16 = "bf16"
    FP16 = "fp16"
    TF32 = "tf32"
    FP32 = "fp32"
    FP64 = "fp64"


class MemoryPattern(StrEnum):
    """What the memory test writes into every 64-bit word, then reads back and compares."""

    # 64 steps: every word holds 1 << b, for b = 0..63 (a bit stuck at 0 shows).
    WALKING_ONES = "walking-ones"
    # 64 steps: every word holds ~(1 << b) (a bit stuck at 1 shows).
    WALKING_ZEROS = "walking-zeros"
    # 2 steps: every word holds its own device address, then its complement (address lines).
    ADDRESS = "address"
    # 1 step per pass: counter-based pseudo-random words, regenerated on the GPU when checked.
    RANDOM = "random"


class Threshold(_Model):
    """A minimum a figure must reach: absolute, a fraction of the expected figure, or both."""

    absolute: float | None = Field(
        default=None,
        ge=0,
        le=MAX_FIGURE,
        description=(
            "Minimum in the figure's own unit (TFLOP/s or GB/s), for a whole GPU: a MIG "
            "instance is held to its share of it, as to its share of the expected figure."
        ),
    )
    fraction_of_expected: float | None = Field(
        default=None,
        gt=0,
        le=2,
        description=(
            "Minimum as a fraction of the part's expected figure (e.g. 0.8 = 80 %). "
            "Ignored on a part with no expected figure."
        ),
    )

    def minimum(self, expected: float | None, share: float = 1.0) -> float | None:
        """The effective minimum for a part whose expected figure is `expected` (None: unknown),
        of a unit that is `share` of a whole GPU (a MIG instance: `expected` is scaled already,
        the absolute figure, written for a whole GPU, is scaled here)."""
        candidates: list[float] = []
        if self.absolute is not None:
            candidates.append(self.absolute * share)
        if self.fraction_of_expected is not None and expected is not None:
            candidates.append(self.fraction_of_expected * expected)
        return max(candidates) if candidates else None


class RateThreshold(Threshold):
    """A minimum rate in tokens per second, absolute or a fraction of the part's expected rate."""

    absolute: float | None = Field(
        default=None,
        ge=0,
        le=1e9,
        description="Minimum in tokens per second per GPU.",
    )


class DriverCheck(_Model):
    """Driver layer: NVML answers, GPU count, driver CUDA version, CUDA initialises on every GPU."""

    enabled: bool = Field(default=True, description="Run the driver-layer check.")
    expected_gpus: int | None = Field(
        default=None,
        ge=0,
        le=64,
        description=(
            "GPUs the node must show. Unset: the node's advertised nvidia.com/gpu in the cluster "
            "(GPUVAL_EXPECTED_GPUS), else no count check."
        ),
    )
    min_cuda_version: str | None = Field(
        default=None,
        pattern=r"^\d+\.\d+$",
        max_length=16,
        description=(
            "Lowest CUDA version (major.minor) the driver must support, i.e. the newest "
            "CUDA runtime the workloads bring. Unset: the CUDA runtime the agent uses."
        ),
    )


class HealthCheck(_Model):
    """What the driver says while the checks run: XID events (NVML) and persistence mode. ECC and
    row remapping are the state check's."""

    enabled: bool = Field(default=True, description="Run the hardware-health check.")
    warn_persistence_off: bool = Field(
        default=True, description="Report persistence mode off as a warning."
    )


class FindingAction(StrEnum):
    """What a state finding does to the verdict."""

    FAIL = "Fail"
    WARN = "Warn"
    IGNORE = "Ignore"


class NetworkExpectations(_Model):
    """What the node's InfiniBand/RoCE ports (sysfs /sys/class/infiniband) should show."""

    devices: list[Annotated[str, Field(min_length=1, max_length=64)]] = Field(
        default_factory=list,
        max_length=64,
        description="RDMA devices to check (e.g. mlx5_0). Empty: every device the node has.",
    )
    expected_rate_gbit_per_second: float | None = Field(
        default=None,
        gt=0,
        le=10_000,
        description="Rate every checked port must run at, Gb/s (e.g. 400 for NDR). Unset: not "
        "compared.",
    )
    max_link_downed: int = Field(
        default=1,
        ge=0,
        le=1_000_000,
        description="Most times a port may have lost its link (link_downed) before it fails as "
        "IbLinkFlapping.",
    )
    max_port_errors: int = Field(
        default=0,
        ge=0,
        le=1_000_000_000,
        description="Most symbol errors, receive errors or link recoveries a port may show "
        "(each counter) before IbPortErrors.",
    )

    @field_validator("devices")
    @classmethod
    def _device_names(cls, devices: list[str]) -> list[str]:
        for name in devices:
            if not name or "/" in name or len(name) > 64:
                raise ValueError(
                    f"state.network.devices: {name!r} is not an RDMA device name; give names "
                    "as /sys/class/infiniband lists them (e.g. mlx5_0)"
                )
        return devices


class StateCheck(_Model):
    """The hardware state at rest, read before the load checks and again after each (NVML,
    sysfs, the kernel log): non-invasive, seconds. Each finding's default action is its reason's
    catalogue severity; `actions` overrides it per reason."""

    enabled: bool = Field(default=True, description="Run the state check (first).")
    host_root: str = Field(
        default="/",
        pattern=r"^/",
        max_length=256,
        description="Where the host's /sys, /proc and /dev/kmsg are seen from the agent (e.g. "
        "/host for a hostPath mount of /).",
    )
    actions: dict[Reason, FindingAction] = Field(
        default_factory=dict,
        json_schema_extra={"maxProperties": len(STATE_REASONS)},
        description="Per state reason (e.g. IbPortErrors): Fail, Warn or Ignore, overriding the "
        "reason's default from the catalogue.",
    )
    max_uncorrectable_ecc: int = Field(
        default=0,
        ge=0,
        le=1_000_000,
        description="Most volatile uncorrectable ECC errors a GPU may show (EccUncorrectable).",
    )
    max_correctable_ecc: int = Field(
        default=1000,
        ge=0,
        le=1_000_000_000,
        description="Most volatile correctable ECC errors a GPU may show (EccCorrectableHigh).",
    )
    max_retired_pages: int = Field(
        default=60,
        ge=0,
        le=100_000,
        description="Most retired memory pages (pre-Ampere GPUs) before RetiredPagesHigh.",
    )
    max_low_spare_banks: int = Field(
        default=0,
        ge=0,
        le=100_000,
        description="Most memory banks with low or no spare rows (row remapper histogram) before "
        "RowRemapSparesLow.",
    )
    ignore_xids: list[Annotated[int, Field(ge=1, le=1023)]] = Field(
        default_factory=list,
        max_length=64,
        description="XIDs in the kernel log that are never reported.",
    )
    xid_max_age_seconds: float | None = Field(
        default=None,
        gt=0,
        le=10 * 365 * 86400,
        description="Only XIDs logged within this many seconds count (e.g. since a GPU reset that "
        "cleared them). Unset: every XID since boot.",
    )
    expected_nvlinks: int | None = Field(
        default=None,
        ge=0,
        le=64,
        description="Active NVLinks each GPU must have. Unset: the GPU model's count, on GPUs "
        "that report NVLink at all.",
    )
    max_nvlink_errors: int = Field(
        default=0,
        ge=0,
        le=1_000_000_000,
        description="Most CRC, replay or recovery errors (each counter) an NVLink may show at "
        "rest before NvlinkErrors.",
    )
    max_pcie_correctable_errors: int = Field(
        default=100,
        ge=0,
        le=1_000_000_000,
        description="Most correctable PCIe AER errors a GPU or NIC may show (PcieAerCorrectable).",
    )
    min_power_limit_fraction: float = Field(
        default=0.9,
        ge=0,
        le=1,
        description="Lowest enforced power limit as a fraction of the default limit "
        "(PowerLimitBelowDefault). 0 disables.",
    )
    network: NetworkExpectations = Field(
        default_factory=NetworkExpectations, description="InfiniBand/RoCE expectations."
    )

    @field_validator("actions")
    @classmethod
    def _state_reasons_only(
        cls, actions: dict[Reason, FindingAction]
    ) -> dict[Reason, FindingAction]:
        for reason in actions:
            if reason not in STATE_REASONS:
                raise ValueError(
                    f"state.actions: {reason} is not a finding of the state check; use one of "
                    f"{', '.join(STATE_REASONS)}"
                )
        return actions

    def severity_of(self, reason: Reason) -> FindingAction:
        """The action of a finding: the configured one, else its catalogue severity's."""
        if reason in self.actions:
            return self.actions[reason]
        if REASONS[reason].severity is Severity.ERROR:
            return FindingAction.FAIL
        return FindingAction.WARN


class DcgmCheck(_Model):
    """NVIDIA DCGM diagnostics (`dcgmi diag -r LEVEL -j`) where the node has DCGM; skipped with
    DcgmNotAvailable where it has not (never a pass, never a failure)."""

    enabled: bool = Field(default=False, description="Run DCGM's diagnostic (optional).")
    level: int = Field(
        default=1,
        ge=1,
        le=4,
        description="dcgmi diag run level: 1 quick (about a minute), 2 medium, 3 long, 4 extended.",
    )
    dcgmi_path: str = Field(
        default="/usr/bin/dcgmi",
        pattern=r"^/",
        max_length=256,
        description="Where dcgmi is, as the agent sees it (e.g. a hostPath mount of the host's).",
    )
    host_engine: str = Field(
        default="127.0.0.1:5555",
        pattern=r"^[A-Za-z0-9.:\[\]-]+$",
        max_length=256,
        description="nv-hostengine's address (host:port) that dcgmi connects to.",
    )
    timeout_seconds: float = Field(
        default=1800.0,
        gt=0,
        le=86400,
        description="Most seconds the diagnostic may take; past it the check fails as "
        "DcgmDiagFailed.",
    )


class MemoryCheck(_Model):
    """HBM test: nearly all free GPU memory written with each pattern and every word verified."""

    enabled: bool | None = Field(
        default=None,
        description=(
            "Run the memory test. Unset: as the profile says (not in the default profile: it "
            "takes seconds to tens of seconds per pass; in `full`). Set, it wins over the "
            "profile (a `false` under `full` is said in the ProfileOverridden condition)."
        ),
    )
    patterns: list[MemoryPattern] = Field(
        default_factory=lambda: list(MemoryPattern),
        min_length=1,
        max_length=len(MemoryPattern),
        description=(
            "Patterns written and verified, in this order, each over the whole tested memory: "
            "walking-ones and walking-zeros (64 steps each), address (each word its own address, "
            "then its complement), random (a new seed each pass)."
        ),
    )
    passes: int = Field(
        default=1, ge=1, le=1000, description="Times the whole pattern list is run."
    )
    coverage_fraction: float = Field(
        default=0.98,
        gt=0,
        le=1,
        description=(
            "Fraction of each GPU's free memory (measured when the test starts) to test; the "
            "rest is left to the driver and to other processes."
        ),
    )
    reserve_mib: int = Field(
        default=512,
        ge=0,
        le=1 << 20,
        description="MiB of free memory left untested in any case (a margin for the driver).",
    )
    warn_below_fraction: float = Field(
        default=0.9,
        ge=0,
        le=1,
        description=(
            "Report MemoryPartlyCovered (a warning, never a failure) for a GPU where less than "
            "this fraction of its total memory could be tested, e.g. because another process "
            "held memory."
        ),
    )

    @model_validator(mode="after")
    def _patterns_once(self) -> Self:
        repeated = sorted({str(p) for p in self.patterns if self.patterns.count(p) > 1})
        if repeated:
            raise ValueError(
                f"memory.patterns names {', '.join(repeated)} more than once; name each pattern "
                "once and use memory.passes to repeat them"
            )
        return self


class BurnCheck(_Model):
    """Verified matrix-multiply burn on every GPU at once."""

    enabled: bool = Field(default=True, description="Run the burn.")
    duration_seconds: float = Field(
        default=60.0,
        gt=0,
        le=86400,
        description=(
            "Burn time per precision, in seconds, set-up included (the first also loads torch)."
        ),
    )
    precisions: list[Precision] = Field(
        default_factory=lambda: [Precision.BF16],
        min_length=1,
        max_length=len(Precision),
        description=(
            "Precisions to burn in, one after another; the first is the node's headline figure."
        ),
    )
    matrix_size: int = Field(
        default=16384,
        ge=256,
        le=32768,
        description="Square matrix size n of the n x n x n GEMM (a multiple of 256 is fastest).",
    )
    max_temperature_celsius: float = Field(
        default=90.0,
        gt=0,
        le=150,
        description="Fail when a GPU's temperature exceeds this during the burn.",
    )
    fail_on_thermal_slowdown: bool = Field(
        default=True,
        description="Fail when a GPU throttles for temperature (hardware or software slowdown).",
    )
    fail_on_power_cap_below_fraction: float = Field(
        default=0.9,
        ge=0,
        le=1,
        description=(
            "Fail as PowerCapped when the enforced power limit is below this fraction of "
            "the part's default limit and the GPU throttled for power. 0 disables."
        ),
    )
    min_tflops: Threshold = Field(
        default_factory=lambda: Threshold(fraction_of_expected=0.8),
        description="Minimum burn throughput per GPU and precision, TFLOP/s.",
    )


class BandwidthCheck(_Model):
    """Host<->device (pinned, copy engine), device-local and peer-to-peer copy bandwidth."""

    enabled: bool = Field(default=True, description="Run the bandwidth check.")
    transfer_mib: int = Field(default=1024, ge=1, le=65536, description="Size of one copy in MiB.")
    iterations: int = Field(default=10, ge=1, le=10000, description="Timed copies per measurement.")
    peer: bool = Field(default=True, description="Measure every ordered GPU pair's peer copy.")
    concurrent: bool = Field(
        default=True,
        description="Also measure host<->device on all GPUs at once (shows shared PCIe switches).",
    )
    min_h2d_gbps: Threshold = Field(
        default_factory=lambda: Threshold(fraction_of_expected=0.8),
        description="Minimum host-to-device bandwidth per GPU, GB/s.",
    )
    min_d2h_gbps: Threshold = Field(
        default_factory=lambda: Threshold(fraction_of_expected=0.8),
        description="Minimum device-to-host bandwidth per GPU, GB/s.",
    )
    min_device_copy_gbps: Threshold = Field(
        default_factory=lambda: Threshold(fraction_of_expected=0.8),
        description="Minimum device-local copy bandwidth per GPU (bytes copied), GB/s.",
    )
    min_p2p_gbps: Threshold = Field(
        default_factory=lambda: Threshold(fraction_of_expected=0.8),
        description="Minimum GPU-to-GPU copy bandwidth per ordered pair, GB/s.",
    )


class NcclCheck(_Model):
    """NCCL all-reduce between all GPUs of the node, one process per GPU, over a size sweep."""

    enabled: bool = Field(
        default=True, description="Run the NCCL all-reduce check (needs 2+ GPUs)."
    )
    min_bytes: int = Field(
        default=1 << 20,
        ge=4,
        le=1 << 36,
        description="Smallest all-reduce size in bytes (the sweep doubles up).",
    )
    max_bytes: int = Field(
        default=1 << 32, ge=4, le=1 << 36, description="Largest all-reduce size in bytes."
    )
    iterations: int = Field(default=20, ge=1, le=10000, description="Timed all-reduces per size.")
    timeout_seconds: float = Field(
        default=300.0,
        gt=0,
        le=86400,
        description="Whole check's time limit; past it the check fails as NcclTimeout (a hang).",
    )
    min_busbw_gbps: Threshold = Field(
        default_factory=lambda: Threshold(fraction_of_expected=0.8),
        description=(
            "Minimum bus bandwidth at the largest size, GB/s (the fraction of the part's figure "
            "applies from 1 GiB up; below, latency bounds a healthy node's figure)."
        ),
    )

    @model_validator(mode="after")
    def _sizes_ordered(self) -> Self:
        if self.min_bytes > self.max_bytes:
            raise ValueError(
                f"nccl.minBytes ({self.min_bytes}) is larger than nccl.maxBytes "
                f"({self.max_bytes}); set minBytes <= maxBytes"
            )
        return self


class TrainCheck(_Model):
    """A training step of a small decoder-only transformer (bf16, seeded synthetic tokens,
    data-parallel over the node's GPUs, deterministic settings): its speed, and its loss at every
    step, which the operator compares across the run's nodes (docs/agent.md, "The training
    step")."""

    enabled: bool | None = Field(
        default=None,
        description=(
            "Run the training step. Unset: as the profile says (not in the default profile; in "
            "`full`). Set, it wins over the profile (a `false` under `full` is said in the "
            "ProfileOverridden condition)."
        ),
    )
    model: TrainModel = Field(
        default=TrainModel.AUTO,
        description="Model shape: auto (by the GPUs' memory: large from 60 GiB, medium from 30, "
        "small from 12, else tiny), or one of large, medium, small, tiny.",
    )
    micro_batch: int | None = Field(
        default=None,
        ge=1,
        le=1024,
        description="Sequences per GPU and step. Unset: by the model and the GPUs' memory "
        "(large: 16 from 100 GiB, else 8).",
    )
    steps: int = Field(
        default=60,
        ge=1,
        le=100_000,
        description="Timed steps after the warm-up: a fixed count, so that every node of a run "
        "trains the same steps and its losses compare (60: 25 s on an H200 with the large model, "
        "27 s with the warm-up, 36 s with the start-up).",
    )
    warmup_steps: int = Field(
        default=5,
        ge=0,
        le=10_000,
        description="Untimed steps first (kernel selection, allocation); their losses are part "
        "of the fingerprint too.",
    )
    seed: int = Field(
        default=1234,
        ge=0,
        le=2**31 - 1,
        description="Seed of the weights and of the synthetic tokens.",
    )
    attention: TrainAttention = Field(
        default=TrainAttention.FLASH,
        description="scaled_dot_product_attention backend, pinned. flash: bit-identical losses "
        "with torch's deterministic algorithms and the fastest on an H200 (efficient: also "
        "bit-identical, 13 % slower; math: 3.3x slower; cudnn: refused under determinism).",
    )
    timeout_seconds: float = Field(
        default=900.0,
        gt=0,
        le=86400,
        description="Whole check's time limit (start-up included); past it the check fails as "
        "CheckError.",
    )
    min_tokens_per_second: RateThreshold = Field(
        default_factory=lambda: RateThreshold(fraction_of_expected=0.8),
        description="Minimum training throughput per GPU, tokens/s (LowTrainingThroughput). The "
        "expected figure applies to the shape it was measured with (large, 16 sequences, on an "
        "H200).",
    )
    loss_tolerance: float = Field(
        default=0.02,
        gt=0,
        le=1,
        description="Across GPU stacks (GPU model, driver, CUDA, torch, NCCL, attention backend), "
        "where bit-identical losses cannot be expected: the largest relative difference of a "
        "step's loss from the reference stack's before TrainingMismatch.",
    )


class ChecksConfig(_Model):
    """Which checks the agent runs, with their parameters and thresholds."""

    profile: Profile = Field(
        default=Profile.DEFAULT,
        description="default: the default check list; full: also the memory test and the "
        "training step. A section's own `enabled`, where given, wins over the profile.",
    )

    state: StateCheck = Field(
        default_factory=StateCheck, description="Hardware state at rest (runs first)."
    )
    driver: DriverCheck = Field(default_factory=DriverCheck, description="Driver-layer check.")
    health: HealthCheck = Field(default_factory=HealthCheck, description="Hardware-health check.")
    memory: MemoryCheck = Field(
        default_factory=MemoryCheck, description="GPU memory (HBM) test; in the full profile."
    )
    burn: BurnCheck = Field(default_factory=BurnCheck, description="Verified burn.")
    bandwidth: BandwidthCheck = Field(
        default_factory=BandwidthCheck, description="Copy-bandwidth check."
    )
    nccl: NcclCheck = Field(default_factory=NcclCheck, description="NCCL all-reduce check.")
    train: TrainCheck = Field(
        default_factory=TrainCheck, description="Training step; in the full profile."
    )
    dcgm: DcgmCheck = Field(default_factory=DcgmCheck, description="DCGM diagnostics (optional).")

    def runs(self, name: CheckName) -> bool:
        """Whether check `name` runs: its section's `enabled` where set, else the profile's word.
        The one place a profile is resolved (the CLI, the operator and the agent all ask here)."""
        said: bool | None = getattr(self, name.value).enabled
        return said if said is not None else name in PROFILE_RUNS[self.profile]

    def enabled(self) -> list[CheckName]:
        """The enabled checks in run order."""
        return [name for name in CheckName if self.runs(name)]

    def overridden(self) -> list[CheckName]:
        """The checks the profile runs that their section's `enabled: false` keeps off."""
        return [n for n in PROFILE_RUNS[self.profile] if getattr(self, n.value).enabled is False]

    def resolved(self) -> ChecksConfig:
        """A copy whose every section says `enabled` (the profile's word written out): what the
        operator hands the agent pod, so that what the agent was told to run reads plainly."""
        update = {
            name.value: getattr(self, name.value).model_copy(update={"enabled": self.runs(name)})
            for name in PROFILED
        }
        return self.model_copy(update=update)

    def only(self, names: list[CheckName]) -> ChecksConfig:
        """A copy with exactly `names` enabled (the CLI's --checks)."""
        update = {
            name.value: getattr(self, name.value).model_copy(update={"enabled": name in names})
            for name in CheckName
        }
        return self.model_copy(update=update)

    def configured_seconds(self) -> float:
        """The sum of the configured burn durations (the suite's wall-time budget)."""
        return self.burn.duration_seconds * len(self.burn.precisions) if self.burn.enabled else 0.0


def parse_checks(text: str) -> ChecksConfig:
    """Parse ChecksConfig JSON (camelCase, as in GPUVAL_CHECKS).

    Raises pydantic.ValidationError, which names the offending field and value.
    """
    return ChecksConfig.model_validate_json(text)
