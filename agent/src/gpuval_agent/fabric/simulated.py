"""The fabric's TEST DOUBLE: a node that pretends to all-reduce with its group. Measures nothing.

Chosen only explicitly (`--backend simulated` / GPUVAL_BACKEND=simulated), like the per-node
double, and every result says `backend: simulated`. What is real: the agents meet over TCP at
rank 0's coordinator and gather every phase's reports exactly as the real backend does (the
double only replaces the rank processes), the analysis is the same code, the NCCL lines it writes
go through the same transport reading, `fabric-unreachable` dials a closed port and fails with
the real connection error, and `fabric-hang` blocks until the real phase timeout.

The model: each node tells the group its characteristics when it joins (a slow network, slow
links to named peers, sockets instead of InfiniBand, a hang), and every node computes the same
figures from them. A group's ring busbw is BASE times the slowest ring edge (rank order); a
pair's is BASE times its edge; an edge's factor is the slower node's times the link's, times the
path's between the two nodes' topology domains when they differ (`fabricDomain`). The training
phase's model is simtraining.py's.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Mapping
from typing import Any

from gpuval_agent.allreduce import bus_bandwidth
from gpuval_agent.backends.base import GpuUse
from gpuval_agent.backends.simulated.config import FaultKind, LoadCheck, SimulationConfig
from gpuval_agent.backends.simulated.foreign import ForeignProcesses
from gpuval_agent.fabric.coordinator import Roster
from gpuval_agent.fabric.ncclenv import fabric_rank_environment, nccl_variables
from gpuval_agent.fabric.simtraining import simulated_figures, train_info
from gpuval_agent.fabric.steps import Executor, PairFigure, StepReport, StepStatus, failed
from gpuval_agent.training import TrainPlan
from gpuval_api.fabric import FabricConfig

BASE_BUSBW_GBPS = 380.0  # 8x400G NDR ring busbw (design.md: 370-390 GB/s)
SOCKET_BUSBW_GBPS = 9.5  # tuned TCP sockets measured on the H200 machine (design.md: 9.2-9.9)
LATENCY_SECONDS = 25e-6
SLOW_NODE, SLOW_LINK = 0.85, 0.6  # one NIC of 8 down costs 12.5 %; a bad cable more
SLOW_PATH = 0.7  # a degraded uplink or spine path between two domains
ANY_DOMAIN = "*"  # a slow path to every other domain: the domain's uplink
_TAIL_LINES = 40


def _closed_port() -> int:
    """A port nothing listens on (just freed): dialling it is refused, as a blocked port is."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


class SimulatedFabric(Executor):
    backend = "simulated"

    def __init__(
        self,
        simulation: SimulationConfig,
        config: FabricConfig,
        node: str,
        stop: threading.Event,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.simulation, self.config, self.node, self.stop = simulation, config, node, stop
        self._env = fabric_rank_environment(os.environ if environ is None else environ, config)
        self._faults = {f.kind: f for f in simulation.faults}
        self._links = {
            f.peer: f.factor or SLOW_LINK
            for f in simulation.faults
            if f.kind is FaultKind.FABRIC_SLOW_LINK and f.peer
        }
        self._paths = {
            f.peer or ANY_DOMAIN: f.factor or SLOW_PATH
            for f in simulation.faults
            if f.kind is FaultKind.FABRIC_SLOW_PATH
        }
        self.foreign = ForeignProcesses(simulation)
        self._lines: list[str] = []
        self._infos: list[dict[str, Any]] = []
        self._names: list[str] = []
        self._rank = 0

    def info(self) -> dict[str, Any]:
        slow = self._faults.get(FaultKind.FABRIC_SLOW_NODE)
        socket_fallback = FaultKind.FABRIC_SOCKET_FALLBACK in self._faults
        return {
            "gpus": self.simulation.gpus,
            "speed": (slow.factor or SLOW_NODE) if slow else 1.0,
            "slowLinks": self._links,
            "domain": self.simulation.fabric_domain,
            "slowPaths": self._paths,
            "socket": socket_fallback,
            # NCCL_NET=IB where the node has no usable HCA: NCCL fails at init, no fallback.
            "ibMissing": socket_fallback and self._env.get("NCCL_NET") == "IB",
            "hang": FaultKind.FABRIC_HANG in self._faults,
            **train_info(self.simulation),
        }

    def dial(self, host: str, port: int) -> tuple[str, int]:
        if FaultKind.FABRIC_UNREACHABLE not in self._faults:
            return host, port
        closed = _closed_port()
        self._lines.append(f"simulated fabric-unreachable: dialling {host}:{closed} for {port}")
        return host, closed

    def listen_port(self, port: int) -> int:
        if FaultKind.FABRIC_UNREACHABLE not in self._faults:
            return port
        return _closed_port()  # rank 0 listens where nobody dials

    @property
    def _phase_limit(self) -> str:
        return f"{self.config.timeouts.phase_seconds} s (fabric.timeouts.phaseSeconds)"

    def setup(self, roster: Roster, rank: int) -> None:
        self._infos, self._names, self._rank = roster.infos, roster.nodes, rank

    def _gpus(self, rank: int) -> int:
        return int(self._infos[rank].get("gpus") or 1)

    def _factor(self, a: int, b: int) -> float:
        """An edge between two nodes, as a fraction of BASE."""

        def net(rank: int) -> float:
            info = self._infos[rank]
            if info.get("socket"):
                return SOCKET_BUSBW_GBPS / BASE_BUSBW_GBPS
            return float(info.get("speed") or 1.0)

        link = min(
            float((self._infos[a].get("slowLinks") or {}).get(self._names[b], 1.0)),
            float((self._infos[b].get("slowLinks") or {}).get(self._names[a], 1.0)),
        )
        return min(net(a), net(b)) * link * self._path(a, b)

    def _path(self, a: int, b: int) -> float:
        """The path between two nodes' topology domains, as a fraction of BASE (1.0 inside one
        domain, or where neither side's domain is known)."""
        first, second = self._infos[a], self._infos[b]
        domains = first.get("domain"), second.get("domain")
        if None in domains or domains[0] == domains[1]:
            return 1.0

        def toward(info: dict[str, Any], other: object) -> float:
            paths = info.get("slowPaths") or {}
            return float(paths.get(str(other), paths.get(ANY_DOMAIN, 1.0)))

        return min(toward(first, domains[1]), toward(second, domains[0]))

    def _prefix(self, local: int) -> str:
        """NCCL's own line prefix: host:pid:tid [device]."""
        return f"{self.node}:{os.getpid()}:{os.getpid()} [{local}]"

    def _log_channels(self, members: list[int]) -> None:
        """NCCL-like channel lines of one communicator over `members` (node ranks, in order)."""
        ranks = [(node, local) for node in members for local in range(self._gpus(node))]
        info = self._infos[self._rank]
        via = "NET/Socket/0" if info.get("socket") else "NET/IB/0/GDRDMA"
        self._lines.append(f"{self._prefix(0)} NCCL INFO Using network {via.split('/')[1]}")
        for index, (node, local) in enumerate(ranks):
            peer_node, peer_local = ranks[(index + 1) % len(ranks)]
            if node != self._rank or len(ranks) < 2:
                continue
            how = f"via {via}" if peer_node != node else "via P2P/IPC"
            self._lines.append(
                f"{self._prefix(local)} NCCL INFO Channel 00/0 : {index}[{local}] -> "
                f"{(index + 1) % len(ranks)}[{peer_local}] [send] {how}"
            )

    def _init_failure(self, members: list[int]) -> StepReport | None:
        """NCCL_NET=IB without an HCA among `members`: NCCL fails at init, before any channel."""
        failing = [r for r in members if self._infos[r].get("ibMissing")]
        if self._rank in failing:
            self._lines.append(f"{self._prefix(0)} NCCL WARN Error: network IB not found.")
            return failed(
                StepStatus.ERROR,
                "NCCL error: invalid usage (ncclInvalidUsage). Last error: Error: network IB not "
                "found. (simulated fabric-socket-fallback with NCCL_NET=IB)",
            )
        if failing:
            names = ", ".join(self._names[r] for r in failing)
            return failed(
                StepStatus.ERROR,
                f"NCCL error: remote process exited or there was a network error (ncclRemoteError)"
                f" (simulated: {names} failed at init)",
            )
        return None

    def _collective(self, members: list[int], deadline: float, limit: str) -> StepReport | None:
        """Connect a communicator over `members`; a hang among them blocks until the deadline."""
        failure = self._init_failure(members)
        if failure is not None:
            return failure
        self._log_channels(members)
        if any(self._infos[r].get("hang") for r in members):
            self._lines.append(f"{self.node}: simulated fabric-hang: the collective never ends")
            self.stop.wait(max(0.0, deadline - time.monotonic()))
            return failed(StepStatus.TIMEOUT, f"no result within {limit}: hung")
        return None

    def start(self, generation: int, deadline: float, *, training: bool = False) -> StepReport:
        self.foreign.starts(LoadCheck.FABRIC, list(range(self.simulation.gpus)))
        return StepReport()

    def _shared(self) -> float:
        """How much longer this node's collectives take beside another process computing on
        one of its GPUs (the double's model of a shared GPU)."""
        computing = (
            self.foreign.on(gpu, FaultKind.FOREIGN_COMPUTE) for gpu in range(self.simulation.gpus)
        )
        return 2.0 if any(computing) else 1.0

    def check(self, deadline: float) -> StepReport:
        world = list(range(len(self._infos)))
        limit = f"{self.config.timeouts.init_seconds} s (fabric.timeouts.initSeconds)"
        return self._collective(world, deadline, limit) or StepReport()

    def group(self, sizes: list[int], iterations: int, deadline: float) -> StepReport:
        world = list(range(len(self._infos)))
        trouble = self._collective(world, deadline, self._phase_limit)
        if trouble is not None:
            return trouble
        edges = [self._factor(r, (r + 1) % len(world)) for r in world] if len(world) > 1 else [1.0]
        busbw = BASE_BUSBW_GBPS * min(edges)
        ranks = sum(self._gpus(r) for r in world)
        algbw = busbw / bus_bandwidth(1.0, ranks) if ranks > 1 else busbw
        slower = self._shared()
        return StepReport(
            sizes=[(s, (s / (algbw * 1e9) + LATENCY_SECONDS) * slower) for s in sizes]
        )

    def pairs(
        self,
        round_number: int,
        pairs: list[tuple[int, int]],
        nbytes: int,
        iterations: int,
        deadline: float,
    ) -> StepReport:
        mine = next((p for p in pairs if self._rank in p), None)
        if mine is None:
            return StepReport()
        trouble = self._collective(list(mine), deadline, self._phase_limit)
        if trouble is not None:
            return trouble
        busbw = BASE_BUSBW_GBPS * self._factor(*mine)
        algbw = busbw / bus_bandwidth(1.0, self._gpus(mine[0]) + self._gpus(mine[1]))
        seconds = (nbytes / (algbw * 1e9) + LATENCY_SECONDS) * self._shared()
        return StepReport(pairs=[PairFigure(a=mine[0], b=mine[1], seconds=seconds)])

    def _ring_busbw(self, members: list[int]) -> float:
        """The ring all-reduce's busbw over `members` (in order), GB/s."""
        if len(members) < 2:
            return BASE_BUSBW_GBPS
        ring = zip(members, members[1:] + members[:1], strict=True)
        return BASE_BUSBW_GBPS * min(self._factor(a, b) for a, b in ring)

    def _trained(
        self, members: list[int], plan: TrainPlan, pair: tuple[int, int] | None
    ) -> StepReport:
        figures = simulated_figures(
            plan,
            self.simulation,
            infos=self._infos,
            members=members,
            rank=self._rank,
            busbw_gbps=self._ring_busbw(members),
            slower=self._shared(),
            pair=pair,
        )
        return StepReport(train=figures)

    def train(self, plan: TrainPlan, deadline: float) -> StepReport:
        world = list(range(len(self._infos)))
        limit = f"{self.config.train.timeout_seconds} s (fabric.train.timeoutSeconds)"
        trouble = self._collective(world, deadline, limit)
        return trouble or self._trained(world, plan, None)

    def train_pairs(
        self, round_number: int, pairs: list[tuple[int, int]], plan: TrainPlan, deadline: float
    ) -> StepReport:
        mine = next((p for p in pairs if self._rank in p), None)
        if mine is None:
            return StepReport()
        limit = f"{self.config.train.timeout_seconds} s (fabric.train.timeoutSeconds)"
        trouble = self._collective(list(mine), deadline, limit)
        return trouble or self._trained(list(mine), plan, mine)

    def stop_ranks(self) -> None:
        return None  # no processes: the double computes

    def nccl_lines(self) -> list[str]:
        return list(self._lines)

    def log_tail(self) -> str | None:
        return "\n".join(self._lines[-_TAIL_LINES:]) or None

    def nccl_env(self) -> dict[str, str]:
        return nccl_variables(self._env)

    def gpu_use(self) -> list[GpuUse] | None:
        return self.foreign.use(list(range(self.simulation.gpus)))

    def host_pid_namespace(self) -> bool:
        return self.foreign.host_pid_namespace()
