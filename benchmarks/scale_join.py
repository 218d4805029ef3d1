"""Nodes joining after the last run (`--join N` of benchmarks/operator_scale.py): each added to the
gated pool and timed to its verdict on the node (label gpuval.dev/verdict): detection, the batch
window, pod, stand-in agent, node action."""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

from gpuval_devtools.controlplane import Cluster, GpuNode
from scale_figures import rss_kib


def node_verdicts(cluster: Cluster, names: list[str]) -> dict[str, str]:
    out = cluster.kubectl(
        "get",
        "nodes",
        *names,
        "-o",
        "jsonpath={range .items[*]}{.metadata.name} {.metadata.labels.gpuval\\.dev/verdict}\n{end}",
    ).stdout
    found = {}
    for line in out.splitlines():
        name, _, verdict = line.partition(" ")
        if verdict:
            found[name] = verdict
    return found


async def measure_join(cluster: Cluster, count: int, op_pid: int) -> dict[str, Any]:
    """Adds `count` nodes to the gated pool and times each one to its verdict on the node."""
    names = [f"scale-join-{i:03d}" for i in range(count)]
    created = time.monotonic()
    cluster.add_nodes(
        [GpuNode(name=n, labels={"gpuval.dev/scale": "yes"}) for n in names], wait_ready=False
    )
    ready_at: dict[str, float] = {}
    done_at: dict[str, float] = {}
    peak = 0
    while len(done_at) < count:
        await asyncio.sleep(0.25)
        now = time.monotonic()
        peak = max(peak, rss_kib(op_pid))
        if len(ready_at) < count:
            out = cluster.kubectl(
                "get",
                "nodes",
                *names,
                "-o",
                "jsonpath={range .items[*]}{.metadata.name} "
                "{.status.conditions[?(@.type=='Ready')].status}\n{end}",
            ).stdout
            for line in out.splitlines():
                name, _, status = line.partition(" ")
                if status == "True":
                    ready_at.setdefault(name, now)
        for name in node_verdicts(cluster, names):
            done_at.setdefault(name, now)
        print(
            f"\r{now - created:7.1f}s  joining nodes Ready {len(ready_at)}/{count}  "
            f"with a verdict {len(done_at)}/{count}",
            end="",
            file=sys.stderr,
            flush=True,
        )
        if now - created > 600:
            missing = sorted(set(names) - set(done_at))
            raise TimeoutError(f"joining nodes without a verdict after 600 s: {missing}")
    print(file=sys.stderr)
    from_create = sorted(done_at[n] - created for n in names)
    from_ready = sorted(done_at[n] - ready_at.get(n, created) for n in names)
    return {
        "joinNodes": count,
        "joinVerdictFromCreateSecondsMedian": round(from_create[count // 2], 2),
        "joinVerdictFromCreateSecondsMax": round(from_create[-1], 2),
        "joinVerdictFromReadySecondsMedian": round(from_ready[count // 2], 2),
        "joinVerdictFromReadySecondsMax": round(from_ready[-1], 2),
        "operatorPeakRssDuringJoinMiB": round(peak / 1024, 1),
    }
