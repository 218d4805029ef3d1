"""Watch events in, compact state out: how a validation's controller takes in its children.

The followers (gpuval_operator.children) hand every pod and report of the validation to these
callbacks; each is parsed once into a view, applied to the run and to the metrics read model,
and dropped. No I/O: the callbacks only set `dirty` and wake the controller's loop.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from gpuval_operator.fabricpodview import FabricPodView, is_fabric_pod
from gpuval_operator.registry import FabricNode, Untested, ValidationState
from gpuval_operator.state import Phase
from gpuval_operator.views import NodeResult, PodView, ReportView, run_number


class ChildIngest:
    def __init__(self, state: ValidationState, *, per_gpu: bool) -> None:
        self.state = state
        self.per_gpu = per_gpu
        self.wake = asyncio.Event()
        self.dirty = False
        self._listed_pods: set[str] = set()

    def _changed(self) -> None:
        self.dirty = True
        self.wake.set()

    def on_report(self, obj: dict[str, Any]) -> None:
        view = ReportView.parse(obj, per_gpu=self.per_gpu)
        if not view.node:
            return
        self.state.run_ids.add(view.run)
        if view.completed:
            self._remember(view)
        if view.fabric is not None and view.fabric.classified:
            self._remember_fabric(view)
        run = self.state.run
        if run is not None and run.apply_report(view):
            self._changed()

    def _remember(self, view: ReportView) -> None:
        """A completed report into the read model: tested verdicts and NotRun apart."""
        known = self.state.latest.get(view.node)
        newer = known is None or run_number(view.run) >= run_number(known.run)
        if view.tested and newer:
            self.state.latest[view.node] = NodeResult.of(view)
            self.state.untested.pop(view.node, None)
        elif not view.tested and view.node not in self.state.untested:
            since = view.completed_at or time.time()
            self.state.untested[view.node] = Untested(str(view.reason or ""), since)

    def _remember_fabric(self, view: ReportView) -> None:
        """A settled fabric verdict into the read model (the metrics' fabric series)."""
        fabric = view.fabric
        if fabric is None or fabric.verdict is None:
            return
        state = self.state
        known = state.fabric_nodes.get(view.node)
        if known is None or run_number(view.run) >= run_number(known.run):
            state.fabric_nodes[view.node] = FabricNode(view.run, fabric.verdict, fabric.reason)
        if fabric.busbw is None or run_number(view.run) < run_number(state.fabric_run):
            return
        if view.run != state.fabric_run:
            state.fabric_run, state.fabric_groups = view.run, {}
        state.fabric_groups[fabric.group] = fabric.busbw

    def on_reports_page(self, items: list[dict[str, Any]], first: bool, last: bool) -> None:
        for obj in items:
            self.on_report(obj)

    def on_report_event(self, kind: str, obj: dict[str, Any]) -> None:
        if kind != "DELETED":
            self.on_report(obj)

    def on_pod_event(self, kind: str, obj: dict[str, Any]) -> None:
        run = self.state.run
        if run is None:
            return
        if is_fabric_pod(obj):
            fabric = FabricPodView.parse(obj)
            run.apply_fabric_pod(fabric, time.monotonic(), time.time(), deleted=kind == "DELETED")
            self._changed()
            return
        view = PodView.parse(obj)
        if kind == "DELETED":
            run.apply_pod_deleted(view)
        else:
            run.apply_pod(view, time.monotonic())
        self._changed()

    def on_pods_page(self, items: list[dict[str, Any]], first: bool, last: bool) -> None:
        run = self.state.run
        if run is None:
            return
        if first:
            self._listed_pods = set()
        for obj in items:
            if is_fabric_pod(obj):
                fabric = FabricPodView.parse(obj)
                self._listed_pods.add(fabric.name)
                run.apply_fabric_pod(fabric, time.monotonic(), time.time())
                continue
            view = PodView.parse(obj)
            self._listed_pods.add(view.name)
            run.apply_pod(view, time.monotonic())
        if last:
            if run.fabric is not None:
                # Fabric pods deleted while the watch was down.
                for name, gone in list(run.fabric.pods.items()):
                    if name not in self._listed_pods:
                        run.apply_fabric_pod(gone, time.monotonic(), time.time(), deleted=True)
            # A pod that vanished while the watch was down is a deletion we did not see.
            for record in run.nodes.values():
                if (
                    record.phase is Phase.RUNNING
                    and record.pod_seen
                    and record.pod not in self._listed_pods
                ):
                    record.pod_gone = not record.deleted_by_us
            self._listed_pods = set()
        self.wake.set()
