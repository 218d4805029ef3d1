"""How long a run's loop waits between ticks (control.controller.until_next_tick): a rest in
proportion to the tick it follows, capped by the status interval, then until a child changes."""

from __future__ import annotations

import asyncio

from gpuval_operator.control.controller import TICK_REST, until_next_tick

HOUR = 3600.0  # a status interval no test waits out: a wait that ends, ended on the wake


def _pace(busy: float, interval: float, *, woken: bool) -> tuple[list[float], bool]:
    """The rests asked for, and whether the wait was still on after the rest until woken."""
    rests: list[float] = []

    async def sleep(seconds: float) -> None:
        rests.append(seconds)

    async def go() -> bool:
        wake = asyncio.Event()
        if woken:
            wake.set()  # a child changed while the tick ran
        waiter = asyncio.create_task(until_next_tick(wake, busy, interval, sleep))
        for _ in range(20):
            await asyncio.sleep(0)
        waited = not waiter.done()
        wake.set()
        await waiter
        return waited

    return rests, asyncio.run(go())


def test_a_change_during_the_tick_is_kept_and_ends_the_wait_after_the_rest() -> None:
    rests, waited = _pace(0.05, HOUR, woken=True)
    assert rests == [0.05 * TICK_REST]
    assert not waited, "the wake set during the tick is not lost"


def test_without_a_change_the_loop_waits_past_the_rest_until_one() -> None:
    rests, waited = _pace(0.01, HOUR, woken=False)
    assert rests == [0.01 * TICK_REST]
    assert waited


def test_the_rest_after_a_long_tick_is_at_most_the_status_interval() -> None:
    rests, waited = _pace(30.0, 1.0, woken=True)
    assert rests == [1.0]
    assert not waited
