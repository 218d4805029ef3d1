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
from typing import Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

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

    DRIVER = "driver"
    HEALTH = "health"
    MEMORY = "memory"
    BURN = "burn"
    BANDWIDTH = "bandwidth"
    NCCL = "nccl"


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
        description="Minimum in the figure's own unit (TFLOP/s or GB/s).",
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

    def minimum(self, expected: float | None) -> float | None:
        """The effective minimum for a part whose expected figure is `expected` (None: unknown)."""
        candidates: list[float] = []
        if self.absolute is not None:
            candidates.append(self.absolute)
        if self.fraction_of_expected is not None and expected is not None:
            candidates.append(self.fraction_of_expected * expected)
        return max(candidates) if candidates else None


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
    """Hardware health read from NVML: ECC, row remapping, XID events, persistence mode."""

    enabled: bool = Field(default=True, description="Run the hardware-health check.")
    max_uncorrectable_ecc: int = Field(
        default=0,
        ge=0,
        le=1_000_000,
        description="Most volatile uncorrectable ECC errors a GPU may show before it fails.",
    )
    fail_on_row_remap_pending: bool = Field(
        default=True, description="Fail a GPU with a pending row remap (it needs a reset)."
    )
    warn_persistence_off: bool = Field(
        default=True, description="Report persistence mode off as a warning."
    )


class MemoryCheck(_Model):
    """HBM test: nearly all free GPU memory written with each pattern and every word verified."""

    enabled: bool = Field(
        default=False,
        description=(
            "Run the memory test (not in the default run: it takes seconds to tens of seconds "
            "per pass; `gpuval-agent run --checks memory`)."
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


class ChecksConfig(_Model):
    """Which checks the agent runs, with their parameters and thresholds."""

    driver: DriverCheck = Field(default_factory=DriverCheck, description="Driver-layer check.")
    health: HealthCheck = Field(default_factory=HealthCheck, description="Hardware-health check.")
    memory: MemoryCheck = Field(
        default_factory=MemoryCheck, description="GPU memory (HBM) test; off by default."
    )
    burn: BurnCheck = Field(default_factory=BurnCheck, description="Verified burn.")
    bandwidth: BandwidthCheck = Field(
        default_factory=BandwidthCheck, description="Copy-bandwidth check."
    )
    nccl: NcclCheck = Field(default_factory=NcclCheck, description="NCCL all-reduce check.")

    def enabled(self) -> list[CheckName]:
        """The enabled checks in run order."""
        return [name for name in CheckName if getattr(self, name.value).enabled]

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
