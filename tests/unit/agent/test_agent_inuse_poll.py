"""Another process's brief CUDA context is seen (issue 17, part 3: two agents on one GPU): the watch
reads the GPUs on a poll of its own while a check runs, so a process that appears and leaves
between the check's first and last reading is named, and the GPU is NotRun for that check; the
driver check's CUDA initialisation is watched too."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from gpuval_agent.backends.base import GpuProcess, GpuUse
from gpuval_agent.checks.common import CheckBuilder
from gpuval_agent.checks.sharing import mark_shared_init
from gpuval_agent.cli import main
from gpuval_agent.inuse import Busy
from gpuval_agent.outcome import EXIT_NOT_RUN
from gpuval_agent.watch import InUseWatch
from gpuval_api.reasons import Reason
from gpuval_api.result import AgentResult, InUseWhen, Verdict

GIB = 1 << 30
OTHER_AGENT = GpuProcess(pid=552, used_memory_bytes=GIB // 2, sm_percent=2, name="gpuval-agent")
WAIT = 30.0  # a bound on a wait that the poll ends within a fraction of a second


class _Brief:
    """NVML's answer with another agent's context listed only while `present` is set; `seen` is
    set once a reading found it."""

    def __init__(self) -> None:
        self.present = threading.Event()
        self.seen = threading.Event()
        self.readings = 0

    def gpu_use(self) -> list[GpuUse] | None:
        self.readings += 1
        processes = (OTHER_AGENT,) if self.present.is_set() else ()
        if processes:
            self.seen.set()
        return [GpuUse(gpu=0, processes=processes, memory_used_bytes=GIB, memory_total_bytes=GIB)]

    def host_pid_namespace(self) -> bool:
        return True

    def agent_gpu_processes(self) -> dict[int, int]:
        return {0: 1}


def test_a_context_that_comes_and_goes_between_a_checks_first_and_last_reading_is_seen() -> None:
    source = _Brief()
    watch = InUseWatch(source, poll_seconds=0.01)
    assert watch.take_baseline() == {}
    with watch.during() as seen:
        source.present.set()
        assert source.seen.wait(WAIT), "the poll never read the GPUs while the context lived"
        source.present.clear()
    assert seen.before == {}
    assert [p.pid for p in seen.during[0].processes] == [552]
    assert seen.readings >= 3  # the first, at least one poll, the last


def test_without_the_poll_the_first_and_last_reading_miss_it() -> None:
    source = _Brief()
    watch = InUseWatch(source, poll_seconds=None)
    watch.take_baseline()
    with watch.during() as seen:
        source.present.set()
        source.present.clear()
    assert seen.during == {} and seen.readings == 2


def test_the_poll_reads_only_while_a_check_runs() -> None:
    source = _Brief()
    watch = InUseWatch(source, poll_seconds=0.01)
    watch.take_baseline()
    with watch.during():
        source.present.set()
        assert source.seen.wait(WAIT)
    source.present.clear()
    assert not watch.polling  # its thread ended with the check (joined before during() returned)
    after = source.readings
    time.sleep(0.1)  # ten of the poll's periods
    assert source.readings == after


def _driver_result() -> CheckBuilder:
    builder = CheckBuilder("driver")
    builder.gpu_metric(0, "cudaInitialised", 1.0)
    builder.gpu_metric(1, "cudaInitialised", 0.0)
    builder.add(
        Reason.CUDA_INIT_FAILED,
        "GPU 1: CUDA did not initialise: creating a context on CUDA device 1 failed: "
        "CUDA_ERROR_OUT_OF_MEMORY",
        gpu=1,
    )
    return builder


def test_a_gpu_another_process_used_during_the_drivers_cuda_init_is_shared_and_not_run() -> None:
    busy = Busy(gpu=1, processes=(OTHER_AGENT,), memory_used_bytes=GIB, memory_total_bytes=GIB)
    marked = mark_shared_init(_driver_result().finish(), baseline={}, seen={1: busy})
    assert (marked.verdict, marked.reason) == (Verdict.NOT_RUN, Reason.GPU_IN_USE)
    assert [f.reason for f in marked.findings] == [Reason.GPU_IN_USE]  # its OOM set aside
    message = marked.findings[0].message
    assert message.startswith("GPU 1 was used by PID 552 (gpuval-agent, 0.5 GiB")
    assert "while the driver check initialised CUDA on it: the GPU is shared" in message
    assert [(o.gpu, o.pid, o.when) for o in marked.occupants] == [(1, 552, InUseWhen.DURING)]
    assert {g.index: g.verdict for g in marked.gpus} == {0: Verdict.PASSED, 1: Verdict.NOT_RUN}


def test_a_gpu_the_snapshot_found_busy_is_left_to_the_load_checks() -> None:
    busy = Busy(gpu=1, processes=(OTHER_AGENT,))
    result = _driver_result().finish()
    assert mark_shared_init(result, baseline={1: busy}, seen={1: busy}) is result


def test_a_process_on_the_gpu_for_a_moment_mid_burn_is_named_and_the_gpu_not_tested(
    tmp_path: Path,
) -> None:
    # The other process appears 0.3 s into a 1.5 s burn and leaves 0.3 s later: the burn's first
    # and last readings find the GPU free; the poll, reading every 0.1 s, finds the process.
    brief = {"kind": "foreign-compute", "gpu": 0, "during": "burn"}
    brief |= {"afterSeconds": 0.3, "forSeconds": 0.3}
    simulate = json.dumps({"gpus": 1, "timeScale": 0.025, "faults": [brief]})
    out = tmp_path / "result.json"
    argv = ["run", "--backend", "simulated", "--simulate", simulate, "--json", str(out)]
    code = main([*argv, "--checks", "driver,burn", "--quiet"])
    result = AgentResult.model_validate_json(out.read_text())
    burn = result.check("burn")
    assert burn is not None
    assert code == EXIT_NOT_RUN
    assert (burn.verdict, burn.reason) == (Verdict.NOT_RUN, Reason.GPU_IN_USE)
    assert [(o.gpu, o.pid, o.when) for o in burn.occupants] == [(0, 5000000, InUseWhen.DURING)]
    assert burn.metrics["inUseReadings"] > 2
    assert burn.findings[0].message.startswith("GPU 0 was used by PID 5000000 (python3 train.py")
    driver = result.check("driver")
    assert driver is not None and driver.verdict is Verdict.PASSED
