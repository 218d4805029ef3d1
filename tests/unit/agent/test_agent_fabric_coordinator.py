"""The agents' rendezvous over real TCP on loopback: who joins, who is refused, who is missing."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from gpuval_agent.fabric.coordinator import (
    Client,
    Forming,
    LostError,
    NotFormedError,
    RefusedError,
    Roster,
    Server,
    UnreachableError,
)
from gpuval_api.fabric import FabricWait, describe_wait
from gpuval_devtools.controlplane import free_port


def _hello(rank: int, world: int = 3, group: str = "g") -> dict[str, Any]:
    return {
        "type": "hello",
        "rank": rank,
        "world": world,
        "group": group,
        "node": f"n{rank}",
        "info": {"gpus": rank + 1},
    }


def _in_thread(work: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = work()
        except Exception as error:
            box["error"] = error

    thread = threading.Thread(target=run)
    thread.start()
    return thread, box


def _client(port: int, hello: dict[str, Any], seconds: float = 10.0) -> tuple[Client, Any]:
    client = Client(("127.0.0.1", port), f"127.0.0.1:{port}", threading.Event())
    return client, _in_thread(lambda: client.join(hello, time.monotonic() + seconds))


def test_a_group_meets_and_every_phase_is_gathered_to_every_node() -> None:
    port = free_port()
    server = Server(port, 3, "g", threading.Event())
    clients = [_client(port, _hello(rank)) for rank in (1, 2)]
    roster = server.join(_hello(0), time.monotonic() + 10)
    for _, (thread, box) in clients:
        thread.join()
        assert box["value"] == roster
    assert roster == Roster(nodes=["n0", "n1", "n2"], infos=[{"gpus": 1}, {"gpus": 2}, {"gpus": 3}])
    exchanges = [
        _in_thread(lambda c=c, r=r: c.exchange("s", {"from": r}, 10))
        for r, (c, _) in zip((1, 2), clients, strict=True)
    ]
    gathered = server.exchange("s", {"from": 0}, 10)
    assert gathered == [{"from": 0}, {"from": 1}, {"from": 2}]
    for thread, box in exchanges:
        thread.join()
        assert box["value"] == gathered
    for client, _ in clients:
        client.close()
    server.close()


def test_a_rank_taken_twice_and_a_wrong_world_are_refused_by_name() -> None:
    port = free_port()
    server = Server(port, 3, "g", threading.Event())
    server_thread, server_box = _in_thread(lambda: server.join(_hello(0), time.monotonic() + 4))
    first = _client(port, _hello(1))
    until = time.monotonic() + 10
    while 1 not in server._clients and time.monotonic() < until:  # rank 1 is the first one's
        time.sleep(0.01)
    twice = _client(port, _hello(1))
    wrong_world = _client(port, _hello(2, world=4))
    for _, (thread, box) in (twice, wrong_world):
        thread.join()
        assert isinstance(box["error"], RefusedError)
    assert "rank 1 joined twice" in str(twice[1][1]["error"])
    assert "world 4 differs from rank 0's world 3" in str(wrong_world[1][1]["error"])
    server_thread.join()
    assert isinstance(server_box["error"], NotFormedError) and server_box["error"].missing == [2]
    first[1][0].join()
    assert isinstance(first[1][1]["error"], NotFormedError)
    assert first[1][1]["error"].missing == [2]
    server.close()


def test_a_node_that_leaves_after_joining_reports_nothing_and_rank_0_goes_on() -> None:
    port = free_port()
    server = Server(port, 2, "g", threading.Event())
    client, (thread, _) = _client(port, _hello(1, world=2))
    server.join(_hello(0, world=2), time.monotonic() + 10)
    thread.join()
    client.close()
    assert server.exchange("group", {"ok": True}, 5) == [{"ok": True}, None]
    server.close()


def test_a_node_whose_rank_0_goes_away_says_it_lost_it() -> None:
    port = free_port()
    server = Server(port, 2, "g", threading.Event())
    client, (thread, _) = _client(port, _hello(1, world=2))
    server.join(_hello(0, world=2), time.monotonic() + 10)
    thread.join()
    server.close()
    with pytest.raises(LostError, match=f"rank 0 at 127.0.0.1:{port}"):
        client.exchange("group", {}, 5)
    client.close()


def test_nobody_listening_is_unreachable_naming_the_address_and_the_refusal() -> None:
    port = free_port()
    client = Client(("127.0.0.1", port), f"127.0.0.1:{port}", threading.Event())
    expected = f"rank 0's rendezvous at 127.0.0.1:{port}"
    with pytest.raises(UnreachableError, match=expected) as raised:
        client.join(_hello(1), time.monotonic() + 1.5)
    assert "ConnectionRefusedError" in raised.value.detail


def test_rank_0_on_a_busy_port_says_so() -> None:
    port = free_port()
    first = Server(port, 2, "g", threading.Event())
    try:
        with pytest.raises(UnreachableError, match=f"rank 0 cannot listen on port {port}"):
            Server(port, 2, "g", threading.Event())
    finally:
        first.close()


def test_a_forming_group_says_every_few_seconds_who_joined_from_where_and_who_is_missing() -> None:
    port = free_port()
    heard: list[FabricWait] = []
    forming = Forming("g", 3, f"127.0.0.1:{port}", ["n0", "n1", "n2"], heard.append, every=0.2)
    server = Server(port, 3, "g", threading.Event(), forming)
    client_heard: list[FabricWait] = []
    client = Client(
        ("127.0.0.1", port),
        f"127.0.0.1:{port}",
        threading.Event(),
        Forming("g", 3, f"127.0.0.1:{port}", None, client_heard.append, every=0.2),
    )
    thread, box = _in_thread(lambda: client.join(_hello(1), time.monotonic() + 10))
    with pytest.raises(NotFormedError):
        server.join(_hello(0), time.monotonic() + 2)
    thread.join()
    assert isinstance(box.get("error"), NotFormedError)
    last = heard[-1]
    assert [(r.rank, r.node, r.address) for r in last.joined] == [
        (0, "n0", f"127.0.0.1:{port}"),
        (1, "n1", "127.0.0.1"),
    ]
    assert [(r.rank, r.node) for r in last.waiting_for] == [(2, "n2")]
    assert 0 <= last.seconds_left < 2
    assert client_heard and client_heard[-1].rank == 1
    assert [r.rank for r in client_heard[-1].waiting_for] == [2]


def test_a_rank_that_cannot_reach_rank_0_says_so_with_its_last_error() -> None:
    port = free_port()
    heard: list[FabricWait] = []
    forming = Forming("g", 2, f"127.0.0.1:{port}", None, heard.append, every=0.2)
    client = Client(("127.0.0.1", port), f"127.0.0.1:{port}", threading.Event(), forming)
    with pytest.raises(UnreachableError):
        client.join(_hello(1, world=2), time.monotonic() + 1.5)
    assert heard and not heard[-1].connected and heard[-1].rank == 1
    assert "ConnectionRefusedError" in (heard[-1].last_error or "")
    assert describe_wait(heard[-1]).startswith(
        f"fabric group g: rank 1 cannot reach rank 0 at 127.0.0.1:{port} yet (last attempt: "
    )
