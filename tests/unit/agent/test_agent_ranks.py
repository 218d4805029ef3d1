"""The agent's one rank-process manager (the NCCL check and the fabric): deadlines, kept output,
cleanup."""

from __future__ import annotations

import importlib.util
import os
import sys
import time

import pytest

from gpuval_agent.backends.cuda import all_reduce_processes
from gpuval_agent.backends.ranks import RankGroup, run_ranks

_HANG = (
    "import sys, time; print('NCCL INFO rank {r} comm 0x1 nRanks 2', flush=True); time.sleep(60)"
)
_OK = "print('done')"
_FAIL = "import sys; print('NCCL WARN boom', flush=True); sys.exit(3)"


def _command(code: str, rank: int) -> list[str]:
    return [sys.executable, "-c", code.format(r=rank)]


def test_ranks_that_finish_are_ok_and_keep_no_output() -> None:
    run = run_ranks([_command(_OK, r) for r in range(2)], [dict(os.environ)] * 2, 30)
    assert run.ok and run.returncodes == [0, 0] and run.log_tail == ""


def test_a_hang_times_out_kills_every_rank_and_keeps_each_ranks_output() -> None:
    run = run_ranks([_command(_HANG, r) for r in range(2)], [dict(os.environ)] * 2, 1.5)
    assert run.timed_out and not run.ok
    assert all(code is not None and code < 0 for code in run.returncodes)  # killed by a signal
    assert "NCCL INFO rank 0" in run.log_tail and "NCCL INFO rank 1" in run.log_tail
    assert run.seconds < 30


def test_a_failing_rank_ends_the_run_without_waiting_for_the_deadline() -> None:
    commands = [_command(_FAIL, 0), _command(_HANG, 1)]
    run = run_ranks(commands, [dict(os.environ)] * 2, 120, grace_seconds=0.5)
    assert not run.timed_out and not run.ok
    assert run.returncodes[0] == 3
    assert "NCCL WARN boom" in run.log_tail
    assert run.seconds < 60


_GATED = (
    "import sys, time; started = time.time(); line = sys.stdin.readline().strip(); "
    "sys.exit(0 if line == 'go' else 5)"
)


def test_a_gated_group_waits_for_go_before_its_work_and_then_succeeds() -> None:
    group = RankGroup([_command(_GATED, r) for r in range(2)], [dict(os.environ)] * 2, gated=True)
    time.sleep(0.3)
    assert all(p.poll() is None for p in group.processes)  # held at the gate
    group.go()
    run = group.wait(30)
    assert run.ok and run.returncodes == [0, 0]


def test_cancelling_a_gated_group_ends_every_rank() -> None:
    group = RankGroup([_command(_GATED, r) for r in range(2)], [dict(os.environ)] * 2, gated=True)
    group.cancel()
    assert all(p.returncode is not None for p in group.processes)


_DIES = (
    "import sys; print('NCCL INFO rank {r} init', flush=True); "
    "print('RuntimeError: CUDA error: invalid device ordinal', flush=True); sys.exit(1)"
)


def test_a_failed_run_names_the_rank_that_died_how_and_its_last_words() -> None:
    commands = [_command(_HANG, 0), _command(_DIES, 1)]
    run = run_ranks(commands, [dict(os.environ)] * 2, 120, grace_seconds=0.5)
    text = run.describe_failure(["rank 0 (CUDA device 0)", "rank 1 (CUDA device 1)"])
    assert text.startswith("rank 1 (CUDA device 1) died with exit code 1: RuntimeError: CUDA ")
    assert "invalid device ordinal" in text and "\n" not in text
    assert text.endswith("the others were stopped (rank 0: signal SIGKILL)")


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="torch is installed")
def test_the_nccl_checks_ranks_are_the_rank_processes_and_a_rank_that_cannot_start_is_named() -> (
    None
):
    outcome = all_reduce_processes([0, 1], [1 << 20], 5, 60)
    assert not outcome.timed_out
    assert outcome.error is not None
    assert outcome.error.startswith(
        "rank 0 (CUDA device 0) died with exit code 1: ModuleNotFoundError: No module named 'torch'"
    )
    assert (
        outcome.log_tail is not None and "gpuval_agent/backends/rankprocess.py" in outcome.log_tail
    )
