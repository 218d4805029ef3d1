"""The agents' own rendezvous: rank 0's agent listens on ADDR:PORT, the others dial it.

Plain TCP and JSON lines, standard library only, so the real and the simulated backends meet
the same way and the CPU tests exercise the real code. It carries little: each node's hello
(name, GPU count), then one all-gather per phase (each node's report of the phase), so every
node sees the group's whole evidence and takes the same next step. It is not on NCCL's path:
the rank processes meet at their own store (PORT+1 and up), which a hung NCCL phase may take
down with it; this channel outlives a phase that hangs.

Messages: hello {rank, world, group, node, info} -> waiting {wait} (every few seconds while the
group forms) ... roster {nodes, infos} | abort {error} | refused {error}; step {step, payload} ->
gathered {step, payloads (null: no report)}.

While the group forms, every agent says every WAIT_REPORT_SECONDS what it waits for
(gpuval_api.fabric.FabricWait, to an `on_wait` callback): rank 0 which ranks joined (and from
where) and which it still waits for, and tells the joined ranks the same; a rank that cannot
reach rank 0 yet, its last connection error. Each with the time left before the init timeout.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpuval_agent.errors import AgentError
from gpuval_api.fabric import FabricWait, WaitingRank

SLACK_SECONDS = 15.0  # beyond a phase's own limit, for the slowest node's report to arrive
WAIT_REPORT_SECONDS = 5.0  # how often a forming group says what it waits for
_HELLO_SECONDS = 5.0  # a connection that says nothing for this long is not one of ours
_MAX_LINE = 16 << 20
_POLL = 0.2


class RendezvousError(AgentError):
    """The group could not meet or lost its coordinator."""


class UnreachableError(RendezvousError):
    """This node could not reach rank 0's coordinator (or rank 0 could not listen)."""

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail


class NotFormedError(RendezvousError):
    """Some nodes never joined within the init timeout."""

    def __init__(self, message: str, missing: list[int]) -> None:
        super().__init__(message)
        self.missing = missing


class RefusedError(RendezvousError):
    """Rank 0 refused this node's hello (wrong world, group or a rank taken twice)."""


class LostError(RendezvousError):
    """The connection to rank 0 ended before the measurement did."""


class StoppedError(RendezvousError):
    """SIGTERM/SIGINT arrived while waiting for the group."""


@dataclass
class Roster:
    nodes: list[str]
    infos: list[dict[str, Any]] = field(default_factory=list)


OnWait = Callable[[FabricWait], None]


@dataclass
class Forming:
    """Who a forming group is, to say what it waits for (`names`: node names by rank, when the
    agent was told them)."""

    group: str
    world: int
    master: str
    names: list[str] | None = None
    on_wait: OnWait | None = None
    every: float = WAIT_REPORT_SECONDS

    def name(self, rank: int) -> str | None:
        return self.names[rank] if self.names and rank < len(self.names) else None


class Channel:
    """JSON lines over one TCP connection."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._buffer = b""
        self._send_lock = threading.Lock()

    def send(self, message: dict[str, Any]) -> None:
        data = json.dumps(message, separators=(",", ":")).encode() + b"\n"
        with self._send_lock:
            self.sock.sendall(data)

    def receive(self, deadline: float | None) -> dict[str, Any] | None:
        """The next message; None when the peer closed; TimeoutError past the deadline."""
        while b"\n" not in self._buffer:
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError("no message before the deadline")
                self.sock.settimeout(remaining)
            else:
                self.sock.settimeout(None)
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                return None
            self._buffer += chunk
            if len(self._buffer) > _MAX_LINE:
                raise ValueError("a coordinator message over 16 MiB: not a gpuval agent")
        line, _, self._buffer = self._buffer.partition(b"\n")
        message = json.loads(line)
        if not isinstance(message, dict):
            raise ValueError("a coordinator message that is not a JSON object")
        return message

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()


def _wait(stop: threading.Event, seconds: float) -> None:
    if stop.wait(max(0.0, seconds)):
        raise StoppedError("stopped while waiting for the group")


class Server:
    """Rank 0's side: gathers every node's hello, then every phase's reports."""

    def __init__(
        self,
        port: int,
        world: int,
        group: str,
        stop: threading.Event,
        forming: Forming | None = None,
    ) -> None:
        self.port, self.world, self.group, self.stop = port, world, group, stop
        self.forming = forming or Forming(group=group, world=world, master=f":{port}")
        self._clients: dict[int, Channel] = {}
        self._gone: set[int] = set()
        self._inbox: dict[tuple[str, int], Any] = {}
        self._changed = threading.Condition()
        # Every address of the host, IPv6 too where it can (an IPv6 cluster's pod IPs).
        dual = socket.has_dualstack_ipv6()
        try:
            self._listener = socket.create_server(
                ("", port),
                family=socket.AF_INET6 if dual else socket.AF_INET,
                backlog=max(8, world),
                dualstack_ipv6=dual,
            )
        except OSError as error:
            raise UnreachableError(
                f"rank 0 cannot listen on port {port} for the group's rendezvous; pick a free "
                "port (--master ADDR:PORT)",
                str(error),
            ) from None
        self._listener.settimeout(_POLL)

    def _hello(self, channel: Channel) -> tuple[int, dict[str, Any]] | None:
        try:
            hello = channel.receive(time.monotonic() + _HELLO_SECONDS)
        except (OSError, ValueError):
            return None
        if hello is None or hello.get("type") != "hello":
            return None
        rank = hello.get("rank")
        problem = None
        if hello.get("group") != self.group:
            problem = f"group {hello.get('group')!r} is not rank 0's group {self.group!r}"
        elif hello.get("world") != self.world:
            problem = f"world {hello.get('world')} differs from rank 0's world {self.world}"
        elif not isinstance(rank, int) or not 1 <= rank < self.world:
            problem = f"rank {rank!r} is not between 1 and {self.world - 1}"
        elif rank in self._clients:
            problem = f"rank {rank} joined twice: give every node its own --rank"
        if problem is not None:
            with contextlib.suppress(OSError):
                channel.send({"type": "refused", "error": problem})
            return None
        assert isinstance(rank, int)
        return rank, hello

    def _say_waiting(
        self, hellos: dict[int, dict[str, Any]], addresses: dict[int, str], deadline: float
    ) -> None:
        """What rank 0 waits for: to its own `on_wait`, and to every rank that joined."""
        forming = self.forming
        wait = FabricWait(
            group=self.group,
            rank=0,
            world=self.world,
            master=forming.master,
            joined=[
                WaitingRank(rank=r, node=str(hellos[r].get("node")), address=addresses.get(r))
                for r in sorted(hellos)
            ],
            waiting_for=[
                WaitingRank(rank=r, node=forming.name(r))
                for r in range(self.world)
                if r not in hellos
            ],
            seconds_left=max(0.0, deadline - time.monotonic()),
        )
        if forming.on_wait is not None:
            forming.on_wait(wait)
        self._broadcast({"type": "waiting", "wait": wait.model_dump(mode="json", by_alias=True)})

    def join(self, own: dict[str, Any], deadline: float) -> Roster:
        hellos: dict[int, dict[str, Any]] = {0: own}
        addresses = {0: self.forming.master}
        next_report = time.monotonic() + self.forming.every
        while len(hellos) < self.world and time.monotonic() < deadline:
            _wait(self.stop, 0)
            if time.monotonic() >= next_report:
                next_report += self.forming.every
                self._say_waiting(hellos, addresses, deadline)
            try:
                sock, peer = self._listener.accept()
            except TimeoutError:
                continue
            channel = Channel(sock)
            joined = self._hello(channel)
            if joined is None:
                channel.close()
                continue
            self._clients[joined[0]] = channel
            hellos[joined[0]] = joined[1]
            addresses[joined[0]] = str(peer[0]).removeprefix("::ffff:")  # IPv4 as it is
        self._listener.close()
        missing = [r for r in range(self.world) if r not in hellos]
        if missing:
            error = f"rank(s) {', '.join(map(str, missing))} never joined"
            self._broadcast({"type": "abort", "error": error, "missing": missing})
            raise NotFormedError(error, missing)
        roster = Roster(
            nodes=[str(hellos[r].get("node")) for r in range(self.world)],
            infos=[dict(hellos[r].get("info") or {}) for r in range(self.world)],
        )
        self._broadcast({"type": "roster", "nodes": roster.nodes, "infos": roster.infos})
        for rank, channel in self._clients.items():
            threading.Thread(
                target=self._read, args=(rank, channel), name=f"fabric-rank{rank}", daemon=True
            ).start()
        return roster

    def _broadcast(self, message: dict[str, Any]) -> None:
        for rank, channel in list(self._clients.items()):
            try:
                channel.send(message)
            except OSError:
                with self._changed:
                    self._gone.add(rank)

    def _read(self, rank: int, channel: Channel) -> None:
        while True:
            try:
                message = channel.receive(None)
            except (OSError, ValueError):
                message = None
            with self._changed:
                if message is None:
                    self._gone.add(rank)
                    self._changed.notify_all()
                    return
                if message.get("type") == "step":
                    self._inbox[(str(message.get("step")), rank)] = message.get("payload")
                    self._changed.notify_all()

    def exchange(self, step: str, payload: Any, timeout: float) -> list[Any]:
        deadline = time.monotonic() + timeout
        others = [r for r in range(1, self.world)]

        def complete() -> bool:
            return all((step, r) in self._inbox or r in self._gone for r in others)

        with self._changed:
            while not complete() and time.monotonic() < deadline:
                if self.stop.is_set():
                    raise StoppedError("stopped while waiting for the group")
                self._changed.wait(min(_POLL * 5, max(0.0, deadline - time.monotonic())))
            payloads = [payload] + [self._inbox.pop((step, r), None) for r in others]
        self._broadcast({"type": "gathered", "step": step, "payloads": payloads})
        return payloads

    def close(self) -> None:
        for channel in self._clients.values():
            channel.close()
        with contextlib.suppress(OSError):
            self._listener.close()


class Client:
    """Every other rank's side: dials rank 0 until the init timeout, then follows its lead."""

    def __init__(
        self,
        address: tuple[str, int],
        shown: str,
        stop: threading.Event,
        forming: Forming | None = None,
    ) -> None:
        self.address, self.shown, self.stop = address, shown, stop
        self.forming = forming or Forming(group="", world=0, master=shown)
        self._channel: Channel | None = None
        self._rank = 0

    def _say(self, wait: FabricWait) -> None:
        if self.forming.on_wait is not None:
            self.forming.on_wait(wait)

    def _unreached(self, last: str | None, deadline: float) -> FabricWait:
        forming = self.forming
        return FabricWait(
            group=forming.group,
            rank=self._rank,
            world=max(forming.world, 1),
            master=self.shown,
            connected=False,
            seconds_left=max(0.0, deadline - time.monotonic()),
            last_error=last,
        )

    def _connect(self, deadline: float) -> Channel:
        last = "no attempt"
        next_report = time.monotonic() + self.forming.every
        while True:
            _wait(self.stop, 0)
            if time.monotonic() >= next_report:
                next_report += self.forming.every
                self._say(self._unreached(last, deadline))
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise UnreachableError(f"could not reach rank 0's rendezvous at {self.shown}", last)
            try:
                sock = socket.create_connection(self.address, timeout=min(5.0, remaining))
            except OSError as error:
                last = f"{type(error).__name__}: {error}"
                _wait(self.stop, min(0.5, max(0.0, deadline - time.monotonic())))
                continue
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return Channel(sock)

    def join(self, hello: dict[str, Any], deadline: float) -> Roster:
        self._rank = int(hello.get("rank") or 0)
        self._channel = self._connect(deadline)
        try:
            self._channel.send(hello)
            answer = self._receive(deadline + SLACK_SECONDS)
            while answer.get("type") == "waiting":
                self._heard_waiting(answer, deadline)
                answer = self._receive(deadline + SLACK_SECONDS)
        except OSError as error:
            raise LostError(f"rank 0 at {self.shown} dropped the connection: {error}") from None
        kind = answer.get("type")
        if kind == "refused":
            raise RefusedError(f"rank 0 at {self.shown} refused this node: {answer.get('error')}")
        if kind == "abort":
            missing = [int(r) for r in answer.get("missing") or []]
            raise NotFormedError(str(answer.get("error")), missing)
        if kind != "roster":
            raise LostError(f"rank 0 at {self.shown} answered {kind!r} instead of the roster")
        nodes = [str(n) for n in answer.get("nodes") or []]
        infos = [dict(i) for i in answer.get("infos") or []]
        return Roster(nodes=nodes, infos=infos)

    def _heard_waiting(self, message: dict[str, Any], deadline: float) -> None:
        """Rank 0 said what the group still waits for: say it as this rank's own wait."""
        try:
            wait = FabricWait.model_validate(message.get("wait"))
        except ValueError:
            return  # a newer rank 0's words this agent cannot read: nothing to say
        left = max(0.0, deadline - time.monotonic())
        self._say(wait.model_copy(update={"rank": self._rank, "seconds_left": left}))

    def _receive(self, deadline: float) -> dict[str, Any]:
        assert self._channel is not None
        while True:
            try:
                message = self._channel.receive(min(deadline, time.monotonic() + 1.0))
            except TimeoutError:
                _wait(self.stop, 0)
                if time.monotonic() >= deadline:
                    raise LostError(f"rank 0 at {self.shown} went silent") from None
                continue
            except ValueError as error:
                raise LostError(f"rank 0 at {self.shown} sent garbage: {error}") from None
            if message is None:
                raise LostError(f"rank 0 at {self.shown} closed the connection")
            return message

    def exchange(self, step: str, payload: Any, timeout: float) -> list[Any]:
        assert self._channel is not None
        deadline = time.monotonic() + timeout + SLACK_SECONDS
        try:
            self._channel.send({"type": "step", "step": step, "payload": payload})
            while True:
                message = self._receive(deadline)
                if message.get("type") == "gathered" and message.get("step") == step:
                    return list(message.get("payloads") or [])
        except OSError as error:
            raise LostError(f"rank 0 at {self.shown} dropped the connection: {error}") from None

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
