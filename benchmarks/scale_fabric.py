"""The fabric side of benchmarks/operator_scale.py (`--fabric`): racks, injected faults, stand-in
fabric agents, and the fabric figures.

Racks: node i of N is in rack i // (N / racks) (label RACK_LABEL, spec.fabric.topologyKey), so a
rack's nodes are contiguous in name order and the groups inside it are known in advance; the
faults are placed where the plan puts them (two slow nodes side by side in one group, a slow link
between two ranks paired in the first round, a slow path between the representatives of racks 2
and 3, who meet in the first cross-domain group's first round).

The stand-in fabric agents run the REAL agent code for each group once all its pods are Running
(kwok runs no containers): `gpuval_agent.fabric.driver.run_fabric` per rank, in threads, meeting
over loopback at rank 0's coordinator, with the simulated backend's fabric double
(`gpuval_agent.fabric.simulated.SimulatedFabric`) configured with the node's injected faults, so
every figure, pair round, confirmation and verdict comes out of the same code a real agent runs.
Each rank but 0 first reads rank 0's pod from the API server, as a real rank does for its
address (GPUVAL_FABRIC_MASTER_POD, gpuval_agent.fabric.locate); then the group meets on
loopback. Each member's `status.fabric` is written as the in-cluster agent writes it
(`build_fabric_status`), then its pod ends (Succeeded when the node passed, Failed otherwise).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import statistics
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from apiserver_profile import ApiserverProfiler
from apiserver_requests import ApiSampler
from fabric_pipeline import PodTimes, longest_opening_gap, occupancy, stage_waits
from gpuval_agent.backends.simulated.config import SimulationConfig
from gpuval_agent.fabric.driver import run_fabric
from gpuval_agent.fabric.frontend import plan_from_env
from gpuval_agent.fabric.simulated import BASE_BUSBW_GBPS, SimulatedFabric
from gpuval_api import keys
from gpuval_api.env import AgentEnv
from gpuval_api.fabric import (
    FabricConfig,
    FabricResult,
    FabricSpec,
    build_fabric_status,
    pair_rounds,
)
from gpuval_api.result import Verdict
from gpuval_devtools.controlplane import free_port
from gpuval_devtools.gangidle import gang_idle
from gpuval_devtools.launch import AGENT_NAMESPACE
from gpuval_operator.fabric.plan import CROSS_PREFIX, cross_groups, domain_groups
from gpuval_operator.kube import KubeClient, q
from proc_cpu import CpuSampler

RACK_LABEL = "topology.gpuval.dev/rack"
GROUP_LABEL = keys.LABEL_FABRIC_GROUP
RUN_LABEL = keys.LABEL_RUN
REPORTS = "/apis/gpuval.dev/v1alpha1/gpunodereports"
GROUP_SIZE = 8
# What the agents measure: the group sweep 256 MiB .. 1 GiB, pairs of 1 GiB, as in the
# integration tests (the double computes its figures, so sizes cost nothing here). The gang and
# init limits are stretched: on a shared 2-core machine the scheduler and kwok can take minutes
# to start a group's last pods, and the operator gives a group up as rank 0's agent would.
FABRIC_SPEC: dict[str, Any] = {
    "groupSize": GROUP_SIZE,
    "topologyKey": RACK_LABEL,
    "minBytes": 1 << 28,
    "maxBytes": 1 << 30,
    "pairBytes": 1 << 30,
    "iterations": 20,
    "timeouts": {"gangSeconds": 1800, "initSeconds": 1200, "phaseSeconds": 120},
}


def rack_of(index: int, nodes: int, racks: int) -> str:
    return f"rack-{index * racks // nodes:02d}"


@dataclass
class Injected:
    """The faults put into the fleet, and what the fabric phase should name (nothing else)."""

    faults: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # node -> its faults
    nodes: dict[str, str] = field(default_factory=dict)  # node -> the reason it should get
    paths: set[tuple[str, tuple[str, ...]]] = field(default_factory=set)  # (reason, domains)
    described: list[str] = field(default_factory=list)

    def add(self, node: str, fault: dict[str, Any]) -> None:
        self.faults.setdefault(node, []).append(fault)


def inject(names: Sequence[str], racks: int) -> Injected:
    """Slow nodes, a slow link, a slow domain with a slow node inside, a slow path between two
    domains (module docstring), placed in racks spread over the fleet."""
    per = len(names) // racks
    members = {
        r: [n for i, n in enumerate(names) if i * racks // len(names) == r] for r in range(racks)
    }

    def at(rack: int, index: int) -> str:
        return members[rack % racks][index % len(members[rack % racks])]

    found = Injected()
    slow = at(racks // 8, per // 2)
    found.add(slow, {"kind": "fabric-slow-node", "factor": 0.85})
    found.nodes[slow] = "FabricSlowNode"
    found.described.append(f"slow node {slow} (0.85: one NIC of 8 down)")
    side = [at(2 * racks // 8, 17), at(2 * racks // 8, 18)]  # ranks 1 and 2 of one group of 8
    for node in side:
        found.add(node, {"kind": "fabric-slow-node", "factor": 0.8})
        found.nodes[node] = "FabricSlowNode"
    found.described.append(f"two slow nodes side by side {side[0]}, {side[1]} (0.8)")
    a, b = at(3 * racks // 8, 2), at(3 * racks // 8, 3)  # ranks 2 and 3: a first-round pair
    found.add(a, {"kind": "fabric-slow-link", "peer": b, "factor": 0.6})
    found.nodes[a] = found.nodes[b] = "FabricSlowLink"
    found.described.append(f"slow link {a}-{b} (0.6)")
    domain = 5 * racks // 8
    inside = at(domain, 40)
    found.add(inside, {"kind": "fabric-slow-node", "factor": 0.85})
    found.nodes[inside] = "FabricSlowNode"
    uplink = rack_of(names.index(inside), len(names), racks)
    for node in members[domain]:
        found.add(node, {"kind": "fabric-slow-path", "factor": 0.6})
    found.paths.add(("FabricSlowDomain", (uplink,)))
    found.described.append(f"slow domain {uplink} (its uplink at 0.6) with slow node {inside}")
    first, second = (
        rack_of(names.index(at(2, 0)), len(names), racks),
        rack_of(names.index(at(3, 0)), len(names), racks),
    )
    for node in members[2]:
        found.add(node, {"kind": "fabric-slow-path", "peer": second, "factor": 0.7})
    found.paths.add(("FabricSlowPath", (first, second)))
    found.described.append(f"slow path between {first} and {second} (0.7)")
    return found


def simulation(node: str, domain: str, injected: Injected) -> SimulationConfig:
    return SimulationConfig.model_validate(
        {"gpus": 8, "fabricDomain": domain, "faults": injected.faults.get(node, [])}
    )


def _env(pod: Mapping[str, Any]) -> dict[str, str]:
    container = pod["spec"]["containers"][0]
    return {e["name"]: str(e["value"]) for e in container.get("env", []) if "value" in e}


_PORTS_LOCK = threading.Lock()
_PORTS_HELD: set[int] = set()


def group_port() -> int:
    """A loopback port for a group's rank 0 that no running stand-in group holds. free_port()
    alone let two groups that started together get the same port (its probe socket is closed
    before rank 0 listens): the second rank 0 could not listen (FabricUnreachable) and its
    ranks met the first group's rank 0 and were refused (InvalidConfig), one group of 1,285 in
    a 10,000-node run on 2026-12-03. Give it back with `release_port`."""
    with _PORTS_LOCK:
        port = free_port()
        while port in _PORTS_HELD:
            port = free_port()
        _PORTS_HELD.add(port)
    return port


def release_port(port: int) -> None:
    with _PORTS_LOCK:
        _PORTS_HELD.discard(port)


def run_group(
    pods: Sequence[Mapping[str, Any]], sims: Mapping[str, SimulationConfig]
) -> list[FabricResult]:
    """One group's agents, by rank: the real fabric code over loopback (module docstring)."""
    port = group_port()
    try:
        return _run_group(pods, sims, port)
    finally:
        release_port(port)


def _run_group(
    pods: Sequence[Mapping[str, Any]], sims: Mapping[str, SimulationConfig], port: int
) -> list[FabricResult]:
    stop = threading.Event()
    results: list[FabricResult | None] = [None] * len(pods)

    def one(rank: int) -> None:
        env = _env(pods[rank])
        env.pop(AgentEnv.FABRIC_MASTER_POD, None)  # read by _finish; the group meets here
        env[AgentEnv.FABRIC_MASTER] = f"127.0.0.1:{port}"
        plan = plan_from_env(env)
        executor = SimulatedFabric(sims[plan.node], plan.config, plan.node, stop)
        try:
            results[rank] = run_fabric(plan, executor, stop)
        finally:
            executor.close()

    threads = [threading.Thread(target=one, args=(r,), daemon=True) for r in range(len(pods))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    missing = [r for r, found in enumerate(results) if found is None]
    if missing:
        raise RuntimeError(f"stand-in fabric agents of ranks {missing} ended without a result")
    return [r for r in results if r is not None]


@dataclass
class GroupSeen:
    world: int
    pods: dict[int, dict[str, Any]] = field(default_factory=dict)
    running: set[int] = field(default_factory=set)
    first_created: float | None = None
    all_created: float | None = None
    all_running: float | None = None
    written: float | None = None
    started: bool = False


class StandInFabric:
    """Runs each fabric group's agents once every pod of it is Running (module docstring)."""

    def __init__(
        self, client: KubeClient, sims: Mapping[str, SimulationConfig], width: int = 8
    ) -> None:
        self.client, self.sims = client, sims
        self.groups: dict[tuple[str, str], GroupSeen] = {}
        self.results: dict[tuple[str, str], list[FabricResult]] = {}
        self.pool = ThreadPoolExecutor(max_workers=width, thread_name_prefix="fabric-group")
        self.sem = asyncio.Semaphore(width)
        self.tasks: set[asyncio.Task[None]] = set()
        self.compute_seconds = 0.0
        self.errors: list[str] = []
        self.pod_times: dict[str, PodTimes] = {}  # pod name -> when it reached each stage

    def on_pod(self, kind: str, pod: dict[str, Any]) -> bool:
        """Takes a fabric pod (True), leaves any other."""
        labels = pod["metadata"].get("labels") or {}
        if GROUP_LABEL not in labels:
            return False
        env = _env(pod)
        key = (labels[RUN_LABEL], labels[GROUP_LABEL])
        now = time.time()
        times = self.pod_times.get(pod["metadata"]["name"])
        if times is None:
            cross = labels[GROUP_LABEL].startswith(CROSS_PREFIX)
            times = self.pod_times[pod["metadata"]["name"]] = PodTimes(now, cross)
        times.see(pod, now)
        if kind == "DELETED":
            times.ended = times.ended or now
            # Its deletion time ends an unformed group's wait (the GPU-seconds held idle).
            if (known := self.groups.get(key)) is not None:
                known.pods[int(env["GPUVAL_FABRIC_RANK"])] = pod
            return True
        world = len(json.loads(env["GPUVAL_FABRIC_NODES"]))
        seen = self.groups.setdefault(key, GroupSeen(world))
        rank = int(env["GPUVAL_FABRIC_RANK"])
        if rank not in seen.pods:
            seen.pods[rank] = pod
            seen.first_created = seen.first_created or now
            if len(seen.pods) == world:
                seen.all_created = now
        seen.pods[rank] = pod
        if (pod.get("status") or {}).get("phase") == "Running":
            seen.running.add(rank)
        if len(seen.running) == world and not seen.started:
            seen.started, seen.all_running = True, now
            task = asyncio.ensure_future(self._finish(key, seen))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        return True

    async def _locate(self, pods: Sequence[Mapping[str, Any]]) -> None:
        """What each rank but 0 asks the API server before it can meet, all at once as the
        ranks' own agents would: rank 0's pod, by name, which must have an IP by now (every
        pod of the group is Running)."""

        async def one(pod: Mapping[str, Any]) -> None:
            name, _, _ = _env(pod)[AgentEnv.FABRIC_MASTER_POD].rpartition(":")
            found = await self.client.get(f"/api/v1/namespaces/{AGENT_NAMESPACE}/pods/{q(name)}")
            if not (found.get("status") or {}).get("podIP"):
                raise RuntimeError(f"rank 0's pod {name} has no IP while its group runs")

        await asyncio.gather(*(one(p) for p in pods[1:]))

    async def _finish(self, key: tuple[str, str], seen: GroupSeen) -> None:
        """The group's agents: their reads, then the fabric code (at most `width` groups at
        once: it is this process's CPU), then each rank's report write and its pod's end, the
        ranks' calls at once as on their own nodes."""
        pods = [seen.pods[r] for r in range(seen.world)]
        try:
            await self._locate(pods)
            async with self.sem:
                began = time.perf_counter()
                results = await asyncio.get_running_loop().run_in_executor(
                    self.pool, run_group, pods, self.sims
                )
                self.compute_seconds += time.perf_counter() - began
        except Exception as error:  # a benchmark's stand-in: say what broke, keep going
            self.errors.append(f"group {key[1]}: {error}")
            return
        self.results[key] = results
        await asyncio.gather(
            *(
                self.client.merge_patch(
                    f"{REPORTS}/{q(_env(pod)['GPUVAL_REPORT_NAME'])}/status",
                    {"status": {"fabric": build_fabric_status(result)}},
                )
                for pod, result in zip(pods, results, strict=True)
            )
        )
        seen.written = time.time()
        await asyncio.gather(
            *(
                self.client.merge_patch(
                    f"/api/v1/namespaces/{AGENT_NAMESPACE}/pods/{q(pod['metadata']['name'])}/status",
                    {
                        "status": {
                            "phase": "Succeeded" if result.verdict is Verdict.PASSED else "Failed"
                        }
                    },
                )
                for pod, result in zip(pods, results, strict=True)
            )
        )

    def pods_created(self) -> int:
        return sum(len(g.pods) for g in self.groups.values())

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


# -- figures --


def write_timeline(fabric: StandInFabric, path: Path) -> None:
    """Each fabric pod's stage times (`--fabric-timeline`), for reading a round pod by pod."""
    rows = [{"pod": name, **dataclasses.asdict(times)} for name, times in fabric.pod_times.items()]
    path.write_text(json.dumps(rows, separators=(",", ":")))


def rounds_of(result: FabricResult) -> int:
    """Rounds in the group's pods after its sweep: the pair rounds and the confirmation."""
    return len({p.round for p in result.pairs})


def nccl_runs(result: FabricResult) -> int:
    """The group's NCCL runs: its sweep, each pair of each round, each confirmation pair."""
    return 1 + len(result.pairs)


def planned_runs(nodes: int, size: int, racks: int) -> int:
    """NCCL runs of a fault-free fabric phase of `nodes` in `racks` racks and groups of `size`:
    each group's sweep and its ring of pairs (one pair for two nodes), the cross-domain groups of
    one representative per rack included (pure planning, nothing measured)."""
    names = [f"n{i:06d}" for i in range(nodes)]
    domains = {n: rack_of(i, nodes, racks) for i, n in enumerate(names)} if racks > 1 else None
    plans = domain_groups(names, size, domains)
    if domains is not None:
        firsts = sorted({d: n for n, d in reversed(list(domains.items()))}.values())
        plans += cross_groups(firsts, size)

    def runs(world: int) -> int:
        return 1 + sum(len(r) for r in pair_rounds(world)) if world > 1 else 0

    return sum(runs(len(p.nodes)) for p in plans)


def agent_seconds(config: FabricConfig, world: int, phase_seconds: float) -> float:
    """A model of one group's agent time: each phase (meeting and start-up, sweep, each pair
    round, the confirmation) `phase_seconds` of set-up, plus the all-reduces at BASE busbw."""
    sizes, size = [], config.min_bytes
    while size <= config.max_bytes:
        sizes.append(size)
        size *= 2
    gpus = 8 * world
    algbw = BASE_BUSBW_GBPS * 1e9 * gpus / (2 * (gpus - 1))
    pair_algbw = BASE_BUSBW_GBPS * 1e9 * 16 / (2 * 15)
    sweep = sum(config.iterations * s / algbw for s in sizes)
    rounds = len(pair_rounds(world)) + 1
    pairs = rounds * config.iterations * config.pair_size / pair_algbw
    return phase_seconds * (2 + rounds) + sweep + pairs


def named_summary(
    reports: Sequence[Mapping[str, Any]], status: Mapping[str, Any], injected: Injected
) -> dict[str, Any]:
    """Whether every injected fault was named and nothing else was: the nodes' fabric verdicts
    from their reports, the paths from the validation's status.fabric.slowPaths."""
    named: dict[str, str] = {}
    not_run: dict[str, str] = {}
    for report in reports:
        fabric = (report.get("status") or {}).get("fabric") or {}
        node = report["spec"]["node"]
        if fabric.get("verdict") == "Failed":
            named[node] = str(fabric.get("reason"))
        elif fabric.get("verdict") == "NotRun":
            not_run[node] = str(fabric.get("reason"))
    fabric = status.get("fabric") or {}
    paths = {
        (str(p.get("reason")), tuple(p.get("domains") or ())) for p in fabric.get("slowPaths") or []
    }
    return {
        "injected": injected.described,
        "expectedNodes": dict(sorted(injected.nodes.items())),
        "namedNodes": dict(sorted(named.items())),
        "notRunNodes": dict(sorted(not_run.items())),
        "expectedPaths": sorted(f"{r} {'/'.join(d)}" for r, d in injected.paths),
        "namedPaths": sorted(f"{r} {'/'.join(d)}" for r, d in paths),
        "slowGroups": fabric.get("slowGroupsOmitted", 0) + len(fabric.get("slowGroups") or []),
        "everyFaultNamedAndNothingElse": named == injected.nodes
        and not not_run
        and paths == injected.paths
        and not fabric.get("slowGroups"),
    }


def unfinished(fabric: StandInFabric) -> list[dict[str, Any]]:
    """Groups whose stand-in agents never ran, each rank's pod as last seen (at most 5)."""

    def rank_state(pod: Mapping[str, Any]) -> str:
        status = pod.get("status") or {}
        scheduled: dict[str, Any] = next(
            (c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"), {}
        )
        said = scheduled.get("message") or scheduled.get("reason") or ""
        return f"{status.get('phase')} on {pod['spec'].get('nodeName') or '-'} {said}".strip()

    found = []
    for (_, name), seen in sorted(fabric.groups.items()):
        if seen.started:
            continue
        ranks = {str(r): rank_state(p) for r, p in sorted(seen.pods.items())}
        found.append({"group": name, "world": seen.world, "ranks": ranks})
    return found[:5]


def segments(groups: Sequence[GroupSeen]) -> dict[str, float]:
    """Where a group's time goes, median over the groups: its first pod made → every pod made
    (the operator makes them in one go), → every pod Running (scheduled, started), → every
    result written (the stand-in agents: rank 0's pod read by the others, the fabric run)."""

    def median(values: list[float]) -> float:
        return round(statistics.median(values), 2) if values else float("nan")

    done = [g for g in groups if g.first_created and g.all_created and g.all_running and g.written]
    return {
        "firstCreatedToAllCreated": median(
            [(g.all_created or 0) - (g.first_created or 0) for g in done]
        ),
        "allCreatedToAllRunning": median(
            [(g.all_running or 0) - (g.all_created or 0) for g in done]
        ),
        "allRunningToWritten": median([(g.written or 0) - (g.all_running or 0) for g in done]),
    }


def rounds_timing(fabric: StandInFabric, limit: int) -> list[dict[str, float]]:
    """The fabric's rounds of groups as the operator opened them (a round: the groups whose nodes
    fit in the concurrency limit, in the order their first pods came; groups open as earlier
    ones end, so rounds overlap): each round's first pod made and last result written."""
    groups = sorted(
        (g for g in fabric.groups.values() if g.first_created is not None),
        key=lambda g: g.first_created or 0.0,
    )
    rounds: list[list[GroupSeen]] = [[]]
    filled = 0
    for group in groups:
        if filled + group.world > limit and rounds[-1]:
            rounds.append([])
            filled = 0
        rounds[-1].append(group)
        filled += group.world
    timing = []
    for members in rounds:
        done = [g.written for g in members if g.written is not None]
        timing.append(
            {
                "groups": len(members),
                "start": min(g.first_created or 0.0 for g in members),
                "end": max(done) if done else float("nan"),
            }
        )
    return timing


def seconds_per_round(timing: Sequence[Mapping[str, float]], classified: float) -> list[float]:
    """What each round adds to the fabric phase: from the previous round's last result (the
    first round: its first pod) to its own last result; the last round's to the run's results
    classified. The rounds' times add up to the phase's."""
    ends = [*(t["end"] for t in timing[:-1]), classified]
    starts = [timing[0]["start"], *ends[:-1]]
    return [end - start for start, end in zip(starts, ends, strict=True)]


# The operator's own log lines that mark the fabric phase's steps
# (gpuval_operator.control.fabric.driver, .control.controller), with the operator's clock.
_STEPS = {
    "planned": re.compile(r"fabric of run \S+: \d+ groups of up to"),
    "crossPlanned": re.compile(r"cross-domain fabric groups of"),
    "classified": re.compile(r"fabric of run \S+: \d+/\d+ passed"),
}
_STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]")


def operator_steps(log: str) -> dict[str, float]:
    """When the operator logged each step of the fabric phase (epoch seconds), first time each."""
    found: dict[str, float] = {}
    for line in log.splitlines():
        stamp = _STAMP.match(line)
        if stamp is None:
            continue
        for step, pattern in _STEPS.items():
            if step not in found and pattern.search(line):
                when = datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S,%f")
                found[step] = when.timestamp()
    return found


async def _reports(client: KubeClient) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    async for items, _, _ in client.pages(REPORTS, "gpuval.dev/validation=scale"):
        found.extend(items)
    return found


def comparison(nodes: int, racks: int) -> dict[str, Any]:
    """NCCL runs of a fault-free fabric phase against all-pairs, for several group sizes, at this
    fleet's size and at 232 nodes (NVIDIA cluster-readiness-engine's published case)."""
    table: dict[str, Any] = {}
    for fleet, domains in ((nodes, racks), (232, 1)):
        row: dict[str, Any] = {"allPairs": fleet * (fleet - 1) // 2}
        for size in (4, 8, 16, 32, 64):
            row[f"groupsOf{size}"] = planned_runs(fleet, size, domains)
        table[f"{fleet}Nodes{domains}Domains"] = row
    return table


async def fabric_figures(
    client: KubeClient,
    fabric: StandInFabric,
    injected: Injected,
    *,
    log: str,
    status: Mapping[str, Any],
    names: Sequence[str],
    racks: int,
    limit: int,
    local_done_at: float,
    run_completed_at: float,
    phase_seconds: float,
    cpu: CpuSampler,
    api: ApiSampler,
    profiler: ApiserverProfiler | None = None,
) -> dict[str, Any]:
    """The fabric phase's figures (epoch seconds throughout: the operator's log, the stand-ins'
    clock and the benchmark's are the same machine's)."""
    domains = {n: rack_of(i, len(names), racks) for i, n in enumerate(names)}
    began = time.perf_counter()
    domain_groups(list(names), GROUP_SIZE, domains)
    planning = time.perf_counter() - began
    reports = await _reports(client)
    sizes = sorted(len(json.dumps(r, separators=(",", ":"))) for r in reports)
    results = [rs[0] for rs in fabric.results.values()]
    rounds: dict[str, int] = {}
    for result in results:
        key = str(rounds_of(result))
        rounds[key] = rounds.get(key, 0) + 1
    steps = operator_steps(log)
    nan = float("nan")
    planned, classified = steps.get("planned", nan), steps.get("classified", nan)
    seen = [g for g in fabric.groups.values() if g.first_created is not None]
    first_pod = min(g.first_created or nan for g in seen)
    last_written = max(g.written or 0.0 for g in seen)
    timing = rounds_timing(fabric, limit)
    per_round = seconds_per_round(timing, classified)
    config = FabricSpec.model_validate(FABRIC_SPEC)
    modelled_agent = agent_seconds(config, GROUP_SIZE, phase_seconds)
    idle = gang_idle((p for g in fabric.groups.values() for p in g.pods.values()), time.time())
    waits = sorted(idle.by_group.values())
    wall = classified - local_done_at
    profiles = {}
    if profiler is not None:
        # Where kube-apiserver's CPU went, profile by profile from the first fabric pod.
        rows = await asyncio.to_thread(profiler.summaries, first_pod)
        profiles = {
            "fabricApiserverCpuProfiles": rows,
            "fabricApiserverProfileErrors": profiler.errors[:3],
        }
    return {
        "fabricRacks": racks,
        "fabricPlanningComputeSeconds": round(planning, 4),
        "fabricPlanningSeconds": round(planned - local_done_at, 2),
        "fabricPlannedToFirstPodSeconds": round(first_pod - planned, 2),
        "fabricPodsCreated": fabric.pods_created(),
        "fabricGroups": len(fabric.groups),
        "fabricRoundsPerGroup": dict(sorted(rounds.items())),
        "fabricMaxRoundsPerGroup": max(int(k) for k in rounds) if rounds else 0,
        "fabricNcclRuns": sum(nccl_runs(r) for r in results),
        "fabricNcclRunsComparison": comparison(len(names), racks),
        "fabricRounds": len(timing),
        "fabricOperatorSecondsPerRound": [round(x, 2) for x in per_round],
        "fabricOperatorSecondsPerRoundMax": round(max(per_round), 2),
        "fabricDomainToCrossSeconds": round(steps.get("crossPlanned", nan) - planned, 2),
        "fabricClassifySeconds": round(classified - last_written, 2),
        "fabricClassifiedToRunCompletedSeconds": round(run_completed_at - classified, 2),
        "fabricGroupSecondsMedian": segments(seen),
        # Each pod's wait at each stage, and how many pods stood at each stage over the phase.
        "fabricPodWaitSeconds": stage_waits(fabric.pod_times.values()),
        "fabricPodsByStage": occupancy(fabric.pod_times.values(), first_pod, classified),
        "fabricLongestOpeningGapSeconds": longest_opening_gap(fabric.pod_times.values()),
        # Where the phase's wall time went on this machine's cores: the control plane's
        # components, the operator, and the benchmark (the stand-in agents and the pod watch).
        "fabricCpuWindowSeconds": round(classified - first_pod, 1),
        "fabricCpuSecondsByProcess": cpu.between(first_pod, classified),
        # What the API server was asked then, and from the results classified to the run
        # complete (the node actions): its own counters, read every 20 s.
        **api.between(first_pod, classified, "fabricApi"),
        **api.between(classified, run_completed_at, "afterClassifiedApi"),
        "afterClassifiedCpuSecondsByProcess": cpu.between(classified, run_completed_at),
        "fabricWallSecondsSimulated": round(wall, 2),
        "fabricAgentSecondsPerGroupModelled": round(modelled_agent, 1),
        "fabricWallSecondsModelled": round(wall + len(timing) * modelled_agent, 1),
        "fabricModel": f"{phase_seconds:g} s of set-up per agent phase, all-reduces at "
        f"{BASE_BUSBW_GBPS:g} GB/s busbw, one group's agent time added per round",
        # Without Kueue: GPUs of members that started, idle until their group formed (or was
        # given up), gpuval_devtools.gangidle.
        "fabricGangIdleGpuSeconds": round(idle.gpu_seconds, 1),
        "fabricGangIdleGpuSecondsPerGroupMedian": round(waits[len(waits) // 2], 1) if waits else 0,
        "fabricGangIdleGpuSecondsPerGroupMax": round(waits[-1], 1) if waits else 0,
        "fabricGangsFormed": idle.formed,
        "fabricGangsNotFormed": idle.not_formed,
        "fabricStandInComputeSeconds": round(fabric.compute_seconds, 1),
        "fabricStandInErrors": fabric.errors[:10],
        "fabricGroupsNeverRun": unfinished(fabric),
        "reportBytesMax": sizes[-1] if sizes else 0,
        "reportBytesMedian": sizes[len(sizes) // 2] if sizes else 0,
        "fabricNamed": named_summary(reports, status, injected),
        **profiles,
    }
