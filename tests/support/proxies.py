"""Network stand-ins a test controls, between a client and the real API server: a TCP relay whose
traffic can be stopped (a partition that holds connections open and forwards nothing) and an HTTP
forwarding proxy (CONNECT) that counts the tunnels it opened, as a corporate proxy would."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from urllib.parse import urlsplit

CHUNK = 65536


def host_port(url: str) -> tuple[str, int]:
    """The host and port an https URL (a kubeconfig's server) connects to."""
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or 443


class _Forwarder:
    """Accepts connections on a local port and pumps bytes both ways to a target; `stall()` makes
    every pump (of open and new connections) hold what it read and forward nothing, `resume()`
    lets the bytes flow again."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._flowing = threading.Event()
        self._flowing.set()
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self.connections = 0
        threading.Thread(target=self._accept, name=f"proxy-{self.port}", daemon=True).start()

    def stall(self) -> None:
        self._flowing.clear()

    def resume(self) -> None:
        self._flowing.set()

    def close(self) -> None:
        self._closed.set()
        self._flowing.set()
        self._listener.close()
        with self._lock:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                self._sockets.append(client)
                self.connections += 1
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _open(self, client: socket.socket) -> socket.socket | None:
        """The connection to the target for `client`, or None (the client was answered)."""
        raise NotImplementedError

    def _serve(self, client: socket.socket) -> None:
        try:
            upstream = self._open(client)
        except OSError:
            upstream = None
        if upstream is None:
            client.close()
            return
        with self._lock:
            self._sockets.append(upstream)
        threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()
        self._pump(client, upstream)

    def _pump(self, source: socket.socket, target: socket.socket) -> None:
        try:
            while True:
                data = source.recv(CHUNK)
                self._flowing.wait()  # stalled: hold what was read, read nothing more
                if not data or self._closed.is_set():
                    break
                target.sendall(data)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            target.shutdown(socket.SHUT_WR)


class Relay(_Forwarder):
    """A plain TCP relay to `target` (TLS passes through untouched, so the client still checks
    the API server's own certificate)."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        super().__init__()

    def _open(self, client: socket.socket) -> socket.socket | None:
        upstream = socket.create_connection(self.target, timeout=10)
        upstream.settimeout(None)
        return upstream


class ConnectProxy(_Forwarder):
    """An HTTP proxy that only tunnels (CONNECT host:port), as HTTPS through a proxy needs;
    `tunnels` lists the host:port of every tunnel it opened. `hosts` maps names only the proxy
    can resolve (a client that reaches such a name went through the proxy) to addresses."""

    def __init__(self, hosts: dict[str, str] | None = None) -> None:
        self.tunnels: list[str] = []
        self.hosts = dict(hosts or {})
        super().__init__()

    def _open(self, client: socket.socket) -> socket.socket | None:
        head = b""
        while b"\r\n\r\n" not in head:
            data = client.recv(CHUNK)
            if not data:
                return None
            head += data
        method, target, _ = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ", 2)
        if method != "CONNECT":
            client.sendall(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
            return None
        host, _, port = target.rpartition(":")
        address = self.hosts.get(host, host.strip("[]"))
        upstream = socket.create_connection((address, int(port)), timeout=10)
        upstream.settimeout(None)
        with self._lock:
            self.tunnels.append(target)
        client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        return upstream


@contextlib.contextmanager
def relay(target: tuple[str, int]) -> Iterator[Relay]:
    running = Relay(target)
    try:
        yield running
    finally:
        running.close()


@contextlib.contextmanager
def connect_proxy(hosts: dict[str, str] | None = None) -> Iterator[ConnectProxy]:
    running = ConnectProxy(hosts)
    try:
        yield running
    finally:
        running.close()
