"""The agent's one rank-process manager: one process per rank (gpuval_agent.backends.rankprocess
for the NCCL check and the fabric), each in its own process group, told what to do on stdin and
answering in its own events file, waited for with a deadline, and killed with everything it
started (only the processes this agent started are ever signalled).

A group can be started early and hold still until its first command (the NCCL check's ranks
meet and check their sum during the burn, so their interpreter start and imports overlap it).
The ranks' output (NCCL_DEBUG=INFO) is kept in log files for a failure's log tail and the fabric's
transport reading. Kept free of torch so the timeouts and log handling are tested on CPU.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# NVLink SHARP/multicast stays off in every rank process: on shared hosts a multicast fault can
# take the GPUs out.
SAFE_NCCL_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
# The timed all-reduces are replayed from a CUDA graph (backends/torch/collective.py). With NCCL's
# graph mixing support on (its default), every graph launch also orders itself against non-captured
# NCCL work: on 2 H200s that cost a third of the busbw at 1 MiB (58.5 against 88.9 GB/s, nccl-tests
# 71.1). NCCL allows turning it off when a communicator never has captured and non-captured
# work outstanding at once; the agent's timing ends every replay in a synchronize, so it never
# does. The person's own setting wins.
TIMING_NCCL_ENV = {"NCCL_GRAPH_MIXING_SUPPORT": "0"}
_GRACE_SECONDS = 10.0  # after one rank fails, how long the others get to notice and exit
_TAIL_PER_RANK = 3000
_POLL = 0.05
GO = b"go\n"


@dataclass
class RankRun:
    returncodes: list[int | None] = field(default_factory=list)
    timed_out: bool = False
    log_tail: str = ""
    seconds: float = 0.0

    last_lines: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.timed_out and all(code == 0 for code in self.returncodes)

    def describe_failure(self, labels: list[str]) -> str:
        """Which rank died first and how, on one line: 'rank 1 (CUDA device 1) died with exit code
        1: <its last log line>; the others were stopped (rank 0: signal SIGKILL)'."""
        failed = [i for i, code in enumerate(self.returncodes) if code not in (0, None)]
        if not failed:
            return "every rank exited 0 but the run did not finish"
        own = [i for i in failed if self.returncodes[i] != -signal.SIGKILL] or failed
        first = own[0]
        text = f"{labels[first]} died with {_how(self.returncodes[first])}"
        if first < len(self.last_lines) and self.last_lines[first]:
            text += f": {self.last_lines[first]}"
        others = [f"rank {i}: {_how(self.returncodes[i])}" for i in failed if i != first]
        if others:
            text += f"; the others were stopped ({', '.join(others)})"
        return text


@dataclass
class _Events:
    """One rank's events file, read as it grows: one JSON object a line, keyed by its "id"."""

    path: Path
    offset: int = 0
    partial: str = ""
    by_id: dict[int, dict[str, Any]] = field(default_factory=dict)

    def poll(self) -> None:
        if not self.path.exists():
            return
        with self.path.open() as handle:
            handle.seek(self.offset)
            text = handle.read()
            self.offset = handle.tell()
        lines = (self.partial + text).split("\n")
        self.partial = lines.pop()
        for line in lines:
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                if isinstance(event, dict) and isinstance(event.get("id"), int):
                    self.by_id[event["id"]] = event


class RankGroup:
    """One process per rank, each in its own process group (a hung rank and whatever it started
    are killed together).

    `gated`: stdin is a pipe the ranks read their commands from (the rank process's JSON lines, or
    `go`); otherwise it is closed. `logs`: where each rank's output goes (its events file beside
    it, `.events`); by default a temporary directory the group removes when it ends. `labels`
    name the ranks in a failure ('rank 1 (CUDA device 1)')."""

    def __init__(
        self,
        commands: list[list[str]],
        environments: list[dict[str, str]],
        gated: bool = False,
        *,
        logs: list[Path] | None = None,
        labels: list[str] | None = None,
    ) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="gpuval-ranks-") if logs is None else None
        if self._tmp is not None:
            logs = [Path(self._tmp.name) / f"rank{i}.log" for i in range(len(commands))]
        assert logs is not None
        self.logs = logs
        self.labels = labels or [f"rank {i}" for i in range(len(commands))]
        self.gated = gated
        self._events = [_Events(log.with_suffix(".events")) for log in logs]
        self.processes: list[subprocess.Popen[bytes]] = []
        for command, environment, log in zip(commands, environments, self.logs, strict=True):
            with open(log, "wb") as sink:
                self.processes.append(
                    subprocess.Popen(
                        command,
                        env=environment,
                        stdin=subprocess.PIPE if gated else subprocess.DEVNULL,
                        stdout=sink,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )

    def _write(self, data: bytes, close: bool = False) -> None:
        for process in self.processes:
            if process.stdin is not None:
                with contextlib.suppress(BrokenPipeError, OSError):
                    process.stdin.write(data)
                    process.stdin.flush()
                    if close:
                        process.stdin.close()

    def go(self) -> None:
        """Open the gate: every rank reads 'go' and starts its work."""
        self._write(GO, close=True)

    def send(self, command: dict[str, Any]) -> None:
        """One command to every rank (a JSON line on its stdin)."""
        self._write((json.dumps(command) + "\n").encode())

    def answers(
        self,
        step: int,
        deadline: float,
        stop: threading.Event | None = None,
        on_wait: Callable[[], None] | None = None,
    ) -> list[dict[str, Any]] | str:
        """Every rank's event for `step`; or why not, a sentence ('timeout', a rank's death).
        `on_wait` is called after every poll of the events (a progress reader: `latest`)."""
        stop = stop or threading.Event()
        while True:
            for events in self._events:
                events.poll()
            if on_wait is not None:
                on_wait()
            found = [e.by_id.get(step) for e in self._events]
            answered = [event for event in found if event is not None]
            # One rank's error ends the step: the others may be stuck in a collective with it.
            if len(answered) == len(found) or any("error" in event for event in answered):
                return answered
            dead = [
                i for i, p in enumerate(self.processes) if p.poll() is not None and found[i] is None
            ]
            if dead:
                return self.run(timed_out=False).describe_failure(self.labels)
            if time.monotonic() >= deadline:
                return "timeout"
            if stop.wait(_POLL):
                return "stopped by a signal"

    def latest(self, rank: int, event_id: int) -> dict[str, Any] | None:
        """The last event `rank` wrote under `event_id` (one it overwrites: progress), as of the
        last poll."""
        return self._events[rank].by_id.get(event_id)

    def run(self, timed_out: bool) -> RankRun:
        """What the ranks did so far: exit codes, last words, the log tail when not ok."""
        run = RankRun(returncodes=[p.poll() for p in self.processes], timed_out=timed_out)
        if not run.ok:
            run.last_lines = [last_line(log) if log.exists() else "" for log in self.logs]
            run.log_tail = "\n".join(
                f"--- rank {i} (exit {p.returncode}) ---\n"
                + (log.read_text(errors="replace")[-_TAIL_PER_RANK:] if log.exists() else "")
                for i, (p, log) in enumerate(zip(self.processes, self.logs, strict=True))
            )
        return run

    def wait(self, timeout_seconds: float, grace_seconds: float = _GRACE_SECONDS) -> RankRun:
        """Until every rank exits, the deadline, or `grace_seconds` after one failed; then every
        rank is killed and the group's files are removed."""
        started = time.monotonic()
        deadline = started + timeout_seconds
        timed_out = False
        first_failure: float | None = None
        while True:
            codes = [p.poll() for p in self.processes]
            if all(code is not None for code in codes):
                break
            now = time.monotonic()
            if first_failure is None and any(code not in (None, 0) for code in codes):
                first_failure = now
            if now >= deadline:
                timed_out = True
                break
            if first_failure is not None and now - first_failure > grace_seconds:
                break
            time.sleep(_POLL)
        self.kill()
        run = self.run(timed_out)
        run.seconds = time.monotonic() - started
        self.cleanup()
        return run

    def kill(self) -> None:
        for process in self.processes:
            if process.stdin is not None:
                with contextlib.suppress(OSError):
                    process.stdin.close()
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    def cleanup(self) -> None:
        """Remove the group's own temporary files (logs it was given stay)."""
        if self._tmp is not None:
            self._tmp.cleanup()

    def cancel(self) -> None:
        """Stop a group that will not be used; closing stdin lets gated ranks exit by themselves."""
        self.kill()
        self.cleanup()


def rank_command(group: str, spec: dict[str, Any]) -> list[str]:
    """The command line of one rank process; `group` names its group for ps."""
    return [
        sys.executable,
        "-m",
        "gpuval_agent.backends.rankprocess",
        "--group",
        group,
        "--spec",
        json.dumps(spec),
    ]


def _how(code: int | None) -> str:
    if code is None:
        return "no exit (still running)"
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


def last_line(log: Path) -> str:
    """The last meaningful line a rank wrote: its error, usually (NCCL INFO chatter skipped)."""
    lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    meaningful = [ln for ln in lines if " NCCL INFO " not in ln]
    return (meaningful or lines or [""])[-1][:300]


def run_ranks(
    commands: list[list[str]],
    environments: list[dict[str, str]],
    timeout_seconds: float,
    grace_seconds: float = _GRACE_SECONDS,
) -> RankRun:
    """Run every command (rank i gets environments[i] as its whole environment) and wait."""
    return RankGroup(commands, environments).wait(timeout_seconds, grace_seconds)
