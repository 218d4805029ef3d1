"""Which processes on a GPU are not the agent's own. Pure: NVML's readings and what the agent
knows of its own processes come in (gpuval_agent.watch reads them), decisions go out.

NVML lists each GPU's compute processes by the host's PID. Whether those PIDs name processes the
agent can see depends on where it runs, so three rules, each sound where it applies:

- With the host's PID namespace (bare metal, a pod with hostPID), a listed PID is the agent's
  exactly when it is the agent's process or one it started (`Ownership.own`); every other is
  foreign.
- Without it (a pod without hostPID), before the agent's first CUDA context (its snapshot at
  start, `Ownership.started` False) no process on a GPU is the agent's: every listed process is
  foreign, and stays known as foreign for the run (`Ownership.known_foreign`). Later, the agent's
  PIDs cannot be told from NVML's: a GPU is busy when it lists more compute processes than the
  agent may run on it (itself and its rank processes, `Ownership.allowed`), and every candidate
  is named (`Busy.exact` False).
- In the snapshot, either way, a GPU that computes (utilization) or holds memory with no process
  listed is busy too: its process lives in a PID namespace NVML does not show the agent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from gpuval_agent.backends.base import GpuProcess, GpuUse

# Before the agent's first context: a GPU busy this share of NVML's sample period computes.
BUSY_UTILIZATION_PERCENT = 10
# Before the agent's first context: memory held beyond what the listed processes hold, more than
# the driver's own reservation (0.65 GB of 141 GB on an idle H200): a process NVML does not list.
HIDDEN_MEMORY_FRACTION = 0.05
HIDDEN_MEMORY_BYTES = 4 << 30
_GIB = float(1 << 30)
# Out-of-memory as CUDA, torch, NCCL and cuda-python say it.
_OOM_MARKERS = ("out of memory", "outofmemory", "cuda_error_out_of_memory")


@dataclass(frozen=True, slots=True)
class Ownership:
    """What the agent knows of its own processes at one reading."""

    started: bool  # the agent (or a process it started) may hold a CUDA context by now
    comparable: bool  # NVML's PIDs name processes of the agent's PID namespace
    own: frozenset[int] = frozenset()  # listed PIDs that are the agent's (comparable only)
    allowed: Mapping[int, int] = field(default_factory=dict)  # per GPU, the agent's most
    known_foreign: frozenset[int] = frozenset()  # PIDs listed before the agent's first context


@dataclass(frozen=True, slots=True)
class Busy:
    """A GPU that a process other than the agent's uses, with what shows it."""

    gpu: int
    processes: tuple[GpuProcess, ...] = ()
    exact: bool = True  # False: one or more of `processes` is the agent's own, not told which
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    note: str = ""  # how it was told where NVML listed no process, or why it is not exact


def _hidden_use(use: GpuUse) -> str:
    """A GPU busy with no process listed (only judged before the agent's first context)."""
    utilization = use.utilization_percent
    if not use.processes and utilization is not None and utilization >= BUSY_UTILIZATION_PERCENT:
        return (
            f"it computes ({utilization} % utilization) with no process NVML lists "
            "to the agent (another PID namespace)"
        )
    if use.memory_used_bytes is None or use.memory_total_bytes is None:
        return ""
    listed = sum(p.used_memory_bytes or 0 for p in use.processes)
    hidden = use.memory_used_bytes - listed
    if hidden > max(HIDDEN_MEMORY_BYTES, HIDDEN_MEMORY_FRACTION * use.memory_total_bytes):
        return (
            f"{hidden / _GIB:.1f} GiB of its memory is held with no process NVML lists to the "
            "agent (another PID namespace)"
        )
    return ""


def foreign_use(use: GpuUse, ownership: Ownership) -> Busy | None:
    """The GPU as busy, or None when nothing but the agent uses it (module docstring: rules)."""

    def busy(processes: list[GpuProcess], exact: bool = True, note: str = "") -> Busy:
        return Busy(
            gpu=use.gpu,
            processes=tuple(processes),
            exact=exact,
            memory_used_bytes=use.memory_used_bytes,
            memory_total_bytes=use.memory_total_bytes,
            note=note,
        )

    if ownership.comparable or not ownership.started:
        # Exact: the host's PIDs, or nothing of the agent's on the GPUs yet.
        found = [p for p in use.processes if not ownership.comparable or p.pid not in ownership.own]
        if found:
            return busy(found)
        hidden = "" if ownership.started else _hidden_use(use)
        return busy([], note=hidden) if hidden else None
    known = [p for p in use.processes if p.pid in ownership.known_foreign]
    rest = [p for p in use.processes if p.pid not in ownership.known_foreign]
    allowed = ownership.allowed.get(use.gpu, 1)
    if len(rest) > allowed:
        note = (
            f"NVML lists {len(rest)} compute processes where the agent runs at most {allowed}; "
            "without the host's PID namespace (hostPID) it cannot tell which are its own"
        )
        return busy(known + rest, exact=False, note=note)
    return busy(known) if known else None


def merge(first: Busy | None, later: Busy) -> Busy:
    """Two readings of one GPU as one: every process seen, each with the most memory it held."""
    if first is None:
        return later
    processes = {p.pid: p for p in first.processes}
    for process in later.processes:
        seen = processes.get(process.pid)
        if seen is None or (process.used_memory_bytes or 0) > (seen.used_memory_bytes or 0):
            processes[process.pid] = process
    return replace(
        first,
        processes=tuple(processes.values()),
        exact=first.exact and later.exact,
        memory_used_bytes=max(first.memory_used_bytes or 0, later.memory_used_bytes or 0) or None,
        note=first.note or later.note,
    )


def _process(process: GpuProcess) -> str:
    parts = [f"PID {process.pid}"]
    details = []
    if process.name:
        details.append(process.name)
    if process.used_memory_bytes is not None:
        details.append(f"{process.used_memory_bytes / _GIB:.1f} GiB")
    if process.sm_percent:
        details.append(f"{process.sm_percent} % of the SMs")
    if details:
        parts.append(f"({', '.join(details)})")
    return " ".join(parts)


def describe(busy: Busy) -> str:
    """'PID 531 (python3 train.py, 3.1 GiB, 88 % of the SMs); 3.7 of 140.4 GiB in use', one line."""
    text = "; ".join(_process(p) for p in busy.processes) or "a process NVML does not list"
    if not busy.exact:
        text = f"one or more of {text}"
    if busy.memory_used_bytes is not None and busy.memory_total_bytes:
        text += (
            f"; {busy.memory_used_bytes / _GIB:.1f} of {busy.memory_total_bytes / _GIB:.1f} GiB "
            "of the GPU's memory in use"
        )
    if busy.note:
        text += f" ({busy.note})"
    return text


def is_out_of_memory(text: str | None) -> bool:
    """Whether an error's text is CUDA running out of GPU memory."""
    folded = (text or "").lower().replace(" ", "")
    return any(marker.replace(" ", "") in folded for marker in _OOM_MARKERS)
