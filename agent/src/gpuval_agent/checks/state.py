"""The state check: the hardware state at rest before anything is loaded (NVML, sysfs, the kernel
log), judged finding by finding, then read again after each load check so that an error counter
that grew under load is named with the check that grew it (the state check's result is amended at
the end of the run)."""

from __future__ import annotations

from pathlib import Path

from gpuval_agent.checks.common import CheckBuilder, CheckContext
from gpuval_agent.record import Growth
from gpuval_agent.state.counters import counters, growth
from gpuval_agent.state.finding import StateFinding
from gpuval_agent.state.hostjudge import port_down
from gpuval_agent.state.judge import expected_nvlinks, judge
from gpuval_agent.state.model import Reading
from gpuval_agent.state.read import take_reading
from gpuval_api import REASONS, Reason, Severity, Verdict
from gpuval_api.checks import CheckName, FindingAction, StateCheck
from gpuval_api.result import CheckResult, Finding, GpuCheckResult, Metric

NAME = CheckName.STATE.value
_BEFORE = "before the load checks"
_AFTER = "after "  # a reading after a load check: "after burn"


def _root(context: CheckContext) -> Path:
    return Path(context.backend.state_root(context.config.state.host_root))


def _read(context: CheckContext, label: str) -> Reading:
    config = context.config.state
    reading = take_reading(context.backend, _root(context), label, config.network.devices)
    if context.on_reading is not None:
        context.on_reading(reading)
    return reading


def _severity(config: StateCheck, reason: Reason) -> Severity | None:
    action = config.severity_of(reason)
    if action is FindingAction.IGNORE:
        return None
    return Severity.ERROR if action is FindingAction.FAIL else Severity.WARNING


def _add(builder: CheckBuilder, config: StateCheck, finding: StateFinding) -> None:
    severity = _severity(config, finding.reason)
    if severity is not None:
        builder.add(finding.reason, finding.message, gpu=finding.gpu, severity=severity)


def _gpu_figures(builder: CheckBuilder, reading: Reading) -> None:
    for gpu in reading.gpus:
        g = gpu.index
        builder.gpu_metric(g, "eccUncorrectableVolatile", gpu.ecc.get("uncorrectedVolatile"))
        builder.gpu_metric(g, "eccCorrectableVolatile", gpu.ecc.get("correctedVolatile"))
        builder.gpu_metric(g, "eccUncorrectableAggregate", gpu.ecc.get("uncorrectedAggregate"))
        builder.gpu_metric(g, "remappedRowsUncorrectable", gpu.remapped_uncorrectable)
        builder.gpu_metric(g, "remappedRowsCorrectable", gpu.remapped_correctable)
        if gpu.nvlinks:
            builder.gpu_metric(g, "nvlinksActive", sum(link.active for link in gpu.nvlinks))
        builder.gpu_metric(g, "pcieGeneration", gpu.pcie_gen)
        builder.gpu_metric(g, "pcieWidth", gpu.pcie_width)
        builder.gpu_metric(g, "pcieReplays", gpu.pcie_replays)
        builder.gpu_metric(g, "powerLimitWatts", gpu.power_limit_watts)
        if builder.gpu_metrics(g) == {}:
            builder.gpu_metric(g, "checked", 1.0)


def _not_read(reading: Reading) -> list[str]:
    """What was not read, each once: 'GPUs 0-7: retired pages: not supported'."""
    by_what: dict[str, list[int]] = {}
    for gpu in reading.gpus:
        for what in gpu.not_read:
            by_what.setdefault(what, []).append(gpu.index)
    found = [f"{_gpus(indices)}: {what}" for what, indices in by_what.items()]
    found.extend(reading.host.not_read)
    log = reading.host.kernel_log
    if log.source is None:
        found.append(f"kernel log: {log.error}")
    return list(dict.fromkeys(found))


def _gpus(indices: list[int]) -> str:
    if len(indices) == 1:
        return f"GPU {indices[0]}"
    if indices == list(range(indices[0], indices[-1] + 1)):
        return f"GPUs {indices[0]}-{indices[-1]}"
    return f"GPUs {', '.join(map(str, indices))}"


def run_state(context: CheckContext) -> CheckResult:
    builder = CheckBuilder(NAME, context)
    config = context.config.state
    reading = _read(context, _BEFORE)
    record = context.record
    record.readings.append(reading)
    record.counters.append((_BEFORE, counters(reading)))
    for finding in judge(reading, config, context.part.nvlinks, _root(context)):
        _add(builder, config, finding)
    _gpu_figures(builder, reading)
    host = reading.host
    expected = expected_nvlinks(reading.gpus, config, context.part.nvlinks)
    builder.metrics[Metric.NVLINKS_DOWN] = (
        sum(max(0, expected - sum(link.active for link in gpu.nvlinks)) for gpu in reading.gpus)
        if expected is not None
        else 0
    )
    builder.metrics[Metric.IB_PORTS_DOWN] = sum(port_down(port) for port in host.ports)
    builder.metrics["readSeconds"] = reading.seconds
    builder.metrics["ibPorts"] = len(host.ports)
    builder.metrics["nvswitches"] = len(host.nvswitches)
    builder.metrics["kernelXids"] = len(host.kernel_log.xids)
    builder.not_read = _not_read(reading)
    summary = (
        f"{len(reading.gpus)} GPUs, {len(host.ports)} network ports read in {reading.seconds:.2f} s"
        f"; kernel log: {host.kernel_log.source or 'not readable'}"
    )
    return builder.finish(message="" if builder.failed else summary)


def read_after(context: CheckContext, check: str) -> None:
    """Read the state again after load check `check`; keep what grew since the last reading."""
    label = f"{_AFTER}{check}"
    reading = _read(context, label)
    record = context.record
    previous = record.counters[-1][1]
    now = counters(reading)
    for counter, delta in growth(previous, now).items():
        record.growth.append(Growth(check, counter, delta, previous.get(counter, 0), now[counter]))
    record.readings.append(reading)
    record.counters.append((label, now))


def amend(result: CheckResult, context: CheckContext) -> CheckResult:
    """The state check's result with the counters that grew during the load checks added."""
    config = context.config.state
    severity = _severity(config, Reason.ERROR_COUNTERS_GREW)
    after = [r.seconds for r in context.record.readings[1:]]
    if not context.record.growth and not after:
        return result
    findings = list(result.findings)
    info = REASONS[Reason.ERROR_COUNTERS_GREW]
    if severity is not None:
        for grew in context.record.growth:
            findings.append(
                Finding(
                    reason=Reason.ERROR_COUNTERS_GREW,
                    severity=severity,
                    gpu=_gpu_of(grew.counter),
                    message=f"{grew.counter} +{grew.delta:,} during {grew.check} "
                    f"({grew.before:,} -> {grew.after:,})",
                    hint=info.hint,
                )
            )
    errors = [f for f in findings if f.severity is Severity.ERROR]
    failed_gpus = {f.gpu for f in errors if f.gpu is not None}
    gpus = [
        GpuCheckResult(
            index=g.index,
            uuid=g.uuid,
            verdict=Verdict.FAILED if g.index in failed_gpus else g.verdict,
            reason=g.reason or next((f.reason for f in errors if f.gpu == g.index), None),
            metrics=g.metrics,
        )
        for g in result.gpus
    ]
    amended = result.model_copy(deep=True)
    amended.findings = findings
    amended.gpus = gpus
    for label, _ in context.record.counters[1:]:
        check = label.removeprefix(_AFTER)
        grown = sum(1 for g in context.record.growth if g.check == check)
        amended.metrics[f"{Metric.COUNTERS_GROWN}.{check}"] = grown
    amended.metrics["afterReadings"] = len(after)
    amended.metrics["afterReadSeconds"] = round(sum(after), 4)
    amended.verdict = Verdict.FAILED if errors else result.verdict
    amended.reason = errors[0].reason if errors else None
    amended.hint = errors[0].hint if errors else None
    amended.message = errors[0].message if errors else result.message
    amended.elapsed_seconds = round(result.elapsed_seconds + sum(after), 3)
    return amended


def _gpu_of(counter: str) -> int | None:
    """The GPU a counter key names ('GPU 3 NVLink 1: ...' -> 3)."""
    head = counter.split(":", 1)[0].split()
    if len(head) >= 2 and head[0] == "GPU" and head[1].isdigit():
        return int(head[1])
    return None
