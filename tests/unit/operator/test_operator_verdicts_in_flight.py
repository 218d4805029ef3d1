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

import pytest

from gpuval_api.crd import GpuValidationSpec
from gpuval_api.reasons import Reason
from gpuval_api.result import Verdict
from gpuval_operator.control.driver import RunDriver
from gpuval_operator.control.runbreaker import RunBreaker
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


class Breaker(RunBreaker):
    async def revisit(self, run: RunState, spec: GpuValidationSpec) -> None:
        return None


class Baseline:
    async def on_verdicts(self, run: RunState) -> None:
        return None


def _driver(run: RunState) -> tuple[RunDriver, Actor]:
    driver = RunDriver.__new__(RunDriver)
    actor = Actor(run)
    driver.actor, driver.effects, driver.baseline = actor, Effects(), Baseline()  # type: ignore[assignment]
    driver.breaker = Breaker(
        effects=driver.effects,  # type: ignore[arg-type]
        actor=actor,  # type: ignore[arg-type]
        operator_breaker=None,
        node_watch=None,  # type: ignore[arg-type]
        annotations=dict,
    )

    async def progress(_force: bool) -> None:
        return None

    driver.progress = progress
    driver.acting = None
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


class Gated:
    """An actor that holds each node's actions until `go` is set, recording the order."""

    def __init__(self, fail_on: str | None = None) -> None:
        self.started: list[str] = []
        self.acted: list[str] = []
        self.go = asyncio.Event()
        self.fail_on = fail_on

    async def act(self, run: RunState, record: Any, spec: GpuValidationSpec, **_: Any) -> None:
        self.started.append(record.node)
        await self.go.wait()
        if record.node == self.fail_on:
            raise RuntimeError(f"node {record.node} could not be read")
        self.acted.append(record.node)


def _passing_run(count: int) -> tuple[RunState, list[str]]:
    run = RunState("fleet", "1-beef", 1, 1, "created", 1000.0)
    nodes = [f"n-{i}" for i in range(count)]
    for node in nodes:
        run.add(node, 8, f"report-{node}", f"pod-{node}")
    return run, nodes


def _behind(
    count: int, passed: int, gated: Gated
) -> tuple[RunState, list[str], GpuValidationSpec, RunDriver]:
    """A run of `count` nodes, the first `passed` with their verdict, and a driver whose actor
    is `gated`."""
    run, nodes = _passing_run(count)
    for node in nodes[:passed]:
        run.finish_node(node, Verdict.PASSED, None, "passed")
    driver, _ = _driver(run)
    driver.actor = gated  # type: ignore[assignment]
    return run, nodes, GpuValidationSpec.model_validate({}), driver


def test_node_actions_behind_the_ticks_take_verdicts_that_come_in_meanwhile() -> None:
    # While the fabric is under way, a tick starts the node actions and goes on (opening groups,
    # reading results); verdicts settled meanwhile are taken by the same actions, in order.
    gated = Gated()
    run, nodes, spec, driver = _behind(5, 3, gated)

    async def scenario() -> None:
        driver.act_behind(run, spec)
        await asyncio.sleep(0.01)
        assert gated.started == ["n-0"], "acting, the tick not waiting for it"
        assert gated.acted == []
        for node in nodes[3:]:
            run.finish_node(node, Verdict.PASSED, None, "passed")
        driver.act_behind(run, spec)  # the next tick: the same actions take them
        first = driver.acting
        gated.go.set()
        await driver.acted()
        assert first is not None and first.done()
        assert driver.acting is None

    asyncio.run(scenario())
    assert gated.acted == nodes
    assert run.finished == []
    assert run.acting is None


def test_node_actions_behind_the_ticks_stop_with_the_runs_loop() -> None:
    gated = Gated()
    run, _, spec, driver = _behind(3, 3, gated)

    async def scenario() -> asyncio.Task[None]:
        driver.act_behind(run, spec)
        task = driver.acting
        await asyncio.sleep(0.01)
        await driver.stop_acting()
        assert task is not None
        return task

    task = asyncio.run(scenario())
    assert task.cancelled()
    assert gated.started == ["n-0"] and gated.acted == []
    assert driver.acting is None
    assert run.acting is None


class Stubborn:
    """An actor whose node action takes a while to end once cancelled (a write in flight)."""

    async def act(self, run: RunState, record: Any, spec: GpuValidationSpec, **_: Any) -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            await asyncio.sleep(0.05)
            raise


def test_a_runs_loop_cancelled_while_its_node_actions_stop_stays_cancelled() -> None:
    # The operator stopping while a run's loop ends: the loop's own cancellation is not
    # swallowed with the one it gave its node actions.
    run, nodes = _passing_run(2)
    for node in nodes:
        run.finish_node(node, Verdict.PASSED, None, "passed")
    driver, _ = _driver(run)
    driver.actor = Stubborn()  # type: ignore[assignment]
    spec = GpuValidationSpec.model_validate({})

    async def loop() -> str:
        driver.act_behind(run, spec)
        await asyncio.sleep(0.01)
        await driver.stop_acting()
        return "ended"

    async def scenario() -> None:
        task = asyncio.create_task(loop())
        await asyncio.sleep(0.03)  # the loop waits for its node actions to stop
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())


def test_a_failure_of_the_node_actions_is_raised_by_the_next_tick_and_loses_no_verdict() -> None:
    # The API server out of reach past the client's retries: the pass fails on n-1, n-2 was
    # never reached. The next tick raises the failure; neither verdict is lost: the pass after
    # acts on the failed pass's verdicts, then on what came in meanwhile, in that order.
    gated = Gated(fail_on="n-1")
    gated.go.set()
    run, _, spec, driver = _behind(4, 3, gated)

    async def scenario() -> None:
        driver.act_behind(run, spec)
        await asyncio.sleep(0.01)
        with pytest.raises(RuntimeError, match="node n-1 could not be read"):
            driver.act_behind(run, spec)
        assert driver.acting is None
        assert gated.acted == ["n-0"]
        assert run.finished == ["n-0", "n-1", "n-2"]
        run.finish_node("n-3", Verdict.PASSED, None, "passed")
        gated.fail_on = None  # the API server is back
        driver.act_behind(run, spec)
        await driver.acted()

    asyncio.run(scenario())
    assert gated.acted == ["n-0", "n-0", "n-1", "n-2", "n-3"]
    assert run.finished == []
