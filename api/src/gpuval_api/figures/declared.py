"""The figures gpuval measures, each declared once (docs/contracts.md, "Adding a figure")."""

from __future__ import annotations

from gpuval_api.checks import CheckName, ChecksConfig
from gpuval_api.figures.kinds import (
    FABRIC,
    Better,
    FabricPairs,
    Figure,
    GpuPairs,
    PerGpu,
    PerPrecision,
    PerSize,
    Shown,
    Unit,
)
from gpuval_api.figures.registry import declare


def _matrix(config: ChecksConfig) -> str:
    return f"matrixSize={config.burn.matrix_size}"


def _transfer(config: ChecksConfig) -> str:
    return f"transferMiB={config.bandwidth.transfer_mib}"


def _training(config: ChecksConfig) -> str:
    train = config.train
    return (
        f"model={train.model},microBatch={train.micro_batch or 'auto'},attention={train.attention}"
    )


BURN = Figure(
    id="burn",
    label="Burn throughput",
    unit=Unit.TFLOPS,
    check=CheckName.BURN,
    description="Lowest burn throughput, TFLOP/s.",
    read=PerPrecision(metric="tflops"),
    baseline="burn",
    settings=_matrix,
    history=True,
    per_gpu_metric=True,
    shown=Shown(
        page=True, trend="Burn throughput", distribution=True, per_gpu=True, column="Burn TFLOP/s"
    ),
)
H2D = Figure(
    id="h2d",
    label="Host to device",
    unit=Unit.GBPS,
    check=CheckName.BANDWIDTH,
    description="Lowest host-to-device bandwidth, GB/s.",
    read=PerGpu(),
    baseline="h2d",
    settings=_transfer,
    history=True,
    per_gpu_metric=True,
    shown=Shown(
        page=True,
        trend="Host to device / device to host bandwidth",
        legend="h2d",
        distribution=True,
        per_gpu=True,
        column="H2D GB/s",
    ),
)
D2H = Figure(
    id="d2h",
    label="Device to host",
    unit=Unit.GBPS,
    check=CheckName.BANDWIDTH,
    description="Lowest device-to-host bandwidth, GB/s.",
    read=PerGpu(),
    baseline="d2h",
    settings=_transfer,
    history=True,
    per_gpu_metric=True,
    shown=Shown(page=True, trend="Host to device / device to host bandwidth", legend="d2h"),
)
DEVICE_COPY = Figure(
    id="deviceCopy",
    label="Device-local copy",
    unit=Unit.GBPS,
    check=CheckName.BANDWIDTH,
    description="Lowest device-local copy bandwidth, GB/s.",
    read=PerGpu(),
    baseline="deviceCopy",
    settings=_transfer,
    history=True,
    per_gpu_metric=True,
    shown=Shown(page=True, trend="Device copy / peer to peer bandwidth", legend="device"),
)
P2P = Figure(
    id="p2p",
    label="GPU to GPU (peer)",
    unit=Unit.GBPS,
    check=CheckName.BANDWIDTH,
    description="Lowest GPU-to-GPU bandwidth, GB/s.",
    read=GpuPairs(),
    baseline="p2p",
    settings=_transfer,
    history=True,
    shown=Shown(page=True, trend="Device copy / peer to peer bandwidth", legend="p2p"),
)
NCCL_BUSBW = Figure(
    id="ncclBusbw",
    label="NCCL all-reduce busbw",
    unit=Unit.GBPS,
    check=CheckName.NCCL,
    description="NCCL all-reduce busbw at the largest size, GB/s.",
    read=PerSize(),
    baseline="nccl",
    history=True,
    shown=Shown(
        page=True,
        trend="NCCL all-reduce bus bandwidth",
        distribution=True,
        column="Busbw GB/s",
    ),
)
MAX_TEMPERATURE = Figure(
    id="maxTemperature",
    label="GPU temperature under burn",
    unit=Unit.CELSIUS,
    check=CheckName.BURN,
    description="Highest GPU temperature during the burn, degrees Celsius.",
    read=PerGpu(tested_only=False),
    better=Better.LOWER,
    per_gpu_metric=True,
    shown=Shown(trend="Hottest GPU temperature per node under burn", per_gpu=True),
    digits=1,
)
# The training step's figures are each GPU's: data-parallel ranks wait for the slowest GPU every
# step, and the gradients' all-reduce overlaps the backward pass (on 8 NVLinked H200s its ~10 ms
# against a 415 ms step), so a GPU's rate compares across GPU counts of one model as the burn's.
TRAIN_TOKENS = Figure(
    id="trainTokens",
    label="Training throughput per GPU",
    unit=Unit.TOKENS_PER_SECOND,
    check=CheckName.TRAIN,
    description="Lowest training step throughput of a GPU, tokens/s.",
    read=PerGpu(metric="tokensPerSecond"),
    baseline="trainTokens",
    settings=_training,
    history=True,
    per_gpu_metric=True,
    shown=Shown(page=True, trend="Training step throughput", distribution=True, per_gpu=True),
    digits=1,
    maximum=1e9,
)
TRAIN_MFU = Figure(
    id="trainMfu",
    label="Training MFU",
    unit=Unit.RATIO,
    check=CheckName.TRAIN,
    description=(
        "Lowest model FLOPs utilisation of a GPU in the training step, against the GPU model's "
        "dense bf16 peak (0 to 1)."
    ),
    read=PerGpu(metric="mfuRatio"),
    baseline="trainMfu",
    settings=_training,
    history=True,
    shown=Shown(page=True, trend="Training step model FLOPs utilisation"),
    digits=4,
    maximum=1.0,
)
FABRIC_PAIR = Figure(
    id="fabricPair",
    label="Fabric pair busbw",
    unit=Unit.GBPS,
    check=FABRIC,
    description="Lowest busbw of its fabric pairs, GB/s.",
    read=FabricPairs(),
    baseline="fabric.pair",
    summary=False,
    history=True,
)

for _figure in (
    BURN,
    H2D,
    D2H,
    DEVICE_COPY,
    P2P,
    NCCL_BUSBW,
    MAX_TEMPERATURE,
    TRAIN_TOKENS,
    TRAIN_MFU,
    FABRIC_PAIR,
):
    declare(_figure)
