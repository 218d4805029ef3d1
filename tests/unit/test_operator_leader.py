"""The leader Lease's pure decision: create, take, renew or wait."""

from __future__ import annotations

from gpuval_operator.kube.leader import LeaseFacts, Move, micro_time, next_move, parse_micro_time


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


def test_lease_times_round_trip_with_microseconds() -> None:
    assert parse_micro_time(micro_time(1764500000.123456)) == 1764500000.123456
    assert parse_micro_time("garbage") is None
