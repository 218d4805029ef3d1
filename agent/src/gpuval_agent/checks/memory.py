"""Memory test: nearly all free memory of every GPU written with each pattern, every word verified.

Not in the default run (`gpuval-agent run --checks memory`). A word read back wrong fails its GPU
as MemoryMiscompare, naming the pattern, the addresses and the bits. Memory the test could not
get (another process holds it, an allocation was refused) is reported as MemoryPartlyCovered, a
warning: what was not tested is neither passed nor failed, and an out-of-memory is never a fault.
"""

from __future__ import annotations

import threading
import time

from gpuval_agent.checks.common import CheckBuilder, CheckContext
from gpuval_agent.memtest import (
    MemoryMeasurement,
    MemoryPlan,
    MemoryProgress,
    plan_steps,
    size_text,
)
from gpuval_api import Reason, Verdict
from gpuval_api.checks import CheckName, MemoryCheck
from gpuval_api.result import CheckResult

# Name at most this many failing steps per GPU; the count of the rest is in the message.
_NAMED_STEPS = 3
# Seconds between two progress updates (a step takes ~70 ms on an H200: a line per step would
# flood a log).
_PROGRESS_SECONDS = 2.0


class _Progress:
    """The live line: the slowest GPU's share of the steps, the step it runs, its GB/s."""

    def __init__(self, context: CheckContext, gpus: list[int]) -> None:
        self._reporter = context.reporter
        self._unit = context.unit
        self._done = dict.fromkeys(gpus, 0)
        self._lock = threading.Lock()
        self._last = 0.0

    def __call__(self, update: MemoryProgress) -> None:
        with self._lock:
            self._done[update.gpu] = update.steps_done
            slowest = min(self._done.values())
            now = time.monotonic()
            if now - self._last < _PROGRESS_SECONDS and update.steps_done < update.steps_total:
                return
            self._last = now
        fraction = slowest / update.steps_total if update.steps_total else None
        self._reporter.check_progress(
            CheckName.MEMORY.value,
            fraction,
            f"{self._unit(update.gpu)}: {update.label}, step {update.steps_done}/"
            f"{update.steps_total}, {update.gbps:.0f} GB/s",
        )


def run_memory(context: CheckContext) -> CheckResult:
    builder = CheckBuilder(CheckName.MEMORY.value, context)
    config = context.config.memory
    plan = MemoryPlan.from_config(config)
    gpus = context.usable_gpus
    context.note_excluded(builder)
    with context.sampler.window() as window:
        measurements = context.backend.memory_test(
            gpus, plan, on_progress=_Progress(context, gpus), stop=context.stop
        )
    for measurement in measurements:
        _judge(builder, measurement, config, context.unit(measurement.gpu))
    for event in window.xids:
        builder.add(
            Reason.XID_ERROR,
            f"{context.unit(event.gpu)}: XID {event.xid} reported by the driver during the memory "
            "test",
            gpu=event.gpu,
        )
    builder.metrics["stepsPerPass"] = float(len(plan_steps(plan.patterns, 1)))
    builder.metrics["passes"] = float(plan.passes)
    if builder.failed:
        return builder.finish()
    tested = [m for m in measurements if m.tested_bytes > 0]
    if not tested:
        return builder.finish(
            message="no GPU memory could be allocated: nothing was tested", verdict=Verdict.SKIPPED
        )
    least = min(tested, key=lambda m: m.tested_bytes / max(m.total_bytes, 1))
    units = context.units([m.gpu for m in tested])
    return builder.finish(message=_summary(tested, plan, units, context.unit(least.gpu)))


def _summary(tested: list[MemoryMeasurement], plan: MemoryPlan, units: str, name: str) -> str:
    """`units`: the tested units as counted ('8 GPUs'); `name`: the least covered one's."""
    least = min(tested, key=lambda m: m.tested_bytes / max(m.total_bytes, 1))
    slowest = min(m.gbps for m in tested)
    return (
        f"{units}: {len(plan.patterns)} patterns "
        f"({len(plan_steps(plan.patterns, 1))} steps) x {plan.passes} pass"
        f"{'es' if plan.passes > 1 else ''}, every word verified, none differed; least covered "
        f"{name}: {size_text(least.tested_bytes)} of {size_text(least.total_bytes)} "
        f"({_coverage(least):.1%}); slowest {slowest:.0f} GB/s"
    )


def _coverage(measurement: MemoryMeasurement) -> float:
    return measurement.tested_bytes / measurement.total_bytes if measurement.total_bytes else 0.0


def _judge(
    builder: CheckBuilder, measurement: MemoryMeasurement, config: MemoryCheck, name: str
) -> None:
    """`name`: how messages name the unit ('GPU 3', or a MIG instance by profile and parent)."""
    gpu = measurement.gpu
    builder.gpu_metric(gpu, "memoryTotalBytes", float(measurement.total_bytes))
    builder.gpu_metric(gpu, "memoryFreeBytes", float(measurement.free_bytes))
    builder.gpu_metric(gpu, "memoryTestedBytes", float(measurement.tested_bytes))
    builder.gpu_metric(gpu, "memoryCoveredFraction", _coverage(measurement))
    builder.gpu_metric(gpu, "memoryBlocks", float(measurement.blocks))
    builder.gpu_metric(gpu, "memoryTestGBps", measurement.gbps if measurement.seconds else None)
    builder.gpu_metric(gpu, "memorySteps", float(measurement.steps_done))
    builder.gpu_metric(gpu, "memoryBadWords", float(sum(m.words for m in measurement.miscompares)))
    for pattern in measurement.seconds_by_pattern:
        builder.gpu_metric(gpu, f"memoryTestGBps.{pattern}", measurement.pattern_gbps(pattern))
    if measurement.error is not None:
        # A CUDA error that names ECC is the memory failing under the test, not the test.
        ecc = "ecc" in measurement.error.lower()
        builder.add(
            Reason.ECC_UNCORRECTABLE if ecc else Reason.CHECK_ERROR,
            f"{name}: memory test failed: {measurement.error}",
            gpu=gpu,
        )
    if measurement.miscompares:
        named = measurement.miscompares[:_NAMED_STEPS]
        more = len(measurement.miscompares) - len(named)
        details = "; ".join(m.describe(name, measurement.tested_bytes) for m in named)
        builder.add(
            Reason.MEMORY_MISCOMPARE,
            details + (f"; and in {more} more steps" if more else ""),
            gpu=gpu,
        )
    coverage = _coverage(measurement)
    if measurement.error is None and coverage < config.warn_below_fraction:
        refused = f"; {measurement.shortfall}" if measurement.shortfall else ""
        builder.add(
            Reason.MEMORY_PARTLY_COVERED,
            f"{name}: tested {size_text(measurement.tested_bytes)} of "
            f"{size_text(measurement.total_bytes)} ({coverage:.1%}, below "
            f"memory.warnBelowFraction {config.warn_below_fraction:.0%}); "
            f"{size_text(measurement.free_bytes)} was free when the test started{refused}; "
            "the rest was not tested",
            gpu=gpu,
        )
