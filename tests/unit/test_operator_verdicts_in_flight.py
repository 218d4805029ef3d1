"""The systemic hold sees every failure it gates (control.driver.RunDriver.after_verdicts): a
failure that arrives while the previous verdicts' node actions are in flight is gated by systemic
counts that include it, not by the counts taken before it came (an integration run of
test_operator_breaker.py tainted 2 of 4 nodes failing with one reason that way). No cluster: the
actor and the effects are stand-ins that record what the gate saw.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable
from typing import Any

from gpuval_api.crd import GpuValidationSpec
from gpuval_api.reasons import Reason
from gpuval_api.result import Verdict
from gpuval_operator.control.driver import RunDriver
from gpuval_operator.control.holds import HoldKeeper
from gpuval_operator.run.state import RunState

NODES = ("bad-0", "bad-1", "bad-2", "bad-3", "ok-0", "ok-1")


class Effects:
    async def bounded(
        self, jobs: Iterable[Awaitable[None]], concurrency: int | None = None
    ) -> None:
        for job in jobs:
            await job


class Actor:
    """Records, per node acted on, whether its reason was held for the run (AwaitingRun or
    Systemic); acting on the first passed node lets two failures arrive, as the report watch
    would while that node's patches are in flight."""

    def __init__(self, run: RunState) -> None:
        self.run, self.seen, self.arrived = run, {}, False

    async def act(self, run: RunState, record: Any, spec: GpuValidationSpec, **_: Any) -> None:
        breaker, reason = run.breaker, str(record.reason)
        held = reason in breaker.undecided or reason in breaker.systemic_reasons()
        self.seen[record.node] = held
        if not self.arrived:
            self.arrived = True
            for node in ("bad-0", "bad-1"):
                run.finish_node(node, Verdict.FAILED, Reason.BURN_MISMATCH, "miscompare")


class Holds(HoldKeeper):
    async def settle(self, run: RunState, spec: GpuValidationSpec) -> None:
        return None


class Baseline:
    async def on_verdicts(self, run: RunState) -> None:
        return None


def _driver(run: RunState) -> tuple[RunDriver, Actor]:
    driver = RunDriver.__new__(RunDriver)
    actor = Actor(run)
    driver.actor, driver.effects, driver.baseline = actor, Effects(), Baseline()  # type: ignore[assignment]
    driver.holds = Holds(
        effects=driver.effects,  # type: ignore[arg-type]
        actor=actor,  # type: ignore[arg-type]
        ledger=None,
        node_watch=None,  # type: ignore[arg-type]
        annotations=dict,
    )

    async def progress(_force: bool) -> None:
        return None

    driver.progress = progress
    return driver, actor


def test_a_failure_that_arrives_while_earlier_verdicts_are_acted_on_is_held_for_the_run() -> None:
    run = RunState("fleet", "1-beef", 1, 1, "created", 1000.0)
    for node in NODES:
        run.add(node, 8, f"report-{node}", f"pod-{node}")
    run.finish_node("ok-0", Verdict.PASSED, None, "passed")
    spec = GpuValidationSpec.model_validate({"nodeActions": {"taint": {"effect": "NoSchedule"}}})
    driver, actor = _driver(run)
    asyncio.run(driver.after_verdicts(run, spec))
    # Two of six failed with one reason and four are still to come: it may yet be systemic
    # (3 of at least systemicMinNodes, more than half), so neither failure's actions may go.
    assert actor.seen == {"ok-0": False, "bad-0": True, "bad-1": True}
    assert str(Reason.BURN_MISMATCH) in run.breaker.undecided
