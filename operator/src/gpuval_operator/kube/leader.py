"""One active replica: leader election over a coordination.k8s.io Lease, before kopf watches.

kopf's peering only freezes replicas of equal priority; it elects no leader. So the operator
takes a Lease before its handlers start: a standby waits, renewing nothing, until the holder
has not renewed for a lease duration, then takes it. The leader renews every few seconds; one
that cannot renew within its deadline (the lease's duration less one renew interval after the
renewTime it last wrote, so no one else can hold it yet) exits at once rather than act beside a
new leader, and its pod restarts as a standby. However long an API call hangs: each renewal is
bounded by the time left to the deadline, and a watchdog thread, which needs nothing from the
event loop, ends the process half a renew interval after the deadline should the loop itself be
stuck. A new leader continues the run from its status, reports and pods (deterministic names, the
run id in the status), so a takeover duplicates no pod and loses no verdict. On a clean stop
(SIGTERM: a rolling update, `helm upgrade`) the leader releases the Lease once it acts no more, and
the standby, which watches the Lease, takes it at once.

A replica is ready (the chart's readiness probe, /readyz) when it leads, or when as a standby it
has read the Lease within a lease duration: it would see the leader go and take over. Its liveness
(/healthz) only asks that its event loop answers, so a standby cut off from the API server is not
ready (nothing routes to it; a PodDisruptionBudget counts it as down) but is not restarted.

`next_move` and `not_ready` are the pure decisions; `LeaderElector` makes the calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum, auto
from typing import Any

import aiohttp

from gpuval_operator.kube.client import ApiError, KubeClient, ResourceExpiredError, q
from gpuval_operator.timestamps import parse_time

log = logging.getLogger(__name__)


def micro_time(epoch: float) -> str:
    """A Lease's MicroTime."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


parse_micro_time = parse_time  # a MicroTime is RFC 3339 with microseconds


@dataclass(frozen=True, slots=True)
class LeaseFacts:
    exists: bool
    holder: str | None = None
    renewed: float | None = None
    duration: int = 0
    transitions: int = 0
    acquired: str | None = None
    resource_version: str | None = None

    @classmethod
    def parse(cls, obj: dict[str, Any] | None) -> LeaseFacts:
        if obj is None:
            return cls(exists=False)
        spec = obj.get("spec") or {}
        return cls(
            exists=True,
            holder=spec.get("holderIdentity") or None,
            renewed=parse_micro_time(spec.get("renewTime")),
            duration=int(spec.get("leaseDurationSeconds") or 0),
            transitions=int(spec.get("leaseTransitions") or 0),
            acquired=spec.get("acquireTime"),
            resource_version=(obj.get("metadata") or {}).get("resourceVersion"),
        )


class Move(Enum):
    CREATE = auto()  # no Lease yet
    TAKE = auto()  # held by no one, or its holder stopped renewing
    RENEW = auto()  # ours
    WAIT = auto()  # another replica leads


def next_move(lease: LeaseFacts, me: str, now: float) -> Move:
    if not lease.exists:
        return Move.CREATE
    if lease.holder == me:
        return Move.RENEW
    if lease.holder is None or lease.renewed is None or now >= lease.renewed + lease.duration:
        return Move.TAKE
    return Move.WAIT


def not_ready(*, leading: bool, lease_read: float | None, duration: int, now: float) -> str | None:
    """Why this replica is not ready, or None when it is: it leads, or it read the Lease (at
    `lease_read`, monotonic) less than `duration` seconds ago. Before its first read (start-up, or
    no leader election and the start-up not finished) it is not."""
    if leading:
        return None
    if lease_read is None:
        return "starting: not leading, and the leader Lease not read yet"
    age = now - lease_read
    if age > duration:
        return f"standby: the leader Lease last read {age:.0f}s ago (lease duration {duration}s)"
    return None


class LeaderElector:
    def __init__(
        self,
        client: KubeClient,
        *,
        namespace: str,
        name: str,
        identity: str,
        duration: int,
        renew: int,
    ) -> None:
        self.client, self.namespace, self.name = client, namespace, name
        self.identity, self.duration, self.renew = identity, duration, renew
        self.path = f"/apis/coordination.k8s.io/v1/namespaces/{q(namespace)}/leases"
        # time.monotonic() when the renewTime of the last successful take or renewal was read
        # off the clock: the Lease runs out `duration` after that, whatever the call took.
        self.renewed_at: float | None = None
        # The Lease as last read: a standby watches it from there.
        self.seen = LeaseFacts(exists=False)
        # time.monotonic() when the API server last answered a read of the Lease (not_ready).
        self.read_at: float | None = None

    def deadline(self) -> float:
        """The monotonic time by which this leader must have renewed or stopped acting."""
        return (self.renewed_at or 0.0) + self.duration - self.renew

    def _body(self, lease: LeaseFacts, now: float) -> dict[str, Any]:
        ours = lease.holder == self.identity
        metadata: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if lease.resource_version:
            metadata["resourceVersion"] = lease.resource_version  # optimistic concurrency
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": metadata,
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": self.duration,
                "acquireTime": lease.acquired if ours and lease.acquired else micro_time(now),
                "renewTime": micro_time(now),
                "leaseTransitions": lease.transitions + (0 if ours else 1),
            },
        }

    async def try_once(self) -> bool:
        """One attempt to take or renew the Lease; True when this replica holds it now."""
        started, now = time.monotonic(), time.time()
        lease = self.seen = await self._read()
        move = next_move(lease, self.identity, now)
        if move is Move.WAIT:
            return False
        try:
            if move is Move.CREATE:
                await self.client.create(self.path, self._body(lease, now))
            else:
                await self.client.request(
                    "PUT", f"{self.path}/{q(self.name)}", body=self._body(lease, now)
                )
        except ApiError as exc:
            if exc.status == 409:
                return False  # another replica moved first
            raise
        self.renewed_at = started
        if move is not Move.RENEW:
            log.info("leader: %s took lease %s/%s", self.identity, self.namespace, self.name)
        return True

    async def _read(self) -> LeaseFacts:
        lease = LeaseFacts.parse(await self.client.get_or_none(f"{self.path}/{q(self.name)}"))
        self.read_at = time.monotonic()
        return lease

    async def acquire(self) -> None:
        """Wait, as a standby, until this replica holds the Lease: tried again each time the
        Lease changes (a renewal, a release) and at least every renew interval."""
        announced = False
        while True:
            try:
                if await self.try_once():
                    return
            except (ApiError, OSError, TimeoutError, aiohttp.ClientError) as exc:
                log.warning("leader: could not read or take the lease: %s", exc)
            if not announced:
                log.info("leader: %s is standby; another replica holds the lease", self.identity)
                announced = True
            await self._until_changed()

    async def _until_changed(self) -> None:
        """Until the Lease changes or a renew interval passes: a watch of the one Lease from the
        version last read, so a leader's release is seen at once, not at the next poll (a sleep
        where the Lease cannot be watched)."""
        version = self.seen.resource_version
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.renew):
                if version:
                    try:
                        async for event in self.client.watch(
                            self.path, version, field_selector=f"metadata.name={self.name}"
                        ):
                            if event.get("type") != "BOOKMARK":
                                return
                    except (ApiError, ResourceExpiredError, OSError, aiohttp.ClientError) as exc:
                        log.debug("leader: cannot watch the lease (%s); polling it", exc)
                await asyncio.sleep(self.renew)

    async def release(self) -> bool:
        """Give the Lease up on a clean stop, as client-go's ReleaseOnCancel does: no holder and
        a duration of one second, so the standby (which watches it) takes it at once instead
        of after leaseDurationSeconds. Only while this replica still holds it, on the version
        read (another replica that moved first keeps it); True when released."""
        lease = await self._read()
        if lease.holder != self.identity or lease.resource_version is None:
            return False
        now = time.time()
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "resourceVersion": lease.resource_version,
            },
            "spec": {  # no holderIdentity: held by no one
                "leaseDurationSeconds": 1,
                "acquireTime": micro_time(now),
                "renewTime": micro_time(now),
                "leaseTransitions": lease.transitions,
            },
        }
        try:
            await self.client.request("PUT", f"{self.path}/{q(self.name)}", body=body)
        except ApiError as exc:
            if exc.status == 409:
                return False
            raise
        log.info("leader: %s released lease %s/%s", self.identity, self.namespace, self.name)
        return True

    async def keep(self, lost: Callable[[], None]) -> None:
        """Renew every `renew` seconds; call `lost` once, as soon as another replica holds the
        Lease or the deadline passes without a renewal (each attempt is cut off at the
        deadline), from the watchdog thread should the event loop not get there in time."""
        watchdog = Watchdog(self.deadline, grace=self.renew / 2, identity=self.identity)
        watchdog.start()
        try:
            while True:
                await asyncio.sleep(max(0.0, min(self.renew, self.deadline() - time.monotonic())))
                left = self.deadline() - time.monotonic()
                try:
                    if left > 0:
                        async with asyncio.timeout(left):
                            renewed = await self.try_once()
                        if renewed:
                            continue
                        log.error("leader: %s lost the lease to another replica", self.identity)
                        lost()
                        return
                except TimeoutError:
                    log.warning("leader: renewing did not finish before the deadline")
                except (ApiError, OSError, aiohttp.ClientError) as exc:
                    log.warning("leader: renewing failed: %s", exc)
                except Exception:
                    log.exception("leader: renewing failed")  # never ends the loop: it must exit
                if time.monotonic() >= self.deadline():
                    log.error("leader: %s could not renew within its deadline", self.identity)
                    lost()
                    return
        finally:
            # Reached only through `lost` (every error is caught above) or cancellation at
            # shut-down: either way nothing acts as leader from here on.
            watchdog.stop()


class Watchdog(threading.Thread):
    """Ends the process `grace` seconds after the leader's deadline unless a renewal moved it:
    a thread of its own, so neither a hung call nor a stuck event loop can keep a replica acting
    after its Lease could have gone to another. It writes its one line straight to stderr, as
    the logging module's locks may be held by the stuck thread."""

    def __init__(self, deadline: Callable[[], float], *, grace: float, identity: str) -> None:
        super().__init__(name="leader-watchdog", daemon=True)
        self.deadline, self.grace, self.identity = deadline, grace, identity
        self._stopped = threading.Event()

    def stop(self) -> None:
        self._stopped.set()

    def run(self) -> None:
        while not self._stopped.is_set():
            left = self.deadline() + self.grace - time.monotonic()
            if left <= 0:
                line = f"leader: {self.identity} could not renew within its deadline (watchdog)\n"
                os.write(2, line.encode())
                os._exit(1)
            self._stopped.wait(left)
