"""What the driver says while the checks run: XID events (NVML) and persistence mode. ECC and row
remapping are judged by the state check (checks/state.py), by memory location."""

from __future__ import annotations

from gpuval_agent.checks.common import CheckBuilder, CheckContext
from gpuval_api import Reason
from gpuval_api.result import CheckResult


def run_health(context: CheckContext) -> CheckResult:
    builder = CheckBuilder("health", context)
    config = context.config.health
    for gpu in context.environment.gpus:
        builder.gpu_metric(gpu.index, "persistenceMode", _flag(gpu.persistence_mode))
        if builder.gpu_metrics(gpu.index) == {}:
            builder.gpu_metric(gpu.index, "checked", 1.0)
        if config.warn_persistence_off and gpu.persistence_mode is False:
            builder.add(
                Reason.PERSISTENCE_MODE_OFF,
                f"{context.unit(gpu.index)}: persistence mode is off",
                gpu=gpu.index,
            )
    context.sampler.sample_now()
    for event in context.sampler.xids:
        builder.add(
            Reason.XID_ERROR,
            f"{context.unit(event.gpu)}: XID {event.xid} reported by the driver",
            gpu=event.gpu,
        )
    return builder.finish(message="" if builder.failed else f"{context.units()} healthy")


def _flag(value: bool | None) -> float | None:
    return None if value is None else float(value)
