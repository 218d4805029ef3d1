"""The phases, the same on every node and whatever measures them.

1. Meet at rank 0's coordinator (init timeout). 2. Start the rank processes and check one
all-reduce's sum across the world (init timeout), then the group's sweep (phase timeout). 3. The
pair rounds of `pair_rounds(world)`, each pair its own communicator (phase timeout each). 4. One
confirmation round (round 0) chosen from the gathered pairs by `confirmation_pairs`, computed alike
on every node. After each phase every node's report is gathered to every node; a phase that failed
anywhere is followed by fresh rank processes everywhere (a new world on the next store port), so the
pair rounds still run after a hung group and a hung pair does not hang the rest.
5. With fabric.train on, the training phase (trainphase.py): the group's data-parallel training
run, then its pair rounds and their confirmation round, in the same way.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpuval_agent import __version__
from gpuval_agent.checks.nccl import sweep_sizes
from gpuval_agent.fabric import coordinator
from gpuval_agent.fabric.analysis import (
    Conclusion,
    GroupRecord,
    PairRecord,
    conclude,
    group_record,
    not_measured,
    pair_floor,
    pair_record,
    undisturbed,
)
from gpuval_agent.fabric.coordinator import Client, Forming, OnWait, Roster, Server
from gpuval_agent.fabric.locate import MasterPod
from gpuval_agent.fabric.nccllog import excerpt
from gpuval_agent.fabric.steps import Executor, StepReport, StepStatus
from gpuval_agent.fabric.trainanalysis import TrainPhase, with_training
from gpuval_agent.fabric.trainphase import run_training
from gpuval_agent.fabric.transport import read_transport
from gpuval_agent.inuse import describe
from gpuval_agent.watch import InUseWatch
from gpuval_api import Reason, Verdict
from gpuval_api.fabric import FabricConfig, FabricPair, FabricResult, pair_rounds
from gpuval_api.fabric.isolation import confirmation_pairs, find_suspects

# A node's hello says who uses its GPUs before the group meets (its info's key).
IN_USE_KEY = "inUse"


@dataclass
class FabricPlan:
    """What one node's agent was told: the same on every node but for `rank` and `node`."""

    rank: int
    world: int
    master: tuple[str, int]
    group: str
    node: str
    config: FabricConfig = field(default_factory=FabricConfig)
    nodes: list[str] | None = None  # by rank, when known before the group meets
    # Rank 0's pod, where the host of `master` is to be read from it (fabric.locate).
    master_pod: MasterPod | None = None

    @property
    def master_text(self) -> str:
        host, port = self.master
        if not host and self.master_pod is not None:
            return self.master_pod.text
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def unique_names(names: list[str]) -> list[str]:
    """Node names by rank, made unique (two processes of one host by hand share a hostname)."""
    counts = Counter(names)
    return [f"{n}-{rank}" if counts[n] > 1 else n for rank, n in enumerate(names)]


class Session:
    """One node's run of the phases, after the group met."""

    def __init__(
        self,
        plan: FabricPlan,
        executor: Executor,
        link: Server | Client,
        roster: Roster,
        watch: InUseWatch,
    ) -> None:
        self.plan, self.executor, self.link, self.watch = plan, executor, link, watch
        self.names = roster.nodes
        # Nodes whose GPUs another process used during a phase, and who (from every report).
        self.in_use: dict[str, str] = {}
        self.gpus = [int(info.get("gpus") or 0) for info in roster.infos]
        self.generation = 0
        timeouts = plan.config.timeouts
        self.init, self.phase = float(timeouts.init_seconds), float(timeouts.phase_seconds)

    def exchange(
        self, step: str, report: StepReport, timeout: float | None = None
    ) -> list[StepReport]:
        """Every node's report of one phase, this node's among them (`timeout`: how long rank 0
        waits for the others; the phase's init and phase limits by default)."""
        limit = self.init + self.phase if timeout is None else timeout
        payloads = self.link.exchange(step, report.payload(), limit)
        reports = [StepReport.from_payload(p) for p in payloads]
        for node, gathered in zip(self.names, reports, strict=False):
            if gathered.in_use:
                self.in_use.setdefault(node, gathered.in_use)
        return reports

    def watched(self, phase: Callable[[], StepReport]) -> StepReport:
        """A phase with this node's GPUs watched for other processes; the report says who."""
        with self.watch.during() as seen:
            report = phase()
        busy = seen.before | seen.during
        if not busy:
            return report
        text = "; ".join(f"GPU {gpu} is in use by {describe(b)}" for gpu, b in sorted(busy.items()))
        return report.model_copy(update={"in_use": text})

    def _group_steps(self) -> StepReport:
        config = self.plan.config
        deadline = time.monotonic() + self.init
        report = self.executor.start(self.generation, deadline)
        if report.ok:
            report = self.executor.check(deadline)
        if report.ok:
            sizes = sweep_sizes(config.min_bytes, config.max_bytes)
            report = self.executor.group(sizes, config.iterations, time.monotonic() + self.phase)
        return report

    def group_phase(self) -> GroupRecord:
        report = self.watched(self._group_steps)
        return group_record(self.exchange("group", report), self.names, sum(self.gpus))

    def one_round(
        self, number: int, pairs: list[tuple[int, int]], restart: bool
    ) -> tuple[list[PairRecord[FabricPair]], bool]:
        """The round's pairs, and whether any node failed in it (fresh rank processes next)."""
        config = self.plan.config

        def steps() -> StepReport:
            report = StepReport()
            if restart:
                self.executor.stop_ranks()
                self.generation += 1
                report = self.executor.start(self.generation, time.monotonic() + self.init)
            if report.ok:
                report = self.executor.pairs(
                    number,
                    pairs,
                    config.pair_size,
                    config.iterations,
                    time.monotonic() + self.phase,
                )
            return report

        reports = self.exchange(f"round{number}", self.watched(steps))
        records = [
            pair_record(
                number,
                p,
                reports=reports,
                nodes=self.names,
                gpus=self.gpus,
                nbytes=config.pair_size,
            )
            for p in pairs
        ]
        return records, not all(r.ok for r in reports)

    def pair_phases(self, restart: bool) -> list[PairRecord[FabricPair]]:
        records: list[PairRecord[FabricPair]] = []
        for number, pairs in enumerate(pair_rounds(len(self.names)), start=1):
            found, restart = self.one_round(number, pairs, restart)
            records += found
        floor = pair_floor(self.plan.config, records)
        measured = [r.pair for r in records]
        chosen = confirmation_pairs(find_suspects(measured, floor), measured)
        if chosen:
            rank = {name: index for index, name in enumerate(self.names)}
            found, _ = self.one_round(0, [(rank[a], rank[b]) for a, b in chosen], restart)
            records += found
        return records


def _result(
    plan: FabricPlan,
    executor: Executor,
    conclusion: Conclusion,
    nodes: list[str],
    gpus: int,
) -> FabricResult:
    return FabricResult(
        agent_version=__version__,
        backend=executor.backend,
        group=plan.group,
        node=nodes[plan.rank] if plan.rank < len(nodes) else plan.node,
        rank=plan.rank,
        nodes=nodes,
        gpus_per_node=gpus,
        nccl_env=executor.nccl_env(),
        verdict=conclusion.verdict,
        reason=conclusion.reason,
        message=conclusion.message,
    )


def master_unknown(plan: FabricPlan, executor: Executor, message: str) -> FabricResult:
    """This node's result when it could not even learn where rank 0 is (fabric.locate): the group
    did not form, and nothing was tested against the node."""
    conclusion = Conclusion(Verdict.NOT_RUN, Reason.FABRIC_GANG_NOT_FORMED, message)
    gpus = int(executor.info().get("gpus") or 0)
    return _result(plan, executor, conclusion, plan.nodes or [plan.node], gpus)


def _not_met(plan: FabricPlan, error: coordinator.RendezvousError) -> Conclusion:
    limit = f"within {plan.config.timeouts.init_seconds} s (fabric.timeouts.initSeconds)"
    if isinstance(error, coordinator.UnreachableError):
        detail = f"; last attempt: {error.detail}" if error.detail else ""
        return Conclusion(Verdict.FAILED, Reason.FABRIC_UNREACHABLE, f"{error} {limit}{detail}")
    if isinstance(error, coordinator.NotFormedError):
        names = plan.nodes or []
        missing = ", ".join(
            f"{names[r]} (rank {r})" if r < len(names) else f"rank {r}" for r in error.missing
        )
        return Conclusion(
            Verdict.NOT_RUN,
            Reason.FABRIC_UNREACHABLE,
            f"the group did not form: {missing} never reached rank 0's rendezvous at "
            f"{plan.master_text} {limit}; their own reports say why",
        )
    if isinstance(error, coordinator.RefusedError):
        return Conclusion(Verdict.NOT_RUN, Reason.INVALID_CONFIG, str(error))
    return Conclusion(
        Verdict.NOT_RUN,
        Reason.FABRIC_UNREACHABLE,
        f"lost the group's coordinator (rank 0 at {plan.master_text}): {error}",
    )


def _meet(
    plan: FabricPlan,
    executor: Executor,
    stop: threading.Event,
    on_wait: OnWait | None,
    info: dict[str, Any],
) -> tuple[Server | Client, Roster]:
    deadline = time.monotonic() + plan.config.timeouts.init_seconds
    hello = {
        "type": "hello",
        "rank": plan.rank,
        "world": plan.world,
        "group": plan.group,
        "node": plan.node,
        "info": info,
        "agent": __version__,
    }
    host, port = plan.master
    forming = Forming(plan.group, plan.world, plan.master_text, plan.nodes, on_wait)
    link: Server | Client
    if plan.rank == 0:
        link = Server(executor.listen_port(port), plan.world, plan.group, stop, forming)
    else:
        link = Client(executor.dial(host, port), plan.master_text, stop, forming)
    try:
        roster = link.join(hello, deadline)
    except BaseException:
        link.close()
        raise
    roster.nodes = unique_names(roster.nodes)
    return link, roster


def _busy_before(watch: InUseWatch) -> str | None:
    """Who uses this node's GPUs before the agent's first CUDA context: the group hears it in
    this node's hello and measures nothing."""
    busy = watch.take_baseline()
    if not busy:
        return None
    return "; ".join(f"GPU {gpu} is in use by {describe(b)}" for gpu, b in sorted(busy.items()))


def run_fabric(
    plan: FabricPlan,
    executor: Executor,
    stop: threading.Event,
    on_wait: OnWait | None = None,
) -> FabricResult:
    """This node's fabric result. coordinator.StoppedError propagates (SIGTERM/SIGINT).
    `on_wait` hears what the forming group waits for, every few seconds."""
    watch = InUseWatch(executor)
    info = executor.info()
    if (busy := _busy_before(watch)) is not None:
        info[IN_USE_KEY] = busy
    own_gpus = int(info.get("gpus") or 0)
    try:
        link, roster = _meet(plan, executor, stop, on_wait, info)
    except coordinator.StoppedError:
        raise
    except coordinator.RendezvousError as error:
        result = _result(plan, executor, _not_met(plan, error), plan.nodes or [plan.node], own_gpus)
        return result
    me = roster.nodes[plan.rank]
    in_use = {
        node: str(node_info[IN_USE_KEY])
        for node, node_info in zip(roster.nodes, roster.infos, strict=False)
        if node_info.get(IN_USE_KEY)
    }
    if in_use:
        # Every node reads the same roster: the whole group stops here, nothing measured.
        link.close()
        return _result(plan, executor, not_measured(me, in_use), roster.nodes, own_gpus)
    try:
        executor.setup(roster, plan.rank)
        session = Session(plan, executor, link, roster, watch)
        group = session.group_phase()
        pairs = session.pair_phases(restart=group.status is not StepStatus.OK)
        training: TrainPhase | None = None
        if plan.config.train.enabled:
            training = run_training(session, plan.config.train, roster.infos)
    except coordinator.StoppedError:
        raise
    except coordinator.RendezvousError as error:
        return _result(plan, executor, _not_met(plan, error), roster.nodes, own_gpus)
    finally:
        executor.stop_ranks()
        link.close()
    reading = read_transport(executor.nccl_lines())
    conclusion = conclude(me, plan.config, group, pairs, reading)
    if training is not None:
        conclusion = with_training(conclusion, me, plan.config.train, training)
    conclusion = undisturbed(conclusion, me, session.in_use)
    result = _result(plan, executor, conclusion, roster.nodes, own_gpus)
    result.transport = reading.transport
    result.transport_lines = reading.lines
    result.sizes = group.sizes or []
    result.busbw_gbps = group.busbw_gbps
    result.pairs = [r.pair for r in pairs]
    result.train = training.result() if training is not None else None
    troubled = (
        group.status is not StepStatus.OK
        or any(p.status is not StepStatus.OK for p in pairs)
        or (training is not None and training.troubled)
    )
    failed = troubled or conclusion.verdict is not Verdict.PASSED
    # Kept on every run: the operator may still fail this node against the run's other groups.
    result.nccl_log = excerpt(executor.rank_logs(), failed)
    if failed:
        result.log_tail = executor.log_tail()
    return result
