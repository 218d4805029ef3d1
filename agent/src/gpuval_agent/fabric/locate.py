"""Rank 0's address for a rank whose group's pods were all made at once (the operator makes every
fabric group so, a Kueue pod group included; docs/operator/fabric.md, "The fabric phase",
"Rendezvous"):
GPUVAL_FABRIC_MASTER_POD names rank 0's pod and the port, and this rank reads the pod (`get`, in
its own namespace) until it has an IP (`status.podIP`: with hostNetwork, its node's), saying every
few seconds what it waits for.

Why a read and not DNS: a headless Service's name for a fresh pod can take ~30 s to resolve and
PyTorch's TCPStore does not retry (pytorch/pytorch#73682), and these clusters need not run
cluster DNS at all; the pod's IP is in the API server as soon as its sandbox exists. The group's
pods are made (or admitted by Kueue) together, so rank 0's pod has its IP within seconds of this
one's start unless its GPUs are held by other work. The wait ends at
the gang timeout (the operator gives the group up then); a rank that could not learn the address
is NotRun (FabricGangNotFormed): nothing was tested against its node.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gpuval_agent.errors import AgentError
from gpuval_agent.fabric.coordinator import StoppedError
from gpuval_agent.kube import TransientApiError
from gpuval_api.kubernetes import PodPhase

# First re-read after this long, then each wait half as long again, up to the cap: a group's
# ranks find rank 0 within a second or two of admission, and a rank whose rank 0 cannot start
# asks the API server at most once per cap for the rest of the gang timeout.
FIRST_POLL_SECONDS = 0.25
MAX_POLL_SECONDS = 2.0
SAY_EVERY_SECONDS = 5.0

# A pod by name: the pod as the API server has it, None while it does not exist.
ReadPod = Callable[[str], Mapping[str, Any] | None]


class MasterUnknownError(AgentError):
    """Rank 0's address could not be learnt: the group cannot meet."""


@dataclass(frozen=True, slots=True)
class MasterPod:
    """Rank 0's pod (in this pod's namespace) and the rendezvous port it listens on."""

    name: str
    port: int

    @property
    def text(self) -> str:
        return f"pod {self.name}:{self.port}"


def parse_master_pod(text: str, source: str) -> MasterPod:
    """POD:PORT (a pod name holds no ':'); AgentError naming `source` otherwise."""
    name, _, port = text.strip().rpartition(":")
    if not name or not port.isdigit() or not 0 < int(port) < 65530:
        raise AgentError(
            f"{source}={text!r} is not POD:PORT (rank 0's pod name and its rendezvous port, "
            "e.g. gpuval-fleet-1-ab12-g1-r0:29500); the operator sets it"
        )
    return MasterPod(name, int(port))


def pod_ip(pod: Mapping[str, Any] | None) -> str | None:
    """The pod's IP once it has one (its sandbox exists); None before, or for no pod."""
    if pod is None:
        return None
    return ((pod.get("status") or {}).get("podIP")) or None


def _state(pod: Mapping[str, Any] | None) -> str:
    if pod is None:
        return "it does not exist"
    status = pod.get("status") or {}
    gated = (pod.get("spec") or {}).get("schedulingGates")
    where = (pod.get("spec") or {}).get("nodeName") or "no node yet"
    phase = status.get("phase") or PodPhase.PENDING
    return f"{phase}, {'scheduling gates on, ' if gated else ''}{where}, no IP yet"


def locate_master(
    read: ReadPod,
    master: MasterPod,
    *,
    seconds: float,
    stop: threading.Event,
    say: Callable[[str], None],
    clock: Callable[[], float] = time.monotonic,
) -> tuple[str, int]:
    """Rank 0's (IP, port), read from its pod for at most `seconds`. MasterUnknownError when it
    has no IP by then, or the API server refused the read; StoppedError on SIGTERM/SIGINT."""
    deadline = clock() + seconds
    delay, next_say, last = FIRST_POLL_SECONDS, clock() + SAY_EVERY_SECONDS, "no answer yet"
    while True:
        try:
            pod = read(master.name)
        except TransientApiError as error:
            last = f"the API server did not answer: {error}"
        except AgentError as error:
            raise MasterUnknownError(str(error)) from None
        else:
            ip = pod_ip(pod)
            if ip is not None:
                return ip, master.port
            last = _state(pod)
        now = clock()
        if now >= deadline:
            raise MasterUnknownError(
                f"rank 0's address never came: {master.text} ({last}) within {seconds:.0f} s "
                "(fabric.timeouts.gangSeconds); the group did not form"
            )
        if now >= next_say:
            next_say = now + SAY_EVERY_SECONDS
            say(f"waiting for rank 0's address: {master.text}: {last}; {deadline - now:.0f} s left")
        if stop.wait(min(delay, max(0.0, deadline - now))):
            raise StoppedError("stopped while waiting for rank 0's address")
        delay = min(delay * 1.5, MAX_POLL_SECONDS)
