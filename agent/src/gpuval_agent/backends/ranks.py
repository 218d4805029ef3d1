"""Start one process per rank, wait with a deadline, keep the ranks' output when things go wrong.

A group can be started early and held at a gate (each rank blocks reading "go" from its stdin),
so the ranks' interpreter start and imports overlap earlier checks instead of adding to the
suite's wall time. Kept free of torch so the timeouts and log handling are tested on CPU.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

# NVLink SHARP/multicast stays off in every rank process: on shared hosts a multicast fault can
# take the GPUs out.
SAFE_NCCL_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
# The timed all-reduces are replayed from a CUDA graph (torch_collective). With NCCL's graph
# mixing support on (its default), every graph launch also orders itself against non-captured NCCL
# work: on 2 H200s that cost a third of the busbw at 1 MiB (58.5 against 88.9 GB/s, nccl-tests
# 71.1). NCCL allows turning it off when a communicator never has captured and non-captured
# work outstanding at once; the agent's timing ends every replay in a synchronize, so it never
# does. The person's own setting wins.
TIMING_NCCL_ENV = {"NCCL_GRAPH_MIXING_SUPPORT": "0"}
_GRACE_SECONDS = 10.0  # after one rank fails, how long the others get to notice and exit
_TAIL_PER_RANK = 3000
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


class RankGroup:
    """One process per rank, each in its own process group (a hung rank and whatever it started
    are killed together; only these processes are ever signalled)."""

    def __init__(
        self, commands: list[list[str]], environments: list[dict[str, str]], gated: bool = False
    ) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="gpuval-ranks-")
        self.logs = [Path(self._tmp.name) / f"rank{i}.log" for i in range(len(commands))]
        self.gated = gated
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

    def go(self) -> None:
        """Open the gate: every rank reads 'go' and starts its work."""
        for process in self.processes:
            if process.stdin is not None:
                with contextlib.suppress(BrokenPipeError, OSError):
                    process.stdin.write(GO)
                    process.stdin.close()

    def wait(self, timeout_seconds: float, grace_seconds: float = _GRACE_SECONDS) -> RankRun:
        started = time.monotonic()
        deadline = started + timeout_seconds
        run = RankRun()
        first_failure: float | None = None
        while True:
            codes = [p.poll() for p in self.processes]
            if all(code is not None for code in codes):
                break
            now = time.monotonic()
            if first_failure is None and any(code not in (None, 0) for code in codes):
                first_failure = now
            if now >= deadline:
                run.timed_out = True
                break
            if first_failure is not None and now - first_failure > grace_seconds:
                break
            time.sleep(0.05)
        self.kill()
        run.returncodes = [p.returncode for p in self.processes]
        run.seconds = time.monotonic() - started
        if not run.ok:
            run.last_lines = [last_line(log) for log in self.logs]
            run.log_tail = "\n".join(
                f"--- rank {i} (exit {p.returncode}) ---\n"
                + log.read_text(errors="replace")[-_TAIL_PER_RANK:]
                for i, (p, log) in enumerate(zip(self.processes, self.logs, strict=True))
            )
        self._tmp.cleanup()
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

    def cancel(self) -> None:
        """Stop a group that will not be used; closing stdin lets gated ranks exit by themselves."""
        self.kill()
        self._tmp.cleanup()


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
