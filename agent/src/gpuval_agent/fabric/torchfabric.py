"""The real fabric executor: one rank process per local GPU (gpuval_agent.backends.rankprocess,
run by the agent's one rank-process manager, backends/ranks.py), in generations.

A generation is this node's share of one torch world: its processes meet the other nodes' at a
TCPStore on rank 0's address and port PORT + 1 + generation % 5 (the coordinator keeps PORT; a
generation's port is taken again five generations later, long after every node killed the
processes that held it), then take commands on stdin and answer in their own events files. The
training phase's generations run with the training step's deterministic settings
(backends/trainranks.DETERMINISTIC_ENV) and the `train` command: the group's ranks data-parallel
over the whole world, or each pair's over its own communicator. Every wait has a deadline; at the
end of a phase that failed anywhere, and at the end, each process is killed with its whole
process group (only the processes this agent started). Their output (NCCL_DEBUG=INFO) is kept
for the transport reading and for a failure's log tail. Kept free of torch: CPU-tested.
"""

from __future__ import annotations

import importlib
import os
import socket
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from gpuval_agent.backends.base import GpuUse
from gpuval_agent.backends.cuda import cuda_ordinals_by_uuid
from gpuval_agent.backends.nvml.reader import Nvml
from gpuval_agent.backends.ranks import RankGroup, rank_command
from gpuval_agent.backends.trainranks import DETERMINISTIC_ENV
from gpuval_agent.errors import AgentError, BackendUnavailableError, NoDriverError
from gpuval_agent.fabric.coordinator import Roster
from gpuval_agent.fabric.ncclenv import fabric_rank_environment, nccl_variables
from gpuval_agent.fabric.steps import (
    Executor,
    PairFigure,
    StepReport,
    StepStatus,
    TrainFigures,
    failed,
)
from gpuval_agent.training import TrainPlan
from gpuval_api.fabric import FabricConfig

_POLL = 0.05
# The rank processes' stores: PORT+1 .. PORT+5 (rank 0 listens on six ports:
# docs/operator/fabric.md, "Rendezvous"), taken in turn by the generations.
STORE_PORTS = 5
_TAIL_PER_LOG = 2500
_TAIL_TOTAL = 8000


def local_gpu_count() -> int:
    """GPUs CUDA shows this process (after CUDA_VISIBLE_DEVICES): through cuda-python, which
    counts in milliseconds, else through torch (seconds to import)."""
    try:
        driver: Any = importlib.import_module("cuda.bindings.driver")
    except ImportError:
        driver = None
    if driver is not None:
        (status,) = driver.cuInit(0)
        if status == driver.CUresult.CUDA_SUCCESS:
            status, count = driver.cuDeviceGetCount()
            if status == driver.CUresult.CUDA_SUCCESS and count > 0:
                return int(count)
        raise AgentError(
            f"CUDA shows no GPU to this process ({status}): check the driver and "
            "CUDA_VISIBLE_DEVICES, or give --gpus N"
        )
    try:
        torch: Any = importlib.import_module("torch")
    except ImportError as error:
        raise BackendUnavailableError(
            f"the fabric's cuda backend needs torch ({error}); install the agent's 'gpu' extra"
        ) from None
    count = int(torch.cuda.device_count())
    if count < 1:
        raise AgentError("CUDA shows no GPU to this process (check CUDA_VISIBLE_DEVICES)")
    return count


def _trouble(events: list[dict[str, Any]]) -> StepReport | None:
    errors = [e for e in events if "error" in e]
    if errors:
        status = StepStatus.UNREACHABLE if errors[0].get("unreachable") else StepStatus.ERROR
        return failed(status, " ".join(str(errors[0]["error"]).split()))
    return None


def train_report(events: list[dict[str, Any]]) -> StepReport:
    """A training step's report from this node's rank processes' events: every GPU's losses, each
    step's time on the slowest GPU, every GPU's tokens; a node without a pair in the round sends
    none."""
    trouble = _trouble(events)
    if trouble is not None:
        return trouble
    trained = [e for e in events if "losses" in e]
    if not trained:
        return StepReport()
    counts = {len(e.get("stepSeconds") or []) for e in trained}
    steps = (
        [max(t) for t in zip(*(e["stepSeconds"] for e in trained), strict=True)]
        if len(counts) == 1
        else []
    )
    pair = trained[0].get("pair")
    return StepReport(
        train=TrainFigures(
            pair=(int(pair[0]), int(pair[1])) if pair else None,
            losses=[[str(v) for v in e["losses"]] for e in trained],
            step_seconds=[float(t) for t in steps],
            tokens=sum(int(e.get("tokens") or 0) for e in trained),
            versions={
                str(k): None if v is None else str(v)
                for k, v in (trained[0].get("versions") or {}).items()
            },
        )
    )


def _report(events: list[dict[str, Any]]) -> StepReport:
    """One step's report from this node's rank processes' events (the figures are local 0's)."""
    trouble = _trouble(events)
    if trouble is not None:
        return trouble
    if any(e.get("sumOk") is False for e in events):
        return failed(StepStatus.WRONG_SUM, "the all-reduce gave a wrong sum on this node")
    first = events[0]
    report = StepReport(sizes=[(int(b), float(s)) for b, s in first.get("sizes") or []])
    if "pair" in first:
        a, b = first["pair"]
        report.pairs = [PairFigure(a=a, b=b, seconds=first["seconds"])]
    return report


class TorchFabric(Executor):
    """The real backend: NCCL through torch.distributed, one process per local GPU."""

    backend = "cuda"

    def __init__(
        self,
        config: FabricConfig,
        master: tuple[str, int],
        group: str,
        stop: threading.Event,
        *,
        gpus: int | None = None,
        environ: Mapping[str, str] | None = None,
        test_hang: str | None = None,
    ) -> None:
        self.config, self.master, self.group_name, self.stop = config, master, group, stop
        self._gpus = gpus if gpus is not None else local_gpu_count()
        env = fabric_rank_environment(os.environ if environ is None else environ, config)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (*sys.path, env.get("PYTHONPATH")) if p)
        self._env = env
        self._test_hang = test_hang
        self._dir = tempfile.TemporaryDirectory(prefix="gpuval-fabric-")
        self._logs: list[Path] = []
        self._current: RankGroup | None = None
        self._step = 0
        self._rank = 0
        self._layout: list[list[int]] = []
        self._nvml: Nvml | None = None
        self._mine: set[int] | None = None

    def info(self) -> dict[str, Any]:
        info: dict[str, Any] = {"gpus": self._gpus, "hostname": socket.gethostname()}
        if self.config.train.enabled:
            info |= self._hardware()
        return info

    def _hardware(self) -> dict[str, Any]:
        """What the training phase needs the group to know: the GPU model, the driver and the
        smallest memory of the GPUs the rank processes use (NVML); nothing where NVML cannot say."""
        if self._nvml is None:
            try:
                self._nvml = Nvml()
            except NoDriverError:
                return {}
            self._mine = _used_by_ranks(self._nvml, self._gpus)
        environment = self._nvml.environment()
        used = [g for g in environment.gpus if self._mine is None or g.index in self._mine]
        sizes = [g.memory_total_bytes for g in used if g.memory_total_bytes is not None]
        return {
            "product": next((g.name for g in used if g.name), None),
            "driver": environment.driver_version,
            "memoryBytes": min(sizes) if sizes else None,
        }

    def setup(self, roster: Roster, rank: int) -> None:
        self._rank, offset = rank, 0
        for info in roster.infos:
            count = int(info.get("gpus") or 0)
            self._layout.append([offset, count])
            offset += count

    def _spec(self, generation: int, local: int, log: Path) -> dict[str, Any]:
        """One rank process's spec: its global rank, the world, the store of its generation."""
        first, _ = self._layout[self._rank]
        host, port = self.master
        timeouts = self.config.timeouts
        return {
            "rank": first + local,
            "world": sum(c for _, c in self._layout),
            "node": self._rank,
            "layout": self._layout,
            "device": local,
            "storeHost": host,
            "storePort": port + 1 + generation % STORE_PORTS,
            "initSeconds": timeouts.init_seconds,
            "phaseSeconds": timeouts.phase_seconds,
            "events": str(log.with_suffix(".events")),
            "testHang": self._test_hang,
        }

    def start(self, generation: int, deadline: float, *, training: bool = False) -> StepReport:
        self.stop_ranks()
        # The training step's settings win over the person's (their losses must compare).
        env = self._env | DETERMINISTIC_ENV if training else self._env
        logs = [Path(self._dir.name) / f"gen{generation}-gpu{i}.log" for i in range(self._gpus)]
        commands = [
            rank_command(self.group_name, self._spec(generation, local, log))
            for local, log in enumerate(logs)
        ]
        self._logs += logs
        self._current = RankGroup(
            commands,
            [env] * len(commands),
            gated=True,
            logs=logs,
            labels=[f"local GPU {i}" for i in range(len(commands))],
        )
        self._step = 0
        return self._wait(
            0, deadline, "fabric.timeouts.initSeconds", self.config.timeouts.init_seconds
        )

    def _command(
        self,
        command: dict[str, Any],
        deadline: float,
        limit: str,
        seconds: int,
        read: Callable[[list[dict[str, Any]]], StepReport] | None = None,
    ) -> StepReport:
        if self._current is None:
            return failed(StepStatus.ERROR, "no rank processes are running")
        self._step += 1
        self._current.send({**command, "id": self._step})
        return self._wait(self._step, deadline, limit, seconds, read)

    def _wait(
        self,
        step: int,
        deadline: float,
        limit: str,
        seconds: int,
        read: Callable[[list[dict[str, Any]]], StepReport] | None = None,
    ) -> StepReport:
        assert self._current is not None
        outcome = self._current.answers(step, deadline, self.stop)
        if isinstance(outcome, list):
            return (read or _report)(outcome)
        if outcome == "timeout":
            return failed(StepStatus.TIMEOUT, f"no result within {seconds} s ({limit}): hung")
        return failed(StepStatus.ERROR, outcome)

    def check(self, deadline: float) -> StepReport:
        init = self.config.timeouts.init_seconds
        return self._command({"op": "check"}, deadline, "fabric.timeouts.initSeconds", init)

    def group(self, sizes: list[int], iterations: int, deadline: float) -> StepReport:
        command = {"op": "group", "sizes": sizes, "iterations": iterations}
        phase = self.config.timeouts.phase_seconds
        return self._command(command, deadline, "fabric.timeouts.phaseSeconds", phase)

    def pairs(
        self,
        round_number: int,
        pairs: list[tuple[int, int]],
        nbytes: int,
        iterations: int,
        deadline: float,
    ) -> StepReport:
        command = {
            "op": "pairs",
            "round": round_number,
            "pairs": [list(p) for p in pairs],
            "bytes": nbytes,
            "iterations": iterations,
        }
        phase = self.config.timeouts.phase_seconds
        return self._command(command, deadline, "fabric.timeouts.phaseSeconds", phase)

    def train(self, plan: TrainPlan, deadline: float) -> StepReport:
        seconds = self.config.train.timeout_seconds
        limit = "fabric.train.timeoutSeconds"
        return self._command(plan.to_command(0), deadline, limit, seconds, train_report)

    def train_pairs(
        self, round_number: int, pairs: list[tuple[int, int]], plan: TrainPlan, deadline: float
    ) -> StepReport:
        command = {**plan.to_command(0), "round": round_number, "pairs": [list(p) for p in pairs]}
        seconds = self.config.train.timeout_seconds
        limit = "fabric.train.timeoutSeconds"
        return self._command(command, deadline, limit, seconds, train_report)

    def stop_ranks(self) -> None:
        if self._current is not None:
            self._current.kill()
            self._current = None

    def nccl_lines(self) -> list[str]:
        return [line for _, lines in self.rank_logs() for line in lines]

    def rank_logs(self) -> list[tuple[str, list[str]]]:
        return [
            (log.stem, log.read_text(errors="replace").splitlines())
            for log in self._logs
            if log.exists()
        ]

    def log_tail(self) -> str | None:
        tails = [
            f"--- {log.stem} ---\n" + log.read_text(errors="replace")[-_TAIL_PER_LOG:]
            for log in self._logs
            if log.exists()
        ]
        text = "\n".join(tails)
        return text[-_TAIL_TOTAL:] or None

    def nccl_env(self) -> dict[str, str]:
        return nccl_variables(self._env)

    def gpu_use(self) -> list[GpuUse] | None:
        """The processes on the GPUs this node's rank processes use (NVML indices, matched to CUDA's
        devices by UUID); None where NVML or the match is unavailable."""
        if self._nvml is None:
            try:
                self._nvml = Nvml()
            except NoDriverError:
                return None
            self._mine = _used_by_ranks(self._nvml, self._gpus)
        uses = self._nvml.gpu_use() if self._mine is not None else None
        if uses is None or self._mine is None:
            return None
        return [use for use in uses if use.gpu in self._mine]

    def close(self) -> None:
        self.stop_ranks()
        self._dir.cleanup()
        if self._nvml is not None:
            self._nvml.close()


def _used_by_ranks(nvml: Nvml, gpus: int) -> set[int] | None:
    """NVML's indices of CUDA's first `gpus` devices (what the rank processes use), by UUID."""
    try:
        driver: Any = importlib.import_module("cuda.bindings.driver")
    except ImportError:
        return None
    (status,) = driver.cuInit(0)
    if status != driver.CUresult.CUDA_SUCCESS:
        return None
    ordinals = cuda_ordinals_by_uuid(driver)
    uuids = [nvml.uuid(handle) for handle in nvml.handles]
    return {index for index, uuid in enumerate(uuids) if ordinals.get(uuid, gpus) < gpus}
