"""Where the API server's CPU went over a phase: its own CPU profiles (`/debug/pprof/profile`,
which kube-apiserver serves to the admin with `--profiling`, its default), taken back to back
through kubectl, summarised by `go tool pprof` into what the requests of each kind cost.

The fabric's rounds at 10,000 nodes are the whole simulated cluster's work on this machine's two
cores (docs/operator/fabric.md, "How the fabric scales"); the request counters (apiserver_requests)
say
how many requests came, a profile says what they cost. Go is on this machine already: the control
plane is built with it.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from apiserver_requests import kubectl_raw

# Each kind of work and the function whose cumulative time is that work's, in kube-apiserver
# v1.36. A function appears once in `pprof -top -cum`: its line is its total. The storage
# calls (registry.Store: a request's decode, admission, validation, field management, the etcd
# write) run apart from the handler that took the request, so they are counted there; the
# status writes are part of the updates.
_STORE = "k8s.io/apiserver/pkg/registry/generic/registry.(*Store)"
CATEGORIES: dict[str, str] = {
    "creates": f"{_STORE}.Create",
    "updates": f"{_STORE}.Update",
    "podStatusWrites": "k8s.io/kubernetes/pkg/registry/core/pod/storage.(*StatusREST).Update",
    "nodeStatusWrites": "k8s.io/kubernetes/pkg/registry/core/node/storage.(*StatusREST).Update",
    "customResourceStatusWrites": (
        "k8s.io/apiextensions-apiserver/pkg/registry/customresource.(*StatusREST).Update"
    ),
    "bindings": "k8s.io/kubernetes/pkg/registry/core/pod/storage.(*BindingREST).Create",
    "deletes": f"{_STORE}.Delete",
    "reads": f"{_STORE}.Get",
    "watches": "k8s.io/apiserver/pkg/endpoints/handlers.handleWatch",
    "clientCertificates": (
        "k8s.io/apiserver/pkg/authentication/request/x509.(*Authenticator).AuthenticateRequest"
    ),
    "tlsHandshakes": "crypto/tls.(*Conn).serverHandshake",
    "garbageCollection": "runtime.gcBgMarkWorker",
}

_TOTAL = re.compile(r"Total samples = ([0-9.]+)(ms|s|m|h)\b")
# "  flat flat% sum% cum cum% name": the cumulative seconds are the fourth column.
_LINE = re.compile(r"^\s*\S+\s+\S+%\s+\S+%\s+([0-9.]+)(ms|s|m|h)\s+\S+%\s+(.+?)(?: \(inline\))?$")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def categories(top: str) -> dict[str, float]:
    """CPU-seconds by kind of work, with `totalCpuSeconds`, from `go tool pprof -top -cum`'s
    text; a kind whose function is not in the profile is 0."""
    total = _TOTAL.search(top)
    if total is None:
        raise ValueError("not `go tool pprof -top` output: no 'Total samples' line")
    cum: dict[str, float] = {}
    for line in top.splitlines():
        m = _LINE.match(line)
        if m is not None:
            cum.setdefault(m.group(3), float(m.group(1)) * _UNIT[m.group(2)])
    out = {"totalCpuSeconds": round(float(total.group(1)) * _UNIT[total.group(2)], 2)}
    for name, function in CATEGORIES.items():
        out[name] = round(cum.get(function, 0.0), 2)
    return out


@dataclass
class Profile:
    started: float  # epoch seconds
    ended: float
    path: Path


@dataclass
class ApiserverProfiler:
    """Takes `seconds`-long CPU profiles of the API server back to back from `start` until
    `stop` (which waits for the one under way, so the phase is covered to its end), each into
    `directory`; `summaries` gives what each shows."""

    argv: Sequence[str]  # kubectl and its flags, without the command
    binary: Path  # the kube-apiserver that was profiled (pprof reads its symbols)
    directory: Path
    seconds: int = 20
    profiles: list[Profile] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _task: asyncio.Task[None] | None = None
    _stopping: bool = False

    def start(self) -> None:
        if self._task is None:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._task = asyncio.ensure_future(self._loop())

    async def stop(self) -> None:
        self._stopping = True
        if self._task is not None:
            try:
                await asyncio.wait_for(self._task, self.seconds + 30)
            except TimeoutError:
                self.errors.append("the last profile did not come back")

    async def _loop(self) -> None:
        while not self._stopping:
            started = time.time()
            path = f"/debug/pprof/profile?seconds={self.seconds}"
            code, out, err = await kubectl_raw(self.argv, path)
            if code != 0 or not out:
                self.errors.append(f"profile: exit {code}: {err}")
                if not self._stopping:
                    await asyncio.sleep(self.seconds)
                continue
            kept = self.directory / f"kube-apiserver-{len(self.profiles) + 1}.pprof"
            kept.write_bytes(out)
            self.profiles.append(Profile(started, time.time(), kept))

    def summaries(self, since: float) -> list[dict[str, object]]:
        """Each profile's figures, `offsetSeconds` from `since` (epoch seconds)."""
        go = shutil.which("go")
        if go is None:
            return [
                {"error": "no `go` on PATH to read the profiles", "profiles": len(self.profiles)}
            ]
        rows: list[dict[str, object]] = []
        for profile in self.profiles:
            top = _pprof_top(go, self.binary, profile.path)
            rows.append(
                {
                    "offsetSeconds": round(profile.started - since, 1),
                    "seconds": round(profile.ended - profile.started, 1),
                    "file": profile.path.name,
                    **categories(top),
                }
            )
        return rows


def _pprof_top(go: str, binary: Path, profile: Path) -> str:
    return subprocess.run(
        [
            go,
            "tool",
            "pprof",
            "-top",
            "-cum",
            "-nodecount=100000",
            "-nodefraction=0",
            str(binary),
            str(profile),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    ).stdout
