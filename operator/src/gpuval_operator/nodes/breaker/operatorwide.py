"""The operator-wide breaker: the nodes gpuval holds out of service, counted from the nodes and
reserved before a patch, so concurrent node patches of every validation this operator runs
cannot race past the limits (the decisions are gpuval_operator.nodes.breaker.rules's).

The nodes are the truth: one label-selected list (gpuval.dev/out-of-service, a handful of nodes)
gives every node gpuval holds out of service and, from each validation's entry on it, through
which validations and since when (gpuval_operator.nodes.breaker.rules.OutOfServiceNode). A restarted
operator, or the standby that takes the Lease, lists the same nodes and counts the same. Within
the operator, an admission and its reservation happen under one lock, and a reservation stands
until the node as the patch left it is known (the API server's answer, or the next list), so two
patches in flight never both take the last slot. One replica acts at a time (the leader Lease):
the breaker does not guard against two operators acting at once.

Listing is lazy: a grant may use the last list (only this operator adds nodes, and its own are
reserved), a hold lists again first when the last list is older than a second (a node may have
come back into service since), and any admission lists again past half a minute.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuval_api import keys
from gpuval_operator.kube.client import KubeClient, ResourceExpiredError
from gpuval_operator.nodes.breaker.rules import Limits, OutOfServiceNode, Tally, admit
from gpuval_operator.run.effects import NODES_PATH

log = logging.getLogger(__name__)

# A hold lists the nodes again when the last list is older than this (seconds).
RECOUNT_BEFORE_HOLD = 1.0
# Any admission lists them again past this (seconds), so the counts stay near the truth.
RECOUNT_ANYWAY = 30.0


@dataclass(slots=True)
class OutOfServiceCounts:
    """The nodes gpuval holds out of service as the breaker last counted them from the nodes: in
    all, by validation key, and the operator-wide limit (what the metrics export)."""

    limit: int = 0
    total: int = 0
    by_validation: dict[str, int] = field(default_factory=dict)


class OperatorBreaker:
    def __init__(
        self, client: KubeClient, limit: int, counts: OutOfServiceCounts | None = None
    ) -> None:
        self.client = client
        self.limit = limit
        self.tally = Tally()
        self.counts = counts or OutOfServiceCounts()
        self.counts.limit = limit
        self._lock = asyncio.Lock()
        self._listed_at = float("-inf")
        # Reserved nodes whose patch ended without telling how it left the node: kept reserved
        # until a list that began after this (monotonic) time shows them.
        self._unknown: dict[tuple[str, str], float] = {}

    async def admit(
        self, node: str, validation: str, approved_at: float, validation_limit: int
    ) -> str | None:
        """None: `validation` may take `node` out of service, and it is reserved until
        `patch_ended`; else the cause its taint and cordon are held for."""
        limits = Limits(validation_limit, self.limit)
        async with self._lock:
            if time.monotonic() - self._listed_at > RECOUNT_ANYWAY:
                await self._recount()
            cause = admit(self.tally, node, validation, approved_at, limits)
            if cause is not None and time.monotonic() - self._listed_at > RECOUNT_BEFORE_HOLD:
                await self._recount()
                cause = admit(self.tally, node, validation, approved_at, limits)
            if cause is None:
                self.tally.reserved.setdefault(node, set()).add(validation)
                self._publish()
            return cause

    def patch_ended(self, node: str, validation: str, patched: Mapping[str, Any] | None) -> None:
        """The patch of `node` for `validation` ended: `patched` is the node as the API server
        returned it, None when the outcome is unknown (the reservation then stands until a list
        shows the node)."""
        if patched is None:
            if validation in self.tally.reserved.get(node, ()):
                self._unknown[node, validation] = time.monotonic()
            return
        self.observe(patched)
        self.unreserve(node, validation)

    def unreserve(self, node: str, validation: str) -> None:
        """Drop `validation`'s reservation of `node` (unused: the patch was refused before it
        changed anything, or its outcome is now known)."""
        reservers = self.tally.reserved.get(node)
        if reservers is not None:
            reservers.discard(validation)
            if not reservers:
                del self.tally.reserved[node]
        self._publish()

    def observe(self, node: Mapping[str, Any]) -> None:
        """A node as gpuval just wrote it (any verdict): counted as it now stands."""
        found = OutOfServiceNode.parse(node)
        name = str((node.get("metadata") or {}).get("name", ""))
        if found is None:
            self.tally.nodes.pop(name, None)
        else:
            self.tally.nodes[name] = found
        self._publish()

    def free(self, validation: str, approved_at: float, validation_limit: int) -> tuple[int, int]:
        """Slots left (the validation's, the operator's) as last counted."""
        tally = self.tally
        return (
            validation_limit - tally.validation_count(validation, approved_at),
            self.limit - tally.operator_count(),
        )

    def counted(self, validation: str, approved_at: float) -> int:
        """Nodes out of service through `validation` that count against its own limit (out since
        its last release), as last counted."""
        return self.tally.validation_count(validation, approved_at)

    def out(self, nodes: Iterable[str]) -> set[str]:
        """Those of `nodes` gpuval holds out of service (or has reserved), as last counted."""
        return {n for n in nodes if self.tally.out(n)}

    async def recount(self, older_than: float = RECOUNT_ANYWAY) -> None:
        """List the nodes again when the last list is older than `older_than` seconds."""
        if time.monotonic() - self._listed_at <= older_than:
            return
        async with self._lock:
            if time.monotonic() - self._listed_at > older_than:
                await self._recount()

    async def _recount(self) -> None:
        began = time.monotonic()
        while True:
            listed: dict[str, OutOfServiceNode] = {}
            try:
                async for nodes, _, _ in self.client.pages(
                    NODES_PATH, keys.NODE_LABEL_OUT_OF_SERVICE
                ):
                    for node in nodes:
                        found = OutOfServiceNode.parse(node)
                        if found is not None:
                            listed[found.name] = found
            except ResourceExpiredError:
                continue
            break
        self.tally.nodes = listed
        for (name, validation), ended in list(self._unknown.items()):
            if ended < began:
                del self._unknown[name, validation]
                self.unreserve(name, validation)
        self._listed_at = began
        self._publish()

    def _publish(self) -> None:
        self.counts.total = self.tally.operator_count()
        self.counts.by_validation = dict(self.tally.by_validation())
