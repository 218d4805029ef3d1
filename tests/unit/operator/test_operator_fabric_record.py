"""The fabric's outcomes for members without a result are recorded at once, not one after the other
(gpuval_operator.control.fabric.driver.FabricDriver._record): each reads its node's report first
(written_meanwhile), and in a 10,000-node run hundreds came due together while the API server was
loaded; one after the other they held the tick for minutes and no group opened meanwhile. No
cluster: the effects are stand-ins that hold every report read until all of them are asked."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from gpuval_api.crd import GpuValidationSpec
from gpuval_api.reasons import Reason
from gpuval_operator.config import OperatorConfig
from gpuval_operator.control.fabric.driver import FabricDriver
from gpuval_operator.fabric.plan import GroupPlan
from gpuval_operator.run.effects import Effects
from gpuval_operator.run.state import NodeRecord, RunState
from tests.unit.operator.test_operator_fabric_life import RUN, _launched, fabric_run

NODES = tuple(f"n{i}" for i in range(8))


class HeldReads:
    """Effects whose report reads wait until `expected` reads are in flight at once."""

    bounded = Effects.bounded

    def __init__(self, expected: int) -> None:
        self.config = OperatorConfig()
        self.expected, self.in_flight, self.most = expected, 0, 0
        self.all_asked = asyncio.Event()
        self.written: dict[str, dict[str, Any]] = {}
        self.deleted: list[str] = []

    async def read_report(self, record: NodeRecord, run_id: str) -> None:
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        if self.in_flight == self.expected:
            self.all_asked.set()
        try:
            await asyncio.wait_for(self.all_asked.wait(), timeout=5)
        finally:
            self.in_flight -= 1

    async def write_report_status(self, record: NodeRecord, status: dict[str, Any]) -> bool:
        self.written[record.node] = status
        return True

    async def delete_pod_named(self, name: str) -> None:
        self.deleted.append(name)


class NoNodeGone:
    def unavailable(self, *_: Any) -> Mapping[str, Any]:
        return {}


def test_members_without_a_result_are_recorded_at_once() -> None:
    run = RunState("v", RUN, 1, 1, "created", 0.0)
    for node in NODES:
        run.add(node, 8, f"report-{node}", f"pod-{node}")
    fabric = run.fabric = fabric_run(GroupPlan("g1", NODES))
    # Half its pods started, long ago: the group did not form, every member is due.
    _launched(fabric, "g1", started={0, 1, 2, 3})
    effects = HeldReads(expected=len(NODES))
    driver = FabricDriver(
        effects=effects,  # type: ignore[arg-type]
        node_watch=NoNodeGone(),  # type: ignore[arg-type]
        ports=None,  # type: ignore[arg-type]
        annotations=dict,
        settled=lambda *_: None,
    )
    spec = GpuValidationSpec.model_validate(
        {"fabric": {"timeouts": {"gangSeconds": 60, "initSeconds": 40, "phaseSeconds": 20}}}
    )
    asyncio.run(driver._record(run, fabric, spec))
    # One after the other, the first read would have waited alone for the others (and timed out).
    assert effects.most == len(NODES)
    assert sorted(effects.written) == sorted(NODES)
    reasons = {status["fabric"]["reason"] for status in effects.written.values()}
    assert reasons == {str(Reason.FABRIC_GANG_NOT_FORMED)}
    # A node whose own pod never started is NotRun itself: a verdict the operator settled, which
    # the agents' admission policy keeps from being written over (issue 34 part 6). The others
    # keep their local verdict, and a rank's own result written as it stops still counts.
    settled = {node for node, status in effects.written.items() if status.get("settledBy")}
    assert settled == set(NODES[4:])
    assert len(effects.deleted) == len(NODES)
    assert run.dirty
