"""The nodes a validation selects, followed by one label-selected list+watch: a node deleted or
gone NotReady mid-run is known at once, and spec.gating learns which nodes joined, rebooted or
changed their GPU stack. Each node is kept as a NodeFacts of a few hundred bytes.

Arrivals are batched: a node queued for gating waits until the oldest queued one is
`batch_seconds` old, then the whole batch joins the current run together.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from gpuval_api.crd import Gating, NodeTrigger
from gpuval_operator.capacity import NodeCapacity
from gpuval_operator.kube.client import KubeClient
from gpuval_operator.kube.follower import Follower
from gpuval_operator.nodes.facts import NodeFacts
from gpuval_operator.nodes.gating import gating_trigger
from gpuval_operator.nodes.slices import SliceWatch
from gpuval_operator.planning import Candidate
from gpuval_operator.proofage import NodeProof
from gpuval_operator.run.effects import NODES_PATH
from gpuval_operator.run.state import Phase, RunState

log = logging.getLogger(__name__)


class NodeWatch:
    def __init__(self, client: KubeClient, validation: str, wake: Callable[[], None]) -> None:
        self.client = client
        self.validation = validation
        self.wake = wake
        self.nodes: dict[str, NodeFacts] = {}
        # Deleted, NotReady, or Ready again after NotReady: known until a run looks at it.
        self.gone: set[str] = set()
        self.changed: set[str] = set()  # to look at again for gating
        self.queue: dict[str, tuple[NodeTrigger, float]] = {}
        self.synced = asyncio.Event()
        self.selector: str | None = None
        self.topology_key: str | None = None
        self._task: asyncio.Task[None] | None = None
        self._follower: Follower | None = None
        self._listed: set[str] = set()
        # The nodes' devices from their ResourceSlices, followed while the spec asks for DRA.
        self.slices = SliceWatch(client, validation, wake, self._slices_changed)
        self.dra = False

    # -- following --

    def follow(self, selector: str, topology_key: str | None = None, dra: bool = False) -> None:
        """(Re)start the list+watch for `selector` (the spec's nodeSelector as a query), keeping
        each node's value of `topology_key` (spec.fabric.topologyKey); with `dra`, the nodes'
        ResourceSlices too (spec.agent.devices dra)."""
        self.dra = dra
        if (self.selector, self.topology_key) != (selector, topology_key) or not self._task:
            self._restart(selector, topology_key)
        if dra:
            self.slices.follow()
        else:
            self.slices.stop()

    def _slices_changed(self, node: str) -> None:
        """A node's published devices changed: gating looks at it again (a DRA node joins when
        its slice appears, not when the node object does)."""
        self.changed.add(node)

    def _restart(self, selector: str, topology_key: str | None) -> None:
        self.stop()
        self.selector, self.topology_key, self.nodes = selector, topology_key, {}
        self.synced = asyncio.Event()
        follower = Follower(
            self.client,
            NODES_PATH,
            selector,
            self._on_page,
            self._on_event,
            name=f"{self.validation}/nodes",
        )
        self._follower = follower
        self._task = asyncio.create_task(self._run(follower), name=f"{self.validation}-nodes")

    async def _run(self, follower: Follower) -> None:
        waiter = asyncio.create_task(follower.synced.wait())
        waiter.add_done_callback(lambda _: self.synced.set())
        await follower.run()

    async def candidates(self, wait: float) -> list[Candidate] | None:
        """The selectable nodes in name order, from the watch's facts once it has listed them all
        (waiting up to `wait` seconds); None when it has not, or the API server refused the
        selector: the caller lists the nodes itself and learns why. With DRA, a node's GPUs are
        its ResourceSlices' devices, not what its device plugin advertises."""
        deadline = time.monotonic() + wait
        while not self.synced.is_set() and time.monotonic() < deadline:
            if self._follower_refused():
                return None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.synced.wait(), 0.2)
        if not self.synced.is_set():
            return None
        if self.dra:
            slices = self.slices
            if not await slices.wait_synced(max(deadline - time.monotonic(), 0.0)):
                return None
            found = ((v, slices.devices(v.name).count) for v in self.nodes.values())
            chosen = (Candidate(v.name, n) for v, n in found if v.available and n > 0)
        else:
            chosen = (
                Candidate(v.name, v.gpus, v.resources) for v in self.nodes.values() if v.selectable
            )
        return sorted(chosen, key=lambda c: c.name)

    def proofs(self, run: RunState | None) -> list[NodeProof] | None:
        """spec.maxProofAgeSeconds: the selectable nodes' proofs; None before the first list.
        A node of `run`, once it completed, counts as tested then until the watch shows the
        run's entry on it (its proof may not have arrived yet either)."""
        if not self.synced.is_set():
            return None
        done = run.completed_at if run is not None else None

        def unseen(v: NodeFacts) -> float | None:
            if run is None or done is None or v.name not in run.nodes:
                return None
            return done if v.entry is None or v.entry.run != run.run_id else None

        chosen = (v for v in self.nodes.values() if (v.available if self.dra else v.selectable))
        return [v.proof(unseen(v)) for v in chosen]

    def capacities(self, failed_gpus: Mapping[str, int]) -> list[NodeCapacity] | None:
        """Healthy capacity: every node the selector matches that has GPUs (the DRA driver's
        devices with DRA), whether or not it takes work now (a node gpuval took out of service,
        or one rebooting for its repair, still counts); None before the first list.
        `failed_gpus`: node -> GPUs its latest failed report names."""
        if not self.synced.is_set():
            return None
        found = []
        for v in self.nodes.values():
            gpus = self.slices.devices(v.name).count if self.dra else v.gpus
            if gpus > 0:
                found.append(v.capacity(gpus, failed_gpus.get(v.name, 0)))
        return found

    def without_devices(self) -> tuple[str, ...] | None:
        """With DRA, the selected nodes (Ready, schedulable) for which the driver publishes no
        device, by name (never candidates: nothing to claim); None without DRA or before the
        nodes and their slices are listed."""
        if not self.dra or not self.synced.is_set() or not self.slices.synced:
            return None
        found = (v.name for v in self.nodes.values() if v.available)
        return tuple(sorted(n for n in found if not self.slices.devices(n).count))

    def _follower_refused(self) -> bool:
        return self._follower is not None and self._follower.refused is not None

    def stop(self) -> None:
        self.slices.stop()
        if self._task is not None:
            self._task.cancel()
            self._task = None

    def _on_page(self, items: list[dict[str, Any]], first: bool, last: bool) -> None:
        if first:
            self._listed = set()
        for node in items:
            self._update(node)
            self._listed.add(node["metadata"]["name"])
        if last:
            for name in set(self.nodes) - self._listed:
                self._remove(name)  # deleted while the watch was down
        self.wake()

    def _on_event(self, kind: str, node: dict[str, Any]) -> None:
        if kind == "DELETED":
            self._remove((node.get("metadata") or {}).get("name", ""))
            self.wake()
        elif self._update(node):
            self.wake()  # not for a heartbeat: what is kept of the node is the same

    def refresh(self, node: dict[str, Any]) -> None:
        """A node as this operator just wrote it: kept at once, before its watch event comes (the
        repair loop decides on what it wrote, not on what the watch has not brought yet)."""
        if self.synced.is_set() and self.selector is not None:
            self._update(node)

    def _update(self, node: dict[str, Any]) -> bool:
        """Keeps the node's facts; whether they differ from what was kept."""
        facts = NodeFacts.parse(node, self.validation, self.topology_key)
        old = self.nodes.get(facts.name)
        self.nodes[facts.name] = facts
        if not facts.ready or (old is not None and not old.ready):
            self.gone.add(facts.name)
        if (
            old is None
            or (old.boot_id, old.stack, old.selectable)
            != (facts.boot_id, facts.stack, facts.selectable)
            or old.entry != facts.entry
        ):
            self.changed.add(facts.name)
        return old != facts

    def _remove(self, name: str) -> None:
        self.nodes.pop(name, None)
        self.queue.pop(name, None)
        self.gone.add(name)

    # -- what the run learns --

    def mark_gone(self, run: RunState) -> None:
        """Tell the run which of its nodes were deleted, and since when those NotReady are not
        Ready (a node Ready again is Ready again: its run goes on)."""
        for name in self.gone:
            record = run.nodes.get(name)
            if record is None or record.done:
                continue
            facts = self.nodes.get(name)
            if facts is None:
                record.node_gone = record.node_gone or record.phase is Phase.RUNNING
            else:
                record.not_ready = facts.not_ready
        self.gone = {
            n
            for n in self.gone
            if n in run.nodes and not run.nodes[n].done and n not in self.ready_now()
        }

    def domains(self, nodes: Iterable[str]) -> dict[str, str]:
        """Each node's topology domain ("" when it has none, or is not known)."""
        known = self.nodes
        return {n: known[n].domain or "" if n in known else "" for n in nodes}

    def ready_now(self) -> set[str]:
        """The nodes of `gone` that are Ready (nothing left to tell a run once it knows)."""
        return {n for n in self.gone if (f := self.nodes.get(n)) is not None and f.ready}

    def unavailable(
        self, names: Iterable[str], now: float, grace: float
    ) -> dict[str, tuple[float, str] | None]:
        """Of `names`, the nodes deleted (None) or NotReady for `grace` seconds or longer (since
        when and why), once the watch has listed the nodes."""
        if not self.synced.is_set():
            return {}
        found: dict[str, tuple[float, str] | None] = {}
        for name in names:
            facts = self.nodes.get(name)
            if facts is None:
                found[name] = None
            elif facts.not_ready is not None and now - facts.not_ready[0] >= grace:
                found[name] = facts.not_ready
        return found

    def look_for_arrivals(self, run: RunState | None, gating: Gating, now: float) -> None:
        """Queue the changed nodes that should join the run (new, rebooted, other stack)."""
        changed, self.changed = self.changed, set()
        for name in changed:
            facts = self.nodes.get(name)
            if facts is None or name in self.queue:
                continue
            record = run.nodes.get(name) if run is not None else None
            if self.dra:
                # With DRA its GPUs are its slices' devices, not its device plugin's.
                facts = dataclasses.replace(facts, gpus=self.slices.devices(name).count)
            trigger = gating_trigger(facts, gating, record)
            if trigger is not None:
                self.queue[name] = (trigger, now)
                log.info("%s: node %s queued (%s)", self.validation, name, trigger)

    def due_batch(self, gating: Gating, now: float) -> dict[str, NodeTrigger]:
        """The queued nodes, once the oldest has waited the batch window; else nothing."""
        if not self.queue:
            return {}
        oldest = min(first for _, first in self.queue.values())
        if now - oldest < gating.batch_seconds:
            return {}
        batch, self.queue = {n: t for n, (t, _) in self.queue.items()}, {}
        return batch

    def next_batch_at(self, gating: Gating) -> float | None:
        if not self.queue:
            return None
        return min(first for _, first in self.queue.values()) + gating.batch_seconds
