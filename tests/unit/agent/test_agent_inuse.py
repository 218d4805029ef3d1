"""A GPU another process uses is named, not blamed (issue 17, part 3): the pure rules that tell
the agent's processes from others', and what a busy GPU does to a check's result."""

from __future__ import annotations

import os
import subprocess
import sys

from gpuval_agent.backends.base import GpuProcess, GpuUse
from gpuval_agent.checks.common import CheckBuilder
from gpuval_agent.checks.sharing import mark_in_use
from gpuval_agent.inuse import Busy, Ownership, describe, foreign_use, is_out_of_memory
from gpuval_agent.watch import InUseWatch, descends_from
from gpuval_api.reasons import Reason
from gpuval_api.result import InUseWhen, Verdict

GIB = 1 << 30
TOTAL = 150754820096  # an H200's memory as NVML reports it
TRAIN = GpuProcess(pid=531, used_memory_bytes=3 * GIB, sm_percent=88)
AGENT = GpuProcess(pid=700, used_memory_bytes=2 * GIB)
RANK = GpuProcess(pid=701, used_memory_bytes=1 * GIB)


def _use(*processes: GpuProcess, used: int = GIB, util: int = 0) -> GpuUse:
    return GpuUse(
        gpu=0,
        processes=processes,
        memory_used_bytes=used,
        memory_total_bytes=TOTAL,
        utilization_percent=util,
    )


BEFORE = Ownership(started=False, comparable=False)


def test_before_the_agents_first_context_every_listed_process_is_anothers() -> None:
    busy = foreign_use(_use(TRAIN), BEFORE)
    assert busy is not None and busy.exact and busy.processes == (TRAIN,)
    assert foreign_use(_use(), BEFORE) is None


def test_an_idle_gpu_before_the_first_context_is_free_with_the_drivers_reservation() -> None:
    assert foreign_use(_use(used=650 << 20), BEFORE) is None


def test_memory_or_load_with_no_process_listed_is_a_process_in_another_namespace() -> None:
    held = foreign_use(_use(used=100 * GIB), BEFORE)
    assert held is not None and held.processes == () and "100.0 GiB" in held.note
    computing = foreign_use(_use(util=100), BEFORE)
    assert computing is not None and "100 % utilization" in computing.note


def test_with_the_hosts_pids_only_processes_outside_the_agents_tree_are_others() -> None:
    ownership = Ownership(started=True, comparable=True, own=frozenset({700, 701}))
    assert foreign_use(_use(AGENT, RANK), ownership) is None
    busy = foreign_use(_use(AGENT, TRAIN, RANK), ownership)
    assert busy is not None and busy.exact and busy.processes == (TRAIN,)


def test_without_the_hosts_pids_more_processes_than_the_agent_runs_is_busy_not_exactly() -> None:
    ownership = Ownership(started=True, comparable=False, allowed={0: 2})
    assert foreign_use(_use(AGENT, RANK), ownership) is None
    busy = foreign_use(_use(AGENT, TRAIN, RANK), ownership)
    assert busy is not None and not busy.exact
    assert {p.pid for p in busy.processes} == {531, 700, 701}
    assert "at most 2" in busy.note and "hostPID" in busy.note


def test_a_pid_seen_before_the_first_context_stays_anothers_in_any_namespace() -> None:
    ownership = Ownership(
        started=True, comparable=False, allowed={0: 2}, known_foreign=frozenset({531})
    )
    busy = foreign_use(_use(AGENT, TRAIN), ownership)
    assert busy is not None and busy.exact and busy.processes == (TRAIN,)


def test_the_description_names_pid_name_memory_and_the_gpus_memory_in_use() -> None:
    named = GpuProcess(pid=531, used_memory_bytes=3 * GIB, sm_percent=88, name="python3 a.py")
    text = describe(
        Busy(gpu=0, processes=(named,), memory_used_bytes=4 * GIB, memory_total_bytes=TOTAL)
    )
    assert text == (
        "PID 531 (python3 a.py, 3.0 GiB, 88 % of the SMs); 4.0 of 140.4 GiB of the GPU's "
        "memory in use"
    )


def test_out_of_memory_is_recognised_in_the_words_of_torch_cuda_and_nccl() -> None:
    assert is_out_of_memory("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate")
    assert is_out_of_memory("creating a context failed: CUDA_ERROR_OUT_OF_MEMORY")
    assert is_out_of_memory("NCCL error: unhandled cuda error ... out of memory")
    assert not is_out_of_memory("RuntimeError: CUDA error: an illegal memory access")


def test_a_process_the_agent_started_descends_from_it_and_its_parent_does_not() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert descends_from(child.pid, root=os.getpid())
        assert not descends_from(os.getppid(), root=os.getpid())
    finally:
        child.kill()
        child.wait()


def _burn_result(*findings: tuple[Reason, int | None]) -> CheckBuilder:
    builder = CheckBuilder("burn")
    for gpu in (0, 1):
        builder.gpu_metric(gpu, "tflops", 300.0 if gpu == 1 else 780.0)
    for reason, gpu in findings:
        builder.add(reason, f"GPU {gpu}: {reason}", gpu=gpu)
    return builder


BUSY1 = Busy(gpu=1, processes=(TRAIN,), memory_used_bytes=4 * GIB, memory_total_bytes=TOTAL)


def test_a_gpu_busy_during_a_check_is_not_run_and_its_low_figure_is_set_aside() -> None:
    result = _burn_result((Reason.LOW_THROUGHPUT, 1)).finish()
    assert result.verdict is Verdict.FAILED
    marked = mark_in_use(result, before={}, during={1: BUSY1})
    assert (marked.verdict, marked.reason) == (Verdict.NOT_RUN, Reason.GPU_IN_USE)
    assert [f.reason for f in marked.findings] == [Reason.GPU_IN_USE]
    assert "PID 531" in marked.message and "set aside: LowThroughput" in marked.message
    assert {g.index: g.verdict for g in marked.gpus} == {0: Verdict.PASSED, 1: Verdict.NOT_RUN}
    assert [(o.gpu, o.pid, o.when) for o in marked.occupants] == [(1, 531, InUseWhen.DURING)]


def test_evidence_another_process_cannot_cause_still_fails_the_gpu() -> None:
    result = _burn_result((Reason.BURN_MISMATCH, 1), (Reason.LOW_THROUGHPUT, 1)).finish()
    marked = mark_in_use(result, before={}, during={1: BUSY1})
    assert (marked.verdict, marked.reason) == (Verdict.FAILED, Reason.BURN_MISMATCH)
    assert {f.reason for f in marked.findings} == {Reason.GPU_IN_USE, Reason.BURN_MISMATCH}


def test_a_gpu_busy_before_a_check_is_named_as_left_out_and_the_others_keep_their_verdict() -> None:
    builder = CheckBuilder("bandwidth")
    builder.gpu_metric(0, "h2dGBps", 55.0)
    marked = mark_in_use(builder.finish(message="worst GB/s ..."), before={1: BUSY1}, during={})
    assert marked.verdict is Verdict.NOT_RUN
    assert marked.findings[0].gpu == 1
    assert marked.findings[0].message.endswith("the bandwidth check left it out")
    assert {g.index: g.verdict for g in marked.gpus} == {0: Verdict.PASSED, 1: Verdict.NOT_RUN}


def test_a_node_wide_nccl_failure_with_a_shared_gpu_is_set_aside() -> None:
    builder = CheckBuilder("nccl")
    builder.add(Reason.NCCL_LOW_BUSBW, "all-reduce busbw 120.0 GB/s ... below the minimum")
    marked = mark_in_use(builder.finish(), before={}, during={1: BUSY1})
    assert (marked.verdict, marked.reason) == (Verdict.NOT_RUN, Reason.GPU_IN_USE)


def test_a_check_with_no_gpu_in_use_is_left_as_it_was() -> None:
    result = _burn_result((Reason.LOW_THROUGHPUT, 1)).finish()
    assert mark_in_use(result, before={}, during={}) is result


class _Readings:
    """NVML's readings in turn (the watch's source), the last one repeated."""

    def __init__(self, *uses: list[GpuUse]) -> None:
        self.uses = list(uses)

    def gpu_use(self) -> list[GpuUse] | None:
        return self.uses.pop(0) if len(self.uses) > 1 else self.uses[0]

    def host_pid_namespace(self) -> bool:
        return True

    def agent_gpu_processes(self) -> dict[int, int]:
        return {0: 1}


def test_a_load_that_just_ended_before_the_agent_started_is_not_taken_for_a_hidden_process() -> (
    None
):
    ended = InUseWatch(_Readings([_use(util=100)], [_use(util=0)]))
    assert ended.take_baseline() == {}
    still = InUseWatch(_Readings([_use(util=100)], [_use(util=100)]))
    assert list(still.take_baseline()) == [0]


def test_the_watch_names_a_process_that_appears_during_a_check_and_not_the_agent_itself() -> None:
    me = GpuProcess(pid=os.getpid(), used_memory_bytes=2 * GIB)
    watch = InUseWatch(_Readings([_use()], [_use(me)], [_use(me, TRAIN)]))
    assert watch.take_baseline() == {}
    with watch.during() as seen:
        watch.tick()
    assert seen.before == {}
    assert [p.pid for p in seen.during[0].processes] == [531]


def test_with_the_hosts_pids_the_agents_own_context_at_start_is_its_own() -> None:
    # run_checks called by a process that already holds the GPU (a test, a wrapper's own code)
    ownership = Ownership(started=False, comparable=True, own=frozenset({700}))
    assert foreign_use(_use(AGENT, used=3 * GIB), ownership) is None
    busy = foreign_use(_use(AGENT, TRAIN), ownership)
    assert busy is not None and busy.processes == (TRAIN,)
