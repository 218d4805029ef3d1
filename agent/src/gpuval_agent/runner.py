"""Runs the enabled checks in order and assembles the one result document."""

from __future__ import annotations

import os
import platform
import socket
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from gpuval_agent import __version__
from gpuval_agent.backends.base import Backend, TelemetrySample
from gpuval_agent.checks import state
from gpuval_agent.checks.bandwidth import run_bandwidth
from gpuval_agent.checks.burn import run_burn
from gpuval_agent.checks.common import (
    CheckBuilder,
    CheckContext,
    Reporter,
    not_applicable,
    skipped,
)
from gpuval_agent.checks.dcgm import run_dcgm
from gpuval_agent.checks.driver import run_driver
from gpuval_agent.checks.health import run_health
from gpuval_agent.checks.memory import run_memory
from gpuval_agent.checks.nccl import run_nccl, sweep_sizes
from gpuval_agent.checks.sharing import mark_in_use, mark_shared_init
from gpuval_agent.checks.train import prepare_train, run_train
from gpuval_agent.devices import keep_given
from gpuval_agent.errors import AgentError, NoDriverError
from gpuval_agent.parts import figures_for
from gpuval_agent.record import RunRecord
from gpuval_agent.state.model import Reading
from gpuval_agent.telemetry import Sampler
from gpuval_agent.watch import POLL_SECONDS, InUseWatch
from gpuval_api import Reason, Verdict
from gpuval_api.checks import CheckName, ChecksConfig
from gpuval_api.result import AgentResult, CheckResult, Environment

CHECKS: dict[CheckName, Callable[[CheckContext], CheckResult]] = {
    CheckName.STATE: state.run_state,
    CheckName.DRIVER: run_driver,
    CheckName.HEALTH: run_health,
    CheckName.MEMORY: run_memory,
    CheckName.BURN: run_burn,
    CheckName.BANDWIDTH: run_bandwidth,
    CheckName.NCCL: run_nccl,
    CheckName.TRAIN: run_train,
    CheckName.DCGM: run_dcgm,
}
# Checks that load the GPUs through CUDA: meaningless when CUDA did not initialise anywhere.
_CUDA_CHECKS = {
    CheckName.MEMORY,
    CheckName.BURN,
    CheckName.BANDWIDTH,
    CheckName.NCCL,
    CheckName.TRAIN,
}
# Checks that make CUDA contexts, run inside the watch for other processes on the GPUs: the load
# checks, and the driver check's CUDA initialisation (a context on every GPU), which is when two
# agents started at once on one GPU overlap.
_WATCHED = _CUDA_CHECKS | {CheckName.DRIVER}
# Checks that leave the hardware at rest; after any other, the state is read again (its error
# counters compared with the reading before).
_AT_REST = {CheckName.STATE, CheckName.DRIVER, CheckName.HEALTH}
# Checks that do not apply to MIG instances, and why (NVIDIA's MIG user guide: no CUDA IPC or
# NVLink between instances; AWS ParallelCluster skips DCGM's diagnostic on MIG).
_NOT_ON_MIG = {
    CheckName.NCCL: "NCCL all-reduce needs GPU-to-GPU communication, which MIG instances do not "
    "have (no CUDA IPC or NVLink between them)",
    CheckName.TRAIN: "the training step is data-parallel over NCCL, which MIG instances do not "
    "support between them",
    CheckName.DCGM: "DCGM's diagnostic does not run on GPUs in MIG mode",
}
_LOG_TAIL_CHARS = 4000


def process_uptime() -> float | None:
    """Seconds since this process started (Linux /proc), for the start-to-first-check figure."""
    try:
        with open("/proc/self/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        start_ticks = int(fields[19])
        with open("/proc/uptime") as uptime:
            system_uptime = float(uptime.read().split()[0])
        return system_uptime - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def run_checks(
    config: ChecksConfig,
    backend: Backend,
    reporter: Reporter,
    *,
    node: str | None = None,
    expected_gpus: int | None = None,
    expected_gpus_source: str = "",
    on_samples: Callable[[list[TelemetrySample]], None] | None = None,
    stop: threading.Event | None = None,
    sample_interval: float = 0.5,
    record: RunRecord | None = None,
    on_reading: Callable[[Reading], None] | None = None,
    inuse_poll: float | None = POLL_SECONDS,
    devices: Sequence[str] = (),
) -> AgentResult:
    """Every enabled check, in order. `record` receives what the run keeps beyond its result
    (the state readings, for the evidence bundle); `on_reading` hears of every state reading;
    `inuse_poll` is the watch's period while a check runs (None: no poll, for its benchmark);
    `devices`: the UUIDs the pod was given, the units tested (empty: every unit NVML shows)."""
    started_at = datetime.now(UTC)
    enabled = config.enabled()
    first = enabled[0] if enabled else CheckName.DRIVER
    reporter.check_started(first.value, None)
    startup = process_uptime()
    recording = time.monotonic()
    try:
        environment = backend.environment()
    except NoDriverError as error:
        bare = Environment(hostname=socket.gethostname(), kernel=platform.release())
        return _result(
            config=config,
            backend=backend,
            node=node,
            started_at=started_at,
            startup=startup,
            environment=bare,
            checks=_no_driver(error, enabled, reporter),
        )

    # Kept in the driver check's metrics with its split (backend.environment_split): time spent
    # here is counted by no check, so a run's wall time shows it first (issue 9, B7).
    recorded = {"environmentSeconds": round(time.monotonic() - recording, 3)}
    if environment.hostname is None:
        environment.hostname = socket.gethostname()
    missing = keep_given(environment, devices)
    if expected_gpus is None and devices:
        expected_gpus, expected_gpus_source = len(devices), "the devices given to the agent"
    if expected_gpus is None and (advertised := backend.advertised_gpu_count()) is not None:
        expected_gpus = advertised
        expected_gpus_source = f"the GPUs the {backend.name} backend's node advertises"
    # Before the agent's first CUDA context (the NCCL ranks start next): every process on a GPU
    # now is another's.
    watch = InUseWatch(backend, poll_seconds=inuse_poll)
    busy = watch.take_baseline()
    if watch.unreadable:
        environment.unsupported.append("gpuProcesses (no GPU is judged in use)")
    _prepare_nccl(
        backend,
        config,
        enabled,
        environment,
        [g.index for g in environment.gpus if g.index not in busy],
    )
    sampler = Sampler(backend, sample_interval, on_samples)
    sampler.start()
    context = CheckContext(
        backend=backend,
        config=config,
        environment=environment,
        part=figures_for(environment.gpus[0].name if environment.gpus else None),
        sampler=sampler,
        reporter=reporter,
        expected_gpus=expected_gpus,
        expected_gpus_source=expected_gpus_source,
        stop=stop or threading.Event(),
        watch=watch,
        record=record if record is not None else RunRecord(),
        on_reading=on_reading,
        missing_devices=missing,
    )
    try:
        checks = _run_enabled(context, enabled, recorded | dict(backend.environment_split))
    finally:
        sampler.stop()
        try:
            backend.finish_environment(environment)
        except AgentError as error:
            environment.unsupported.append(f"torch versions ({error})")
    return _result(
        config=config,
        backend=backend,
        node=node,
        started_at=started_at,
        startup=startup,
        environment=environment,
        checks=checks,
        stopped=context.stop.is_set(),
    )


def _prepare_nccl(
    backend: Backend,
    config: ChecksConfig,
    enabled: list[CheckName],
    environment: Environment,
    gpus: list[int],
) -> None:
    """Start the NCCL ranks now, so their communicators form while the other checks run; not
    when the memory test runs, which takes nearly all free memory the ranks would race it for."""
    if CheckName.NCCL in enabled and CheckName.MEMORY not in enabled and len(gpus) > 1:
        if any(g.mig is not None for g in environment.gpus):
            return  # not applicable on MIG (_NOT_ON_MIG)
        nccl = config.nccl
        sizes = sweep_sizes(nccl.min_bytes, nccl.max_bytes)
        backend.prepare_all_reduce(gpus, sizes, nccl.iterations, nccl.timeout_seconds)


def _no_driver(
    error: NoDriverError, enabled: list[CheckName], reporter: Reporter
) -> list[CheckResult]:
    """The driver check failed as DriverNotLoaded, every other enabled check skipped."""
    builder = CheckBuilder(CheckName.DRIVER.value)
    builder.add(Reason.DRIVER_NOT_LOADED, f"NVML: {error.detail}")
    checks = [builder.finish()]
    reporter.check_finished(checks[0])
    why = "no NVIDIA driver or GPU (see the driver check)"
    checks.extend(skipped(name.value, why) for name in enabled if name != CheckName.DRIVER)
    return checks


def _run_enabled(
    context: CheckContext, enabled: list[CheckName], recorded: dict[str, float]
) -> list[CheckResult]:
    """Every enabled check in order; `recorded` (the environment record's timings) goes into the
    driver check's metrics."""
    checks: list[CheckResult] = []
    for position, name in enumerate(enabled):
        if context.stop.is_set():
            checks.append(skipped(name.value, "the agent was asked to stop"))
            continue
        if position > 0:
            context.reporter.check_started(name.value, _expected_seconds(context.config, name))
        if name is CheckName.BURN and CheckName.TRAIN in enabled and not context.on_mig:
            # The training ranks start as the burn does (the memory test, which takes nearly
            # all free memory, is over): their start-up is hidden behind the burn.
            prepare_train(context)
        if name in _NOT_ON_MIG and context.on_mig:
            result = not_applicable(name.value, f"on MIG instances: {_NOT_ON_MIG[name]}")
        elif name in _CUDA_CHECKS and context.environment.gpus and not context.usable_gpus:
            result = skipped(name.value, "CUDA did not initialise on any GPU")
        else:
            result = _run_one(name, context)
        if name is CheckName.DRIVER:
            result.metrics.update(recorded)
            context.excluded.update(cuda_failures(result))
        if name not in _AT_REST and result.verdict is not Verdict.SKIPPED:
            _read_state_after(context, name)
        checks.append(result)
        context.reporter.check_finished(result)
    return [state.amend(c, context) if c.name == CheckName.STATE else c for c in checks]


def _read_state_after(context: CheckContext, name: CheckName) -> None:
    """The state read again after a load check, when the state check read it before."""
    if not context.record.counters:
        return
    try:
        state.read_after(context, name.value)
    except Exception as error:  # a failed re-read loses one comparison, never the run
        context.record.missed.append(f"after {name.value}: {type(error).__name__}: {error}")


def cuda_failures(driver: CheckResult) -> dict[int, str]:
    """GPUs the driver check found without CUDA, and why, for the load checks to leave out."""
    return {
        g.index: f"CUDA did not initialise on it (driver check: {Reason.CUDA_INIT_FAILED})"
        for g in driver.gpus
        if g.metrics.get("cudaInitialised") == 0.0
    }


def _expected_seconds(config: ChecksConfig, name: CheckName) -> float | None:
    if name is CheckName.BURN:
        return config.configured_seconds()
    return None


def _run_one(name: CheckName, context: CheckContext) -> CheckResult:
    """One check; one that makes CUDA contexts inside the watch for other processes on its
    GPUs (a load check leaves out the GPUs busy as it starts)."""
    watch = context.watch
    if name not in _WATCHED or watch is None:
        return _call(name, context)
    if name is CheckName.DRIVER:
        with watch.during() as seen:
            result = _call(name, context)
        marked = mark_shared_init(result, watch.baseline, seen.before | seen.during)
    else:
        with watch.during() as seen:
            context.busy = seen.before
            try:
                if context.usable_gpus or not seen.before:
                    result = _call(name, context)
                else:
                    result = CheckBuilder(name.value, context).finish(verdict=Verdict.SKIPPED)
            finally:
                context.busy = {}
        marked = mark_in_use(result, seen.before, seen.during)
    marked.metrics["inUseReadings"] = float(seen.readings)
    return marked


def _call(name: CheckName, context: CheckContext) -> CheckResult:
    try:
        return CHECKS[name](context)
    except AgentError as error:
        # A condition the user must see (e.g. torch missing for the cuda backend): no traceback.
        builder = CheckBuilder(name.value, context)
        builder.add(Reason.CHECK_ERROR, f"{name.value} check could not run: {error}")
        return builder.finish()
    except Exception as error:  # one broken check must not lose the others
        builder = CheckBuilder(name.value, context)
        builder.add(
            Reason.CHECK_ERROR, f"{name.value} check crashed: {type(error).__name__}: {error}"
        )
        builder.log_tail = traceback.format_exc()[-_LOG_TAIL_CHARS:]
        return builder.finish()


def overall(
    checks: list[CheckResult], gpu_count: int, stopped: bool
) -> tuple[Verdict, Reason | None, str]:
    """The run's verdict, reason (the first failed check's, else the first untested one's) and
    message from its checks: Failed on any failure, NotRun when nothing failed but a check did
    not test a GPU (GpuInUse), else Passed. A state check failed only by counters that grew
    under a load check comes after the checks that failed on their own: when the burn saw XID 79
    and the kernel log grew by its line, XidError heads the report and the growth backs it."""
    failed = [c for c in checks if c.verdict is Verdict.FAILED]
    grown = [c for c in failed if c.reason is Reason.ERROR_COUNTERS_GREW]
    failed = [c for c in failed if c not in grown] + grown
    untested = [c for c in checks if c.verdict is Verdict.NOT_RUN]
    verdict = Verdict.FAILED if failed else Verdict.NOT_RUN if untested else Verdict.PASSED
    reason = (failed or untested)[0].reason if failed or untested else None
    if failed:
        message = "; ".join(f"{c.name}: {c.message}" for c in failed)
    elif untested:
        # One check's words say what the others' would (the same GPU, the same process).
        names = ", ".join(c.name for c in untested)
        message = f"{untested[0].message} (not tested by: {names})"
    else:
        ran = [c.name for c in checks if c.verdict is Verdict.PASSED]
        message = f"{gpu_count} GPUs passed {', '.join(ran) or 'no checks'}"
    if stopped:
        # A partial run never passes: a stopped burn ran shorter than configured.
        verdict, reason = Verdict.FAILED, Reason.AGENT_STOPPED
        message = f"stopped before the checks finished; {message}"
    return verdict, reason, message


def _result(
    *,
    config: ChecksConfig,
    backend: Backend,
    node: str | None,
    started_at: datetime,
    startup: float | None,
    environment: Environment,
    checks: list[CheckResult],
    stopped: bool = False,
) -> AgentResult:
    verdict, reason, message = overall(checks, environment.gpu_count, stopped)
    return AgentResult(
        agent_version=__version__,
        backend=backend.name,
        node=node,
        started_at=started_at,
        completed_at=datetime.now(UTC),
        verdict=verdict,
        reason=reason,
        message=message,
        startup_seconds=round(startup, 3) if startup is not None else None,
        checks_config=config,
        environment=environment,
        checks=checks,
    )
