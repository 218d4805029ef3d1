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


class Recorder:
    """An actor that records the order it acted in; acting on `arrive_at` lets `arriving`
    finish, as the report watch would while that node's patches are in flight."""

    def __init__(self, arrive_at: str, arriving: str) -> None:
        self.acted: list[str] = []
        self.arrive_at, self.arriving = arrive_at, arriving

    async def act(self, run: RunState, record: Any, spec: GpuValidationSpec, **_: Any) -> None:
        self.acted.append(record.node)
        if record.node == self.arrive_at:
            run.finish_node(self.arriving, Verdict.PASSED, None, "passed")


def test_with_a_limit_a_call_acts_on_that_many_and_leaves_the_rest_first_in_line() -> None:
    # While fabric groups wait to open, a run's tick acts on one slice of verdicts and opens
    # groups again before the next (control.driver.RunDriver.tick).
    run = RunState("fleet", "1-beef", 1, 1, "created", 1000.0)
    nodes = [f"n-{i}" for i in range(7)]
    for node in nodes:
        run.add(node, 8, f"report-{node}", f"pod-{node}")
    for node in nodes[:6]:
        run.finish_node(node, Verdict.PASSED, None, "passed")
    spec = GpuValidationSpec.model_validate({})
    driver, _ = _driver(run)
    recorder = Recorder("n-1", "n-6")
    driver.actor = recorder  # type: ignore[assignment]
    asyncio.run(driver.after_verdicts(run, spec, limit=4))
    assert recorder.acted == ["n-0", "n-1", "n-2", "n-3"]
    # The two left over wait ahead of the one that came in meanwhile.
    assert run.finished == ["n-4", "n-5", "n-6"]
    asyncio.run(driver.after_verdicts(run, spec, limit=2))
    assert recorder.acted[4:] == ["n-4", "n-5"]
    assert run.finished == ["n-6"]
    # Without a limit (the run's end), every one left, and any that come in meanwhile.
    recorder.arrive_at = "none"
    asyncio.run(driver.after_verdicts(run, spec))
    assert recorder.acted == nodes
    assert run.finished == []
