"""Every state of the nodes a test's validations act on, as the API server served it: a
`kubectl get nodes --watch` in the background counts the nodes gpuval holds out of service (its
gpuval.dev/unhealthy taint, or a cordon it made) after each event, and keeps the most seen at
once. Sampling by polling could miss a moment; a watch sees every change the API server made
(`watch` follows any other kind the same way)."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from gpuval_api import keys
from gpuval_devtools.controlplane import Cluster


def out_of_service(node: dict[str, Any]) -> tuple[bool, bool]:
    """(tainted by gpuval, cordoned by gpuval)."""
    spec = node.get("spec") or {}
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    tainted = any(t.get("key") == keys.TAINT_KEY for t in spec.get("taints") or [])
    cordoned = bool(spec.get("unschedulable")) and keys.NODE_ANNOTATION_CORDONED_BY in annotations
    return tainted, cordoned


class ServiceWatch:
    """The nodes of `selector` as the watch last saw them, and the most out of service at once."""

    def __init__(self) -> None:
        self.nodes: dict[str, tuple[bool, bool]] = {}
        self.events = 0
        self.most_cordoned = 0
        self.most_out = 0
        self._lock = threading.Lock()

    def apply(self, kind: str, node: dict[str, Any]) -> None:
        name = (node.get("metadata") or {}).get("name", "")
        with self._lock:
            self.events += 1
            if kind == "DELETED":
                self.nodes.pop(name, None)
            else:
                self.nodes[name] = out_of_service(node)
            self.most_cordoned = max(self.most_cordoned, self.cordoned())
            self.most_out = max(self.most_out, self.out())

    def cordoned(self, among: set[str] | None = None) -> int:
        return sum(1 for n, (_, c) in self.nodes.items() if c and (among is None or n in among))

    def out(self, among: set[str] | None = None) -> int:
        return sum(
            1 for n, (t, c) in self.nodes.items() if (t or c) and (among is None or n in among)
        )


class Sink(Protocol):
    def apply(self, kind: str, obj: dict[str, Any]) -> None: ...


def _read(stream: Any, seen: Sink) -> None:
    decoder = json.JSONDecoder()
    buffer = ""
    for line in stream:
        buffer += line
        while buffer.strip():
            try:
                event, end = decoder.raw_decode(buffer.lstrip())
            except ValueError:
                break  # an event not complete yet
            buffer = buffer.lstrip()[end:]
            seen.apply(event.get("type", ""), event.get("object") or {})


class WatchEndedError(RuntimeError):
    """kubectl's watch ended while the test relied on it."""


@contextmanager
def watch(cluster: Cluster, what: list[str], seen: Sink) -> Iterator[None]:
    """`kubectl get <what> --watch` while the block runs, each event given to `seen.apply`.

    The block starts once a plain `kubectl get <what>` succeeds: a kind whose CRD was just
    established may not be in the API server's discovery yet, and a watch started then exits at
    once ("the server doesn't have a resource type"), which would leave `seen` empty and the
    test waiting for what was made unseen. A watch that ends while the block runs (the API
    server closes watches now and then) is started again; its list replays what exists."""
    base = [str(cluster.binaries.kubectl), "--kubeconfig", str(cluster.kubeconfig), "get", *what]
    deadline = time.monotonic() + 60
    while True:
        probe = subprocess.run(base, capture_output=True, text=True, check=False)
        if probe.returncode == 0:
            break
        if time.monotonic() > deadline:
            raise WatchEndedError(f"kubectl get {' '.join(what)}: {probe.stderr.strip()}")
        time.sleep(0.5)
    command = [*base, "--watch", "--output-watch-events", "-o", "json"]
    stop = threading.Event()
    current: list[subprocess.Popen[str]] = []

    def follow() -> None:
        while not stop.is_set():
            proc = subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
            )
            current[:] = [proc]
            if stop.is_set():  # stopped while it started: the block's end saw no process
                proc.terminate()
            _read(proc.stdout, seen)
            proc.wait()
            if not stop.is_set():
                time.sleep(0.5)

    reader = threading.Thread(target=follow, daemon=True)
    reader.start()
    try:
        yield
    finally:
        stop.set()
        for proc in current:
            proc.terminate()
            proc.wait(timeout=10)
        reader.join(timeout=10)


@contextmanager
def watching(cluster: Cluster, selector: str = "") -> Iterator[ServiceWatch]:
    """Watch the nodes (of `selector`; every node without) while the block runs."""
    seen = ServiceWatch()
    with watch(cluster, ["nodes", *(["-l", selector] if selector else [])], seen):
        yield seen
