"""Hardware health from NVML: uncorrectable ECC, row remapping, XID events, persistence mode."""

from __future__ import annotations

from gpuval_agent.checks.common import CheckBuilder, CheckContext
from gpuval_api.reasons import Reason, Severity
from gpuval_api.result import CheckResult


def run_health(context: CheckContext) -> CheckResult:
    builder = CheckBuilder("health", context)
    config = context.config.health
    for gpu in context.environment.gpus:
        builder.gpu_metric(gpu.index, "eccUncorrectableVolatile", gpu.ecc_uncorrectable_volatile)
        builder.gpu_metric(gpu.index, "remappedRowsUncorrectable", gpu.remapped_rows_uncorrectable)
        if builder.gpu_metrics(gpu.index) == {}:
            builder.gpu_metric(gpu.index, "checked", 1.0)
        volatile = gpu.ecc_uncorrectable_volatile
        if volatile is not None and volatile > config.max_uncorrectable_ecc:
            builder.add(
                Reason.ECC_UNCORRECTABLE,
                f"GPU {gpu.index}: {volatile} uncorrectable ECC errors since the last reset "
                f"(health.maxUncorrectableEcc is {config.max_uncorrectable_ecc})",
                gpu=gpu.index,
            )
        if gpu.remapped_rows_pending:
            builder.add(
                Reason.ROW_REMAP_PENDING,
                f"GPU {gpu.index}: a row remap is pending until the GPU is reset",
                gpu=gpu.index,
                severity=None if config.fail_on_row_remap_pending else Severity.WARNING,
            )
        if gpu.remapped_rows_failed:
            builder.add(
                Reason.ROW_REMAP_FAILED,
                f"GPU {gpu.index}: a row remap failed; the GPU has run out of spare rows",
                gpu=gpu.index,
            )
        if config.warn_persistence_off and gpu.persistence_mode is False:
            builder.add(
                Reason.PERSISTENCE_MODE_OFF,
                f"GPU {gpu.index}: persistence mode is off",
                gpu=gpu.index,
            )
    context.sampler.sample_now()
    for event in context.sampler.xids:
        builder.add(
            Reason.XID_ERROR,
            f"GPU {event.gpu}: XID {event.xid} reported by the driver",
            gpu=event.gpu,
        )
    count = len(context.environment.gpus)
    return builder.finish(message="" if builder.failed else f"{count} GPUs healthy")
