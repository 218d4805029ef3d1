"""The leader Lease's pure decision (create, take, renew or wait), and a leader that cannot renew
stopping at its deadline however long a call hangs or the event loop is stuck."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

from gpuval_operator.kube.leader import (
    LeaderElector,
    LeaseFacts,
    Move,
    micro_time,
    next_move,
    not_ready,
    parse_micro_time,
)


def test_no_lease_is_created_and_ours_is_renewed() -> None:
    assert next_move(LeaseFacts(exists=False), "me", 100.0) is Move.CREATE
    mine = LeaseFacts(exists=True, holder="me", renewed=99.0, duration=15)
    assert next_move(mine, "me", 100.0) is Move.RENEW


def test_a_live_leader_is_waited_for_and_a_dead_one_replaced() -> None:
    theirs = LeaseFacts(exists=True, holder="them", renewed=100.0, duration=15)
    assert next_move(theirs, "me", 114.9) is Move.WAIT
    assert next_move(theirs, "me", 115.0) is Move.TAKE
    released = LeaseFacts(exists=True, holder=None, renewed=100.0, duration=15)
    assert next_move(released, "me", 101.0) is Move.TAKE


def test_a_replica_is_ready_when_it_leads_or_read_the_lease_within_its_duration() -> None:
    """/readyz: a leader is ready; a standby once it read the Lease, until a lease duration
    passes without another read (it could not see the leader go); nothing before the first."""
    assert not_ready(leading=True, lease_read=None, duration=15, now=100.0) is None
    starting = not_ready(leading=False, lease_read=None, duration=15, now=100.0)
    assert starting is not None and "not read yet" in starting
    assert not_ready(leading=False, lease_read=85.0, duration=15, now=100.0) is None
    stale = not_ready(leading=False, lease_read=80.0, duration=15, now=100.0)
    assert stale is not None and "20s ago" in stale and "15s" in stale


def test_lease_times_round_trip_with_microseconds() -> None:
    assert parse_micro_time(micro_time(1764500000.123456)) == 1764500000.123456
    assert parse_micro_time("garbage") is None


class _HangingRenewals(LeaderElector):
    """A leader whose renewals never answer, as when its traffic to the API server is stopped."""

    async def try_once(self) -> bool:
        await asyncio.Event().wait()
        return True


def test_a_renewal_that_hangs_is_cut_off_at_the_deadline_and_the_leader_stops() -> None:
    elector = _HangingRenewals(
        None,  # type: ignore[arg-type]  # never called: try_once is the stand-in
        namespace="ns",
        name="lease",
        identity="me",
        duration=3,
        renew=1,
    )
    lost: list[float] = []

    async def lead() -> None:
        elector.renewed_at = time.monotonic()
        await asyncio.wait_for(elector.keep(lambda: lost.append(time.monotonic())), 60)

    asyncio.run(lead())
    assert len(lost) == 1
    assert elector.renewed_at is not None
    # Stopped at the deadline (a renew interval before the Lease could be taken), not later.
    assert elector.deadline() <= lost[0] < elector.renewed_at + elector.duration


def test_the_watchdog_ends_a_process_whose_event_loop_is_stuck() -> None:
    """The loop never gets to its deadline check (it is blocked in a synchronous call): the
    watchdog thread ends the process anyway, with exit code 1 and one line on stderr."""
    program = (
        "import asyncio, time\n"
        "from gpuval_operator.kube.leader import Watchdog\n"
        "start = time.monotonic()\n"
        "Watchdog(lambda: start + 0.2, grace=0.1, identity='me').start()\n"
        "async def stuck():\n"
        "    time.sleep(30)\n"
        "asyncio.run(stuck())\n"
        "print('still acting')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=25, check=False
    )
    assert done.returncode == 1
    assert "me could not renew within its deadline (watchdog)" in done.stderr
    assert "still acting" not in done.stdout
