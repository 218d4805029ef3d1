"""CPU time by process: the local control plane's components, the operator and the benchmark
itself (whose stand-in agents run in it), read from /proc as `operator_scale.rss_kib` reads
memory, so a phase's wall time on this shared 2-core machine can be put down to who used the
cores. Linux only, like the rest of the benchmark.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")
# The binaries kwokctl's binary runtime starts (each under its component's name in the
# cluster's directory, kwok's as kwok-controller).
COMPONENTS = frozenset(
    {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok-controller"}
)


def cpu_seconds(pid: int) -> float | None:
    """User and system time of `pid` so far; None once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # After the command name in parentheses (which may hold spaces): state is field 3 of
    # proc(5), utime and stime fields 14 and 15.
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_SECOND


def cluster_pids(marker: str) -> dict[str, int]:
    """The control plane's processes whose command line holds `marker` (the cluster's name is in
    every component's paths), by component."""
    found: dict[str, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if marker.encode() not in b" ".join(argv):
            continue
        binary = Path(argv[0].decode(errors="replace")).name
        if binary in COMPONENTS:
            found[binary] = int(entry.name)
    return found


@dataclass
class CpuSampler:
    """Samples the processes' CPU time (`sample`, as often as the caller likes) and gives the
    CPU seconds each used between two moments (`between`)."""

    pids: dict[str, int]
    samples: list[tuple[float, dict[str, float]]] = field(default_factory=list)

    def sample(self) -> None:
        taken = {name: cpu_seconds(pid) for name, pid in self.pids.items()}
        self.samples.append((time.time(), {k: v for k, v in taken.items() if v is not None}))

    def between(self, start: float, end: float) -> dict[str, float]:
        """CPU seconds by process from the last sample at or before `start` to the first at or
        after `end` (epoch seconds); empty when the samples do not span them."""
        before = [s for s in self.samples if s[0] <= start]
        after = [s for s in self.samples if s[0] >= end]
        if not before or not after:
            return {}
        (_, first), (_, last) = before[-1], after[0]
        used = {k: round(last[k] - first[k], 1) for k in first if k in last}
        return dict(sorted(used.items(), key=lambda item: -item[1]))
