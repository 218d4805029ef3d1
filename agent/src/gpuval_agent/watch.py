"""Watches the GPUs for processes other than the agent's, before and during each load check.

The effects beside gpuval_agent.inuse's rules: NVML's processes through the backend (or the
fabric's executor), the agent's own process tree from /proc. The agent takes a snapshot before
its first CUDA context (`take_baseline`), then each load check runs inside `during()`: one reading
as it starts (the GPUs found busy are left out of it), one at every telemetry tick while it runs
(`tick`, from the sampler's thread) and one as it ends.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

from gpuval_agent.backends.base import GpuProcess, GpuUse
from gpuval_agent.inuse import Busy, Ownership, foreign_use, merge

_NAME_CHARS = 120
_CONFIRM_SECONDS = 1.5
_MAX_DEPTH = 64


class UseSource(Protocol):
    """What reads the GPUs' processes: a Backend, or the fabric's executor."""

    def gpu_use(self) -> list[GpuUse] | None: ...

    def host_pid_namespace(self) -> bool: ...

    def agent_gpu_processes(self) -> dict[int, int]: ...


def _parent(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    try:
        return int(stat.rsplit(")", 1)[1].split()[1])
    except (IndexError, ValueError):
        return None


def descends_from(pid: int, root: int) -> bool:
    """Whether `pid` is `root` or a process it started (directly or not), per /proc."""
    for _ in range(_MAX_DEPTH):
        if pid == root:
            return True
        parent = _parent(pid)
        if parent is None or parent <= 1:
            return False
        pid = parent
    return False


def command_line(pid: int) -> str | None:
    """A process's command line from /proc (this namespace's), cut to one short line."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    text = " ".join(part.decode(errors="replace") for part in raw.split(b"\0") if part)
    return text[:_NAME_CHARS] or None


@dataclass
class Seen:
    """What one load check's readings found: busy as it started, and busy while it ran."""

    before: dict[int, Busy] = field(default_factory=dict)
    during: dict[int, Busy] = field(default_factory=dict)


class InUseWatch:
    """The agent's watch over its GPUs (module docstring)."""

    def __init__(self, source: UseSource, root: int | None = None) -> None:
        self._source = source
        self._root = os.getpid() if root is None else root
        self.comparable = source.host_pid_namespace()
        self.baseline: dict[int, Busy] = {}
        self._started = False
        self._known_foreign: frozenset[int] = frozenset()
        self._own: dict[int, bool] = {}
        self._open: list[Seen] = []
        self._lock = threading.Lock()
        self.unreadable = False  # NVML could not list the processes (nothing is judged busy)

    def _is_own(self, pid: int) -> bool:
        if pid not in self._own:
            self._own[pid] = descends_from(pid, self._root)
        return self._own[pid]

    def _named(self, process: GpuProcess) -> GpuProcess:
        # A PID names a process of this namespace only when it is the host's: elsewhere the
        # name would be some other process's of the agent's container.
        if not self.comparable:
            return replace(process, name=None)
        return replace(process, name=command_line(process.pid) or process.name)

    def read(self) -> dict[int, Busy]:
        """One reading of every GPU, judged: the GPUs another process uses."""
        uses = self._source.gpu_use()
        if uses is None:
            self.unreadable = True
            return {}
        listed = {p.pid for use in uses for p in use.processes}
        ownership = Ownership(
            started=self._started,
            comparable=self.comparable,
            own=frozenset(p for p in listed if self.comparable and self._is_own(p)),
            allowed=self._source.agent_gpu_processes(),
            known_foreign=self._known_foreign,
        )
        found: dict[int, Busy] = {}
        for use in uses:
            busy = foreign_use(use, ownership)
            if busy is not None:
                found[use.gpu] = replace(
                    busy, processes=tuple(self._named(p) for p in busy.processes)
                )
        return found

    def take_baseline(self) -> dict[int, Busy]:
        """The snapshot before the agent's first CUDA context: every listed process is foreign,
        and stays known as foreign for the run. A GPU busy with no process listed (utilization
        or memory alone) is read again a moment later: NVML's utilization covers up to a second
        past, so a workload that ended just before the agent started is not taken for one."""
        with self._lock:
            found = self.read()
            if any(not busy.processes for busy in found.values()):
                time.sleep(_CONFIRM_SECONDS)
                again = self.read()
                found = {
                    gpu: busy
                    for gpu, busy in found.items()
                    if busy.processes or (gpu in again and not again[gpu].processes)
                }
            self.baseline = found
            self._known_foreign = frozenset(
                p.pid for busy in self.baseline.values() for p in busy.processes
            )
            self._started = True
            return dict(self.baseline)

    def _feed(self, found: dict[int, Busy]) -> None:
        for seen in self._open:
            for gpu, busy in found.items():
                seen.during[gpu] = merge(seen.during.get(gpu), busy)

    def tick(self) -> None:
        """A reading for the load checks running now (nothing is read when none runs)."""
        with self._lock:
            if self._open:
                self._feed(self.read())

    @contextmanager
    def during(self) -> Iterator[Seen]:
        """One load check: `before` is filled as it starts, `during` until it ends."""
        seen = Seen()
        with self._lock:
            self._started = True
            seen.before = self.read()
            self._open.append(seen)
        try:
            yield seen
        finally:
            with self._lock:
                self._feed(self.read())
                self._open.remove(seen)
