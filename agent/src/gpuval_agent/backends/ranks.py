"""Start one process per rank, wait with a deadline, keep the ranks' output when things go wrong.

Kept free of torch so the timeout and log handling is tested on CPU with ordinary processes.
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

_GRACE_SECONDS = 10.0  # after one rank fails, how long the others get to notice and exit
_TAIL_PER_RANK = 3000


@dataclass
class RankRun:
    returncodes: list[int | None] = field(default_factory=list)
    timed_out: bool = False
    log_tail: str = ""
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.timed_out and all(code == 0 for code in self.returncodes)


def run_ranks(
    commands: list[list[str]],
    environments: list[dict[str, str]],
    timeout_seconds: float,
    grace_seconds: float = _GRACE_SECONDS,
) -> RankRun:
    """Run every command (rank i gets environments[i] as its whole environment) and wait.

    Each rank runs in its own process group so a hung rank and anything it started are killed
    together; only these processes are ever signalled.
    """
    started = time.monotonic()
    deadline = started + timeout_seconds
    with tempfile.TemporaryDirectory(prefix="gpuval-ranks-") as tmp:
        logs = [Path(tmp) / f"rank{i}.log" for i in range(len(commands))]
        processes = []
        for command, environment, log in zip(commands, environments, logs, strict=True):
            with open(log, "wb") as sink:
                processes.append(
                    subprocess.Popen(  # our own worker, argv list
                        command,
                        env=environment,
                        stdout=sink,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
        run = RankRun()
        first_failure: float | None = None
        while True:
            codes = [p.poll() for p in processes]
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
        for process in processes:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        run.returncodes = [p.returncode for p in processes]
        run.seconds = time.monotonic() - started
        if not run.ok:
            run.log_tail = "\n".join(
                f"--- rank {i} (exit {p.returncode}) ---\n"
                + log.read_text(errors="replace")[-_TAIL_PER_RANK:]
                for i, (p, log) in enumerate(zip(processes, logs, strict=True))
            )
    return run
