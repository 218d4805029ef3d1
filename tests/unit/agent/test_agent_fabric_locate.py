"""A fabric rank of a Kueue pod group learns rank 0's address from rank 0's pod
(gpuval_agent.fabric.locate, the plan's GPUVAL_FABRIC_MASTER_POD). The pod reads come from a
scripted reader and time from a fake clock; reading a real pod through the API server with the
agent's own token is tests/integration/operator/test_operator_kueue.py's."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import pytest

from gpuval_agent.backends.simulated.config import SimulationConfig
from gpuval_agent.errors import AgentError
from gpuval_agent.fabric.coordinator import StoppedError
from gpuval_agent.fabric.driver import master_unknown
from gpuval_agent.fabric.frontend import plan_from_env
from gpuval_agent.fabric.locate import (
    MasterPod,
    MasterUnknownError,
    locate_master,
    parse_master_pod,
)
from gpuval_agent.fabric.simulated import SimulatedFabric
from gpuval_agent.kube import TransientApiError
from gpuval_api.env import AgentEnv
from gpuval_api.kueue import ADMISSION_GATE
from gpuval_api.reasons import Reason
from gpuval_api.result import Verdict

ENV = {
    AgentEnv.FABRIC_RANK: "1",
    AgentEnv.FABRIC_NODES: '["gpu-a", "gpu-b"]',
    AgentEnv.FABRIC_MASTER_POD: "gpuval-v-1-aaaa-g1-r0:20006",
    AgentEnv.FABRIC_GROUP: "g1",
    AgentEnv.FABRIC_CONFIG: '{"timeouts": {"gangSeconds": 30}}',
}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Stop(threading.Event):
    """A stop event whose waits move the fake clock instead of sleeping."""

    def __init__(self, clock: Clock) -> None:
        super().__init__()
        self.clock = clock
        self.waits: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout or 0.0)
        self.clock.now += timeout or 0.0
        return self.is_set()


def scripted(*answers: Mapping[str, Any] | Exception | None) -> Any:
    calls: list[str] = []

    def read(name: str) -> Mapping[str, Any] | None:
        calls.append(name)
        answer = answers[min(len(calls), len(answers)) - 1]
        if isinstance(answer, Exception):
            raise answer
        return answer

    read.calls = calls  # type: ignore[attr-defined]
    return read


PENDING = {"spec": {"schedulingGates": [{"name": ADMISSION_GATE}]}, "status": {}}
RUNNING = {"spec": {"nodeName": "gpu-a"}, "status": {"phase": "Running", "podIP": "10.0.0.9"}}
MASTER = MasterPod("gpuval-v-1-aaaa-g1-r0", 20006)


def test_a_rank_told_rank_0s_pod_plans_to_read_its_address_and_rank_0_ignores_it() -> None:
    plan = plan_from_env(ENV)
    assert plan.master_pod == MASTER and plan.master == ("", 20006)
    assert plan.master_text == "pod gpuval-v-1-aaaa-g1-r0:20006"
    rank0 = plan_from_env(ENV | {AgentEnv.FABRIC_RANK: "0", AgentEnv.FABRIC_MASTER: "127.0.0.1:1"})
    assert rank0.master_pod is None and rank0.master == ("127.0.0.1", 1)


def test_a_wrong_master_pod_is_named() -> None:
    with pytest.raises(AgentError, match=r"GPUVAL_FABRIC_MASTER_POD='r0' is not POD:PORT"):
        plan_from_env(ENV | {AgentEnv.FABRIC_MASTER_POD: "r0"})
    assert parse_master_pod("a-b:7", "x") == MasterPod("a-b", 7)


def test_the_address_is_read_again_until_rank_0s_pod_has_one() -> None:
    clock = Clock()
    read = scripted(None, PENDING, TransientApiError("HTTP 503"), RUNNING)
    said: list[str] = []
    found = locate_master(read, MASTER, seconds=30, stop=Stop(clock), say=said.append, clock=clock)
    assert found == ("10.0.0.9", 20006)
    assert read.calls == ["gpuval-v-1-aaaa-g1-r0"] * 4


def test_no_address_within_the_gang_timeout_names_what_rank_0s_pod_was_doing() -> None:
    clock = Clock()
    stop = Stop(clock)
    said: list[str] = []
    with pytest.raises(MasterUnknownError, match=r"scheduling gates on, no node yet, no IP yet"):
        locate_master(
            scripted(PENDING), MASTER, seconds=30, stop=stop, say=said.append, clock=clock
        )
    assert clock.now >= 130 and max(stop.waits) <= 2.0, "it asks at most every 2 s"
    assert said and "waiting for rank 0's address: pod gpuval-v-1-aaaa-g1-r0:20006" in said[0]


def test_a_refused_read_ends_the_wait_at_once_with_the_servers_words() -> None:
    clock = Clock()
    refused = AgentError("the API server refused to let this pod read pod ns/r0 (HTTP 403)")
    with pytest.raises(MasterUnknownError, match="HTTP 403"):
        locate_master(scripted(refused), MASTER, seconds=30, stop=Stop(clock), say=print)
    assert clock.now == 100.0


def test_a_signal_stops_the_wait() -> None:
    clock = Clock()
    stop = Stop(clock)
    stop.set()
    with pytest.raises(StoppedError):
        locate_master(scripted(PENDING), MASTER, seconds=30, stop=stop, say=print, clock=clock)


def test_a_rank_that_never_learnt_rank_0s_address_is_not_run_blaming_no_one() -> None:
    plan = plan_from_env(ENV)
    executor = SimulatedFabric(
        SimulationConfig.parse("{}"), plan.config, plan.node, threading.Event()
    )
    result = master_unknown(plan, executor, "rank 0's address never came")
    assert (result.verdict, result.reason) == (Verdict.NOT_RUN, Reason.FABRIC_GANG_NOT_FORMED)
    assert result.node == "gpu-b" and result.nodes == ["gpu-a", "gpu-b"] and result.rank == 1
