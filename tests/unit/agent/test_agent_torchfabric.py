"""The agent's rank processes on CPU, as the fabric executor drives them: commands, events,
deadlines, kills.

The rank processes here are small Python scripts that speak the rank processes' protocol (a
command per stdin line, an event per line in the events file), so what is tested is the agent's
side: gpuval_agent.backends.ranks and gpuval_agent.fabric.torchfabric, which never import torch.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import threading
import time
from pathlib import Path

import pytest

from gpuval_agent.backends.ranks import RankGroup
from gpuval_agent.fabric.coordinator import Roster
from gpuval_agent.fabric.steps import StepStatus
from gpuval_agent.fabric.torchfabric import TorchFabric, _report
from gpuval_api.fabric import FabricConfig

# A stand-in rank process: ready at once, then answers each command (or misbehaves, by its argv).
FAKE = """
import json, os, subprocess, sys, time
events, mode = sys.argv[1], sys.argv[2]
def emit(**event):
    with open(events, "a") as f:
        f.write(json.dumps(event) + "\\n")
if mode == "child":  # leaves a grandchild behind, as NCCL's helper threads' processes might
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    emit(id=0, ready=True, child=child.pid)
else:
    emit(id=0, ready=True)
for line in sys.stdin:
    command = json.loads(line)
    print("NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0", flush=True)
    if mode in ("hang", "child"):
        time.sleep(600)
    if mode == "die":
        print("RuntimeError: CUDA error: an illegal memory access", flush=True)
        sys.exit(3)
    if mode == "error":  # says why, then leaves: its partner stays stuck in the collective
        emit(id=command["id"], error="DistBackendError: NCCL error: remote process exited")
        sys.exit(3)
    emit(id=command["id"], sizes=[[1048576, 0.001]])
"""


def _generation(tmp_path: Path, modes: list[str]) -> RankGroup:
    script = tmp_path / "fake_rank.py"
    script.write_text(FAKE)
    logs = [tmp_path / f"gen0-gpu{i}.log" for i in range(len(modes))]
    commands = [
        [sys.executable, str(script), str(log.with_suffix(".events")), mode]
        for log, mode in zip(logs, modes, strict=True)
    ]
    labels = [f"local GPU {i}" for i in range(len(modes))]
    return RankGroup(commands, [dict(os.environ)] * len(modes), True, logs=logs, labels=labels)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/stat").read_text().split()[2]
    return status != "Z"


def test_every_ranks_answer_to_a_command_is_collected(tmp_path: Path) -> None:
    generation = _generation(tmp_path, ["ok", "ok"])
    stop = threading.Event()
    try:
        assert generation.answers(0, time.monotonic() + 30, stop) == [{"id": 0, "ready": True}] * 2
        generation.send({"op": "group", "id": 1})
        events = generation.answers(1, time.monotonic() + 30, stop)
        assert isinstance(events, list) and _report(events).sizes == [(1048576, 0.001)]
    finally:
        generation.kill()
    assert all(p.returncode is not None for p in generation.processes)


def test_a_hung_rank_times_out_and_the_kill_ends_it_with_everything_it_started(
    tmp_path: Path,
) -> None:
    generation = _generation(tmp_path, ["ok", "child"])
    stop = threading.Event()
    ready = generation.answers(0, time.monotonic() + 30, stop)
    assert isinstance(ready, list)
    grandchild = int(ready[1]["child"])
    generation.send({"op": "group", "id": 1})
    assert generation.answers(1, time.monotonic() + 1.0, stop) == "timeout"
    generation.kill()
    assert all(p.returncode is not None for p in generation.processes)
    deadline = time.monotonic() + 10
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(grandchild), "the rank process's own child outlived the kill"


def test_a_rank_that_dies_is_named_with_its_last_words(tmp_path: Path) -> None:
    generation = _generation(tmp_path, ["ok", "die"])
    stop = threading.Event()
    try:
        assert isinstance(generation.answers(0, time.monotonic() + 30, stop), list)
        generation.send({"op": "group", "id": 1})
        outcome = generation.answers(1, time.monotonic() + 30, stop)
    finally:
        generation.kill()
    assert outcome == (
        "local GPU 1 died with exit code 3: RuntimeError: CUDA error: an illegal memory access"
    )


def test_one_ranks_error_ends_the_step_without_waiting_for_its_stuck_partner(
    tmp_path: Path,
) -> None:
    generation = _generation(tmp_path, ["hang", "error"])
    stop = threading.Event()
    try:
        assert isinstance(generation.answers(0, time.monotonic() + 30, stop), list)
        generation.send({"op": "group", "id": 1})
        events = generation.answers(1, time.monotonic() + 60, stop)
    finally:
        generation.kill()
    assert isinstance(events, list)
    report = _report(events)
    assert (report.status, report.error) == (
        StepStatus.ERROR,
        "DistBackendError: NCCL error: remote process exited",
    )


@pytest.mark.parametrize(
    ("events", "status", "error"),
    [
        (
            [{"id": 1, "error": "DistNetworkError: timed out\n  connecting", "unreachable": True}],
            StepStatus.UNREACHABLE,
            "DistNetworkError: timed out connecting",
        ),
        (
            [{"id": 1, "sumOk": True}, {"id": 1, "error": "DistBackendError: NCCL error"}],
            StepStatus.ERROR,
            "DistBackendError: NCCL error",
        ),
        (
            [{"id": 1, "sumOk": True}, {"id": 1, "sumOk": False}],
            StepStatus.WRONG_SUM,
            "the all-reduce gave a wrong sum on this node",
        ),
    ],
)
def test_a_ranks_bad_news_becomes_the_steps_status(
    events: list[dict[str, object]], status: StepStatus, error: str
) -> None:
    report = _report(events)
    assert (report.status, report.error) == (status, error)


def test_a_pair_figure_is_local_rank_0s() -> None:
    report = _report(
        [
            {"id": 3, "pair": [2, 5], "seconds": 0.5, "sumOk": True},
            {"id": 3, "pair": [2, 5], "seconds": 0.4, "sumOk": True},
        ]
    )
    assert report.ok and [(p.a, p.b, p.seconds) for p in report.pairs] == [(2, 5, 0.5)]


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="torch is installed")
def test_without_torch_the_real_ranks_fail_at_start_naming_why(tmp_path: Path) -> None:
    executor = TorchFabric(FabricConfig(), ("127.0.0.1", 29500), "g", threading.Event(), gpus=1)
    try:
        executor.setup(Roster(nodes=["a"], infos=[{"gpus": 1}]), 0)
        report = executor.start(0, time.monotonic() + 60)
    finally:
        executor.close()
    assert report.status is StepStatus.ERROR
    assert report.error is not None and "No module named 'torch'" in report.error
    assert "local GPU 0 died with exit code 1" in report.error
    assert json.dumps(executor.nccl_env())  # recorded even when nothing ran
