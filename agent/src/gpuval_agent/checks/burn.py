"""Verified burn: every GPU at once, every result checked, telemetry watched while it runs."""

from __future__ import annotations

from gpuval_agent.backends.base import POWER_THROTTLES, THERMAL_THROTTLES, BurnMeasurement
from gpuval_agent.checks.common import CheckBuilder, CheckContext, scaled_note
from gpuval_agent.telemetry import Window
from gpuval_api import Reason
from gpuval_api.figures import BURN, MAX_TEMPERATURE
from gpuval_api.result import BurnFingerprint, CheckResult

# Name at most this many bad iterations per GPU; the count of the rest is in the message.
_NAMED_BAD_ITERATIONS = 3


def run_burn(context: CheckContext) -> CheckResult:
    builder = CheckBuilder("burn", context)
    config = context.config.burn
    gpus = context.usable_gpus
    context.note_excluded(builder)
    with context.sampler.window() as window:
        for position, precision in enumerate(config.precisions):
            if context.stop.is_set():
                break
            context.reporter.check_progress(
                "burn", position / len(config.precisions), f"{precision} burn"
            )
            measurements = context.backend.burn(
                gpus,
                precision,
                config.matrix_size,
                config.duration_seconds,
                on_progress=context.reporter.burn_progress,
                stop=context.stop,
            )
            for measurement in measurements:
                # A MIG instance is held to its share of the part's figure, and of an absolute
                # minimum (written for a whole GPU).
                expected = context.part_for(measurement.gpu).tflops.get(precision)
                share = context.share_for(measurement.gpu).compute
                minimum = config.min_tflops.minimum(expected, share)
                why = scaled_note(config.min_tflops.absolute, share)
                unit = context.unit(measurement.gpu)
                _judge_measurement(
                    builder, measurement, str(precision), minimum, why=why, unit=unit
                )
                if measurement.fingerprint is not None:
                    builder.fingerprints.append(
                        BurnFingerprint(
                            precision=str(precision),
                            gpu=measurement.gpu,
                            value=measurement.fingerprint,
                            determinants=measurement.determinants,
                        )
                    )
                if position == 0:
                    builder.gpu_metric(measurement.gpu, BURN.metric, measurement.tflops)
    _judge_telemetry(builder, context, window)
    if builder.failed:
        return builder.finish()
    metrics = _all(builder, gpus)
    worst = ", ".join(
        f"{precision} {min(m.get(BURN.precision_metric(precision), 0.0) for m in metrics):.1f}"
        for precision in config.precisions
    )
    return builder.finish(message=f"{context.units(gpus)} verified; worst TFLOP/s: {worst}")


def _all(builder: CheckBuilder, gpus: list[int]) -> list[dict[str, float]]:
    return [builder.gpu_metrics(gpu) for gpu in gpus]


def _judge_measurement(
    builder: CheckBuilder,
    measurement: BurnMeasurement,
    precision: str,
    minimum: float | None,
    *,
    why: str = "",
    unit: str = "",
) -> None:
    """`why`: what the message adds of a minimum scaled to a MIG instance; `unit`: its name."""
    unit = unit or f"GPU {measurement.gpu}"
    gpu = measurement.gpu
    builder.gpu_metric(gpu, BURN.precision_metric(precision), measurement.tflops)
    builder.gpu_metric(gpu, f"iterations.{precision}", float(measurement.iterations))
    if measurement.error is not None:
        builder.add(
            Reason.CHECK_ERROR, f"{unit}: {precision} burn failed: {measurement.error}", gpu=gpu
        )
        return
    if measurement.reference_differs:
        builder.add(
            Reason.BURN_MISMATCH,
            f"{unit}: its {precision} reference result differs from every other GPU's "
            "(same inputs, same part)",
            gpu=gpu,
        )
    if measurement.bad:
        builder.gpu_metric(gpu, f"badIterations.{precision}", float(len(measurement.bad)))
        nan = [bad for bad in measurement.bad if bad.is_nan]
        reason = Reason.BURN_NAN if nan else Reason.BURN_MISMATCH
        named = (nan or measurement.bad)[:_NAMED_BAD_ITERATIONS]
        details = "; ".join(
            f"iteration {bad.iteration}: {bad.mismatches} elements differ from the reference, "
            f"{bad.non_finite} NaN/Inf"
            for bad in named
        )
        more = len(measurement.bad) - len(named)
        builder.add(
            reason,
            f"{unit}: {precision} burn gave wrong results in {len(measurement.bad)} of "
            f"{measurement.iterations} iterations ({details}{f'; {more} more' if more else ''})",
            gpu=gpu,
        )
    if minimum is not None and measurement.tflops < minimum:
        builder.add(
            Reason.LOW_THROUGHPUT,
            f"{unit}: {precision} burn reached {measurement.tflops:.1f} TFLOP/s, below the "
            f"minimum {minimum:.1f} (burn.minTflops{why})",
            gpu=gpu,
        )


def _judge_telemetry(builder: CheckBuilder, context: CheckContext, window: Window) -> None:
    config = context.config.burn
    for gpu in context.environment.gpus:
        seen = window.gpu(gpu.index)
        builder.gpu_metric(gpu.index, MAX_TEMPERATURE.metric, seen.max_temperature_celsius)
        builder.gpu_metric(gpu.index, "maxPowerWatts", seen.max_power_watts)
        builder.gpu_metric(gpu.index, "minSmClockMhz", seen.min_sm_clock_mhz)
        builder.gpu_metric(gpu.index, "meanSmClockMhz", seen.mean_sm_clock_mhz)
        temperature = seen.max_temperature_celsius
        if temperature is not None and temperature > config.max_temperature_celsius:
            builder.add(
                Reason.OVER_TEMPERATURE,
                f"{context.unit(gpu.index)}: reached {temperature:.0f} °C during the burn, above "
                f"burn.maxTemperatureCelsius {config.max_temperature_celsius:.0f}",
                gpu=gpu.index,
            )
        thermal = sorted(seen.throttles & THERMAL_THROTTLES)
        if config.fail_on_thermal_slowdown and thermal:
            builder.add(
                Reason.THERMAL_SLOWDOWN,
                f"{context.unit(gpu.index)}: clocks throttled for temperature during the burn "
                f"({', '.join(thermal)}; max {temperature} °C)",
                gpu=gpu.index,
            )
        power = sorted(seen.throttles & POWER_THROTTLES)
        default_limit = gpu.default_power_limit_watts or context.part.default_power_limit_watts
        fraction = config.fail_on_power_cap_below_fraction
        if (
            power
            and fraction > 0
            and gpu.power_limit_watts is not None
            and default_limit is not None
            and gpu.power_limit_watts < fraction * default_limit
        ):
            builder.add(
                Reason.POWER_CAPPED,
                f"{context.unit(gpu.index)}: throttled for power ({', '.join(power)}) at an "
                f"enforced limit of {gpu.power_limit_watts:.0f} W, below {fraction:.0%} of the "
                f"default {default_limit:.0f} W",
                gpu=gpu.index,
            )
    for event in window.xids:
        builder.add(
            Reason.XID_ERROR,
            f"{context.unit(event.gpu)}: XID {event.xid} reported by the driver during the burn",
            gpu=event.gpu,
        )
