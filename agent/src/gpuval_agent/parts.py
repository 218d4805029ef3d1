"""Expected figures per GPU part: what a healthy part of that model reaches in each check.

A `fractionOfExpected` threshold is a fraction of these. They are achievable figures measured on
healthy machines, not datasheet peaks (datasheet bf16 on an H200 is ~990 TFLOP/s dense; a plain
cuBLAS 8192^3 matmul reaches ~800), so a default fraction of 0.8 flags a genuinely slow GPU without
failing healthy ones. The H200 figures are from shared/targets.md (2x H200 NVLink, driver
580.159.04): plain torch matmul (bf16), gpu-burn (tf32/fp32/fp64), nvbandwidth (copies) and
nccl-tests (all-reduce busbw at 4 GiB); the training step's tokens/s from its benchmark on one H200.
The H100 SXM shares the H200's compute rates (same chip); its copy and training figures are left
out because nobody measured them here.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from gpuval_api.checks import Precision
from gpuval_api.mig import MODELS, MigShare, share_of
from gpuval_api.parts import H100_SXM, H200
from gpuval_api.result import GpuInfo


@dataclass(frozen=True, slots=True)
class PartFigures:
    """Expected figures of one GPU model; a missing figure means 'no fraction threshold'."""

    product: str
    tflops: dict[Precision, float] = field(default_factory=dict)
    h2d_gbps: float | None = None
    d2h_gbps: float | None = None
    device_copy_gbps: float | None = None
    p2p_gbps: float | None = None
    nccl_busbw_gbps: float | None = None
    default_power_limit_watts: float | None = None
    # NVLinks of the SXM part (nvidia-smi nvlink -s on HGX H100/H200 boards: 18 links).
    nvlinks: int | None = None
    # The datasheet's dense bf16 tensor-core peak, TFLOP/s: what the training step's MFU is
    # counted against (a peak, not an achievable figure like `tflops`).
    dense_bf16_tflops: float | None = None
    # Training tokens per second per GPU of a healthy part, by the shape and batch measured
    # (gpuval_agent.training.TrainPlan.key, e.g. 'large/b16').
    train_tokens_per_second: dict[str, float] = field(default_factory=dict)
    # Streaming multiprocessors of the whole part (what a MIG instance's SMs are a share of).
    sms: int | None = None


# H100 SXM and H200 (the same chip): NVIDIA's datasheet, dense (no sparsity) bf16 tensor core.
HOPPER_DENSE_BF16_TFLOPS = 989.4

_HOPPER_TFLOPS = {
    Precision.BF16: 800.0,
    Precision.FP16: 800.0,
    Precision.TF32: 352.0,
    Precision.FP32: 51.1,
    Precision.FP64: 54.0,
}

PARTS: tuple[PartFigures, ...] = (
    PartFigures(
        product=H200,
        tflops=_HOPPER_TFLOPS,
        h2d_gbps=55.0,
        d2h_gbps=55.2,
        device_copy_gbps=2081.0,
        p2p_gbps=393.7,
        nccl_busbw_gbps=343.4,
        default_power_limit_watts=700.0,
        nvlinks=18,
        dense_bf16_tflops=HOPPER_DENSE_BF16_TFLOPS,
        # The training check's default shape on one H200 (benchmarks/results/h200-train-bench.json:
        # 79,042 and 78,710 tokens/s, its plain-loop reference 79,023; the full profile's 78,770).
        train_tokens_per_second={"large/b16": 79_000.0},
        sms=MODELS[H200].sms,
    ),
    PartFigures(
        product=H100_SXM,
        tflops=_HOPPER_TFLOPS,
        default_power_limit_watts=700.0,
        nvlinks=18,
        dense_bf16_tflops=HOPPER_DENSE_BF16_TFLOPS,
        sms=132,
    ),
)

UNKNOWN = PartFigures(product="")
# gpuval_api.parts.KNOWN_PRODUCTS names exactly these (tests/unit/api/test_api_baseline_files.py).


def figures_for(product: str | None) -> PartFigures:
    """The expected figures of a product name exactly as NVML spells it ('NVIDIA H200').

    Exact match on purpose: 'NVIDIA H200 NVL' is a PCIe card with other copy figures.
    """
    return next((part for part in PARTS if part.product == product), UNKNOWN)


def mig_share(part: PartFigures, gpu: GpuInfo) -> MigShare | None:
    """A MIG instance's share of its whole GPU (gpuval_api.mig.share_of); None for a whole GPU."""
    mig = gpu.mig
    if mig is None:
        return None
    return share_of(
        part.product or gpu.name,
        mig.profile,
        sms=mig.sm_count,
        parent_sms=mig.parent_sm_count or part.sms,
        memory_bytes=gpu.memory_total_bytes,
        parent_memory_bytes=mig.parent_memory_total_bytes,
    )


def expected_for(part: PartFigures, gpu: GpuInfo) -> PartFigures:
    """The figures `gpu` is expected to reach: the part's for a whole GPU; for a MIG instance its
    share of them (gpuval_api.mig.share_of): compute (the burn) by its SMs' share, device-local
    copies by its memory slices' share, and host copies by its compute share too, since every
    instance of a GPU copies over the one PCIe link at once in the bandwidth check, each with its
    own copy engines. Peer copies, NCCL and the training step do not apply to an instance: their
    figures are left out (no fraction threshold)."""
    mig, share = gpu.mig, mig_share(part, gpu)
    if mig is None or share is None:
        return part

    def scaled(value: float | None, by: float) -> float | None:
        return None if value is None else value * by

    return replace(
        part,
        tflops={p: v * share.compute for p, v in part.tflops.items()},
        h2d_gbps=scaled(part.h2d_gbps, share.compute),
        d2h_gbps=scaled(part.d2h_gbps, share.compute),
        device_copy_gbps=scaled(part.device_copy_gbps, share.memory),
        p2p_gbps=None,
        nccl_busbw_gbps=None,
        dense_bf16_tflops=scaled(part.dense_bf16_tflops, share.compute),
        train_tokens_per_second={},
        sms=mig.sm_count,
    )
