"""Watches the GPUs for processes other than the agent's, before and during each load check.

The effects beside gpuval_agent.inuse's rules: NVML's processes through the backend (or the
fabric's executor), the agent's own process tree from /proc. The agent takes a snapshot before
its first CUDA context (`take_baseline`), then each check that uses CUDA runs inside `during()`:
one reading as it starts (the GPUs found busy are left out of a load check), a reading every
POLL_SECONDS on a thread of its own while it runs (`tick`), and one as it ends. Every process any
reading saw is kept, so another's CUDA context that lived for a moment between two readings a
second apart (another agent's start-up, a short job on a time-sliced GPU) is seen when it lived
longer than the poll's period.
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
# While a watched check runs, NVML is read this often: a CUDA context is seen when it lives at
# least this long (creating and dropping one takes ~0.3 s on an H200). One reading is a few NVML
# calls per GPU (benchmarks/inuse_poll_cost.py measures what it costs).
POLL_SECONDS = 0.1


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
    readings: int = 0  # how many readings of the GPUs the check had, its first and last included


class InUseWatch:
    """The agent's watch over its GPUs (module docstring)."""

    def __init__(
        self,
        source: UseSource,
        root: int | None = None,
        poll_seconds: float | None = POLL_SECONDS,
    ) -> None:
        self._source = source
        self._poll_seconds = poll_seconds  # None: no poll, only each check's first and last
        self._root = os.getpid() if root is None else root
        self.comparable = source.host_pid_namespace()
        self.baseline: dict[int, Busy] = {}
        self._started = False
        self._known_foreign: frozenset[int] = frozenset()
        self._own: dict[int, bool] = {}
        self._open: list[Seen] = []
        self._lock = threading.Lock()
        self._poller: tuple[threading.Thread, threading.Event] | None = None
        self.unreadable = False  # NVML could not list the processes (nothing is judged busy)
        self.poll_errors: list[str] = []  # what the poll could not read (the last few)

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
            seen.readings += 1
            for gpu, busy in found.items():
                seen.during[gpu] = merge(seen.during.get(gpu), busy)

    def tick(self) -> None:
        """A reading for the checks running now (nothing is read when none runs)."""
        with self._lock:
            if self._open:
                self._feed(self.read())

    def _poll(self, stop: threading.Event, period: float) -> None:
        while not stop.wait(period):
            try:
                self.tick()
            except Exception as error:  # a failed reading loses one reading, never the check
                self.poll_errors = [*self.poll_errors[-4:], f"{type(error).__name__}: {error}"]

    @property
    def polling(self) -> bool:
        """Whether the poll runs (while a watched check runs)."""
        return self._poller is not None

    def _start_poll(self) -> None:
        if self._poll_seconds is None or self._poller is not None:
            return
        stop = threading.Event()
        thread = threading.Thread(
            target=self._poll, args=(stop, self._poll_seconds), name="gpuval-inuse", daemon=True
        )
        self._poller = (thread, stop)
        thread.start()

    @staticmethod
    def _stop_poll(poller: tuple[threading.Thread, threading.Event] | None) -> None:
        if poller is not None:
            thread, stop = poller
            stop.set()
            thread.join(timeout=5)

    @contextmanager
    def during(self) -> Iterator[Seen]:
        """One check: `before` is filled as it starts, `during` until it ends (by the poll
        while it runs, and a last reading)."""
        seen = Seen(readings=1)
        with self._lock:
            self._started = True
            seen.before = self.read()
            self._open.append(seen)
            self._start_poll()
        try:
            yield seen
        finally:
            with self._lock:
                self._feed(self.read())
                self._open.remove(seen)
                poller = None if self._open else self._poller
                if poller is not None:
                    self._poller = None
            # Outside the lock: the poll's last reading may be waiting for it.
            self._stop_poll(poller)
