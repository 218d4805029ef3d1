"""The nodes' GPUs as NVIDIA's DRA driver publishes them (spec.agent.devices dra): one list+watch of
the ResourceSlices of driver gpu.nvidia.com (a field selector on the server), each slice cut to its
node, pool and devices (gpuval_api.dra.parse_slice), and each node's devices kept as one
`NodeDevices` of a few hundred bytes (its devices' UUIDs, interned).

The driver publishes one pool per node, in one slice or a few; a node's devices are those of every
slice that names it, so a slice added, changed or deleted recomputes its node alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

from gpuval_api.dra import DRIVER, RESOURCE_SLICES_PATH, PublishedSlice, parse_slice
from gpuval_operator.devices import NodeDevices
from gpuval_operator.kube.client import KubeClient
from gpuval_operator.kube.follower import Follower

FIELD_SELECTOR = f"spec.driver={DRIVER}"


class SliceWatch:
    def __init__(
        self,
        client: KubeClient,
        validation: str,
        wake: Callable[[], None],
        changed: Callable[[str], None] = lambda _node: None,
    ) -> None:
        self.client = client
        self.validation = validation
        self.wake = wake
        # Told of each node whose devices changed (the node watch's gating looks again).
        self.changed = changed
        self.slices: dict[str, PublishedSlice] = {}
        self.nodes: dict[str, NodeDevices] = {}
        self._by_node: dict[str, set[str]] = {}
        self._listed: set[str] = set()
        self._task: asyncio.Task[None] | None = None
        self._follower: Follower | None = None

    @property
    def following(self) -> bool:
        return self._task is not None

    @property
    def synced(self) -> bool:
        return self._follower is not None and self._follower.synced.is_set()

    def follow(self) -> None:
        if self._task is not None:
            return
        follower = Follower(
            self.client,
            RESOURCE_SLICES_PATH,
            "",
            self._on_page,
            self._on_event,
            name=f"{self.validation}/resourceslices",
            field_selector=FIELD_SELECTOR,
        )
        self._follower = follower
        self._task = asyncio.create_task(follower.run(), name=f"{self.validation}-slices")

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None
            self._follower = None

    async def wait_synced(self, wait: float) -> bool:
        """Whether the slices are listed, waiting up to `wait` seconds."""
        deadline = time.monotonic() + wait
        while not self.synced and time.monotonic() < deadline:
            with contextlib.suppress(TimeoutError):
                follower = self._follower
                if follower is None:
                    return False
                await asyncio.wait_for(follower.synced.wait(), 0.2)
        return self.synced

    def devices(self, node: str) -> NodeDevices:
        return self.nodes.get(node) or NodeDevices()

    def _on_page(self, items: list[dict[str, Any]], first: bool, last: bool) -> None:
        if first:
            self._listed = set()
        for obj in items:
            self._update(obj)
            self._listed.add(str((obj.get("metadata") or {}).get("name") or ""))
        if last:
            for name in set(self.slices) - self._listed:
                self._remove(name)  # deleted while the watch was down
        self.wake()

    def _on_event(self, kind: str, obj: dict[str, Any]) -> None:
        if kind == "DELETED":
            self._remove(str((obj.get("metadata") or {}).get("name") or ""))
        else:
            self._update(obj)
        self.wake()

    def _update(self, obj: dict[str, Any]) -> None:
        published = parse_slice(obj)
        name = str((obj.get("metadata") or {}).get("name") or "")
        if published is None:
            self._remove(name)
            return
        old = self.slices.get(name)
        self.slices[name] = published
        if old is not None and old.node != published.node:
            self._by_node.get(old.node, set()).discard(name)
            self._recount(old.node)
        self._by_node.setdefault(published.node, set()).add(name)
        self._recount(published.node)

    def _remove(self, name: str) -> None:
        old = self.slices.pop(name, None)
        if old is not None:
            self._by_node.get(old.node, set()).discard(name)
            self._recount(old.node)

    def _recount(self, node: str) -> None:
        names = self._by_node.get(node) or set()
        old = self.nodes.get(node)
        if names:
            self.nodes[node] = NodeDevices.of(self.slices[n] for n in names)
        else:
            self.nodes.pop(node, None)
            self._by_node.pop(node, None)
        if self.nodes.get(node) != old:
            self.changed(node)
