"""An agent pod that ended with no termination status, against the real API server: before the
operator writes its own verdict (PodFailed) it reads the node's report, and a verdict the agent
wrote there for this run and attempt is what the node gets. The report and the pod's end come on
two watches; under load the report's lagged the pod's by more than the grace, and 3,088 of
10,000 stand-in agents in the baseline benchmark lost their verdict to PodFailed before this read.
The same for a fabric pod: its agent's result in this group and rank stands (64 passing nodes of
the 10,000-node fabric benchmark lost theirs before that read).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from gpuval_api.fabric import (
    build_fabric_status,
    build_operator_fabric_status,
    build_planned_fabric_status,
)
from gpuval_api.reasons import Reason
from gpuval_api.report import StatusKey
from gpuval_api.result import Verdict
from gpuval_devtools.controlplane import Cluster
from gpuval_operator import names
from gpuval_operator.config import OperatorConfig
from gpuval_operator.control.driver import written_meanwhile
from gpuval_operator.control.fabric import driver as fabric_driver
from gpuval_operator.fabric.plan import GroupPlan
from gpuval_operator.fabric.state import FabricState
from gpuval_operator.kube.client import KubeClient, q
from gpuval_operator.kube.credentials import load_credentials
from gpuval_operator.planning import Candidate, build_report
from gpuval_operator.run.effects import REPORTS_PATH, Effects
from gpuval_operator.run.state import NodeRecord, Phase, RunState
from gpuval_operator.timestamps import rfc3339
from tests.support.fleets import fabric_results

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("install_crds")]


def completed(verdict: str, reason: str | None, message: str) -> dict[str, Any]:
    """The status an agent writes when it is done (the fields the operator reads)."""
    now = rfc3339(time.time())
    return {
        StatusKey.PHASE: "Completed",
        StatusKey.VERDICT: verdict,
        StatusKey.REASON: reason,
        StatusKey.MESSAGE: message,
        StatusKey.STARTED_AT: now,
        StatusKey.COMPLETED_AT: now,
    }


CREATED: list[str] = []  # the reports this module made, deleted at its end


class Scene:
    """One validation's run with one node, its report on the API server."""

    def __init__(self, client: KubeClient, validation: str, run_id: str, node: str) -> None:
        self.client = client
        self.effects = Effects(client, OperatorConfig(), name=validation, uid="0")
        self.run = RunState(
            validation=validation,
            run_id=run_id,
            number=1,
            generation=1,
            trigger="created",
            started_at=time.time(),
        )
        self.record: NodeRecord = self.run.add(
            node,
            8,
            names.report_name(validation, run_id, node),
            names.pod_name(validation, run_id, node),
        )

    async def create_report(self, run_id: str | None = None) -> None:
        run = self.run
        CREATED.append(self.record.report)
        body = build_report(run.validation, "0", run_id or run.run_id, Candidate(self.node, 8))
        body["metadata"].pop("ownerReferences")  # no validation object: no garbage collection
        body["metadata"]["name"] = self.record.report
        await self.client.request("POST", REPORTS_PATH, body=body)

    async def agent_writes(self, status: dict[str, Any]) -> None:
        path = f"{REPORTS_PATH}/{q(self.record.report)}/status"
        await self.client.merge_patch(path, {"status": status})

    @property
    def node(self) -> str:
        return self.record.node


async def steps(client: KubeClient, unique_name: Callable[[str], str]) -> None:
    passed = Scene(client, unique_name("late"), "1-aaaa", unique_name("node"))
    # No report, then a report without a verdict: the operator's verdict is to write.
    assert not await written_meanwhile(passed.effects, passed.run, passed.record)
    await passed.create_report()
    await passed.agent_writes({StatusKey.PHASE: "Running", StatusKey.MESSAGE: "burn"})
    assert not await written_meanwhile(passed.effects, passed.run, passed.record)
    assert passed.node not in passed.run.finished
    # The agent's verdict is in: the node gets it, and it is final.
    await passed.agent_writes(completed("Passed", None, "all checks passed"))
    assert await written_meanwhile(passed.effects, passed.run, passed.record)
    assert passed.record.phase is Phase.PASSED
    assert passed.node in passed.run.finished

    # A failure the agent found keeps its own reason, never PodFailed.
    failed = Scene(client, unique_name("late"), "1-bbbb", unique_name("node"))
    await failed.create_report()
    message = "GPU 3 computed wrong results"
    await failed.agent_writes(completed("Failed", str(Reason.BURN_MISMATCH), message))
    assert await written_meanwhile(failed.effects, failed.run, failed.record)
    record = failed.record
    assert (record.phase, record.reason, record.message) == (
        Phase.FAILED,
        Reason.BURN_MISMATCH,
        message,
    )

    # A verdict another run left in the report, or the previous attempt's (the report
    # not reset yet), is not this attempt's: the operator writes its own.
    other = Scene(client, unique_name("late"), "2-cccc", unique_name("node"))
    await other.create_report(run_id="1-cccc")
    await other.agent_writes(completed("Passed", None, "all checks passed"))
    assert not await written_meanwhile(other.effects, other.run, other.record)
    stale = Scene(client, unique_name("late"), "1-dddd", unique_name("node"))
    stale.record.stale_report = True
    await stale.create_report()
    await stale.agent_writes(completed("Passed", None, "all checks passed"))
    assert not await written_meanwhile(stale.effects, stale.run, stale.record)
    assert other.record.phase is stale.record.phase is Phase.PENDING


async def fabric_steps(client: KubeClient, unique_name: Callable[[str], str]) -> None:
    scene = Scene(client, unique_name("late"), "1-eeee", unique_name("node"))
    peer = unique_name("node")
    group = "fabric-1-g0"  # fabric_results' group
    nodes = (scene.node, peer)
    fabric = scene.run.fabric = FabricState()
    fabric.add_groups([GroupPlan(group, nodes)], lambda g, r: f"{g}-r{r}", 0.0, time.time())
    fabric.planned = fabric.cross_planned = True
    member = fabric.groups[group].members[0]
    await scene.create_report()

    async def read() -> bool:
        return await fabric_driver.written_meanwhile(scene.effects, scene.run, group, member)

    # The plan only, then the operator's own outcome: nothing of the agent's to keep.
    await scene.agent_writes({"fabric": build_planned_fabric_status(group, nodes, scene.node)})
    assert not await read()
    reason, text = Reason.POD_FAILED, "fabric pod ended without a fabric verdict"
    own = build_operator_fabric_status(group, nodes, scene.node, reason, text)
    await scene.agent_writes({"fabric": own})
    assert not await read()
    assert fabric.result(fabric.groups[group], member) is None, "nothing applied"
    # The agent's result in this group and rank: it stands, and the run has it.
    results = fabric_results(nodes, {})
    await scene.agent_writes({"fabric": build_fabric_status(results[0])})
    assert await read()
    found = fabric.result(fabric.groups[group], member)
    assert found is not None and found.verdict is Verdict.PASSED and found.by_agent
    # The same result read for another group of the node's (its cross-domain group): not this
    # group's, so the operator's outcome goes ahead.
    assert not await fabric_driver.written_meanwhile(
        scene.effects, scene.run, "fabric-1-x0", member
    )


Steps = Callable[[KubeClient, Callable[[str], str]], Awaitable[None]]


def run_steps(cluster: Cluster, steps: Steps, unique_name: Callable[[str], str]) -> None:
    """`steps` against the cluster's API server, the reports they made deleted after them."""

    async def scenario() -> None:
        async with KubeClient(load_credentials(str(cluster.kubeconfig))) as client:
            try:
                await steps(client, unique_name)
            finally:
                while CREATED:
                    await client.request("DELETE", f"{REPORTS_PATH}/{q(CREATED.pop())}")

    asyncio.run(scenario())


def test_a_fabric_agents_result_is_read_from_its_report_before_the_operator_writes_one(
    cluster: Cluster, unique_name: Callable[[str], str]
) -> None:
    run_steps(cluster, fabric_steps, unique_name)


def test_the_agents_verdict_is_read_from_its_report_before_the_operator_writes_one(
    cluster: Cluster, unique_name: Callable[[str], str]
) -> None:
    run_steps(cluster, steps, unique_name)
