"""Watch events in, facts out: how a validation's controller takes in its children.

The followers (gpuval_operator.kube.follower) hand every pod and report of the validation to these
callbacks; each object is parsed once into its facts, applied to the run (gpuval_operator.run.state)
and to the read model (gpuval_operator.readmodel.validation), and dropped. No I/O: the callbacks
only mark the run's status as behind and wake the controller's loop.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from gpuval_operator.fabric.podfacts import FabricPodFacts, is_fabric_pod
from gpuval_operator.podfacts import PodFacts
from gpuval_operator.readmodel.validation import ValidationState
from gpuval_operator.run.facts import ReportFacts
from gpuval_operator.run.state import Phase, RunState


class ChildIngest:
    def __init__(self, state: ValidationState, *, per_gpu: bool) -> None:
        self.state = state
        self.per_gpu = per_gpu
        self.wake = asyncio.Event()
        self._listed_pods: set[str] = set()

    def _changed(self, run: RunState) -> None:
        run.dirty = True
        self.wake.set()

    def on_report(self, obj: dict[str, Any]) -> None:
        report = ReportFacts.parse(obj, per_gpu=self.per_gpu)
        if not report.node:
            return
        self.state.run_ids.add(report.run)
        if report.completed:
            self.state.remember(report)
        self.state.remember_history(report)
        if self.state.fabric_settled(report):
            self.state.remember_fabric(report)
        run = self.state.run
        if run is not None and run.apply_report(report):
            self._changed(run)

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
            fabric = FabricPodFacts.parse(obj)
            run.apply_fabric_pod(fabric, time.monotonic(), time.time(), deleted=kind == "DELETED")
        elif kind == "DELETED":
            run.apply_pod_deleted(PodFacts.parse(obj), time.monotonic())
        else:
            run.apply_pod(PodFacts.parse(obj), time.monotonic())
        self._changed(run)

    def on_pods_page(self, items: list[dict[str, Any]], first: bool, last: bool) -> None:
        run = self.state.run
        if run is None:
            return
        if first:
            self._listed_pods = set()
        for obj in items:
            if is_fabric_pod(obj):
                fabric = FabricPodFacts.parse(obj)
                self._listed_pods.add(fabric.name)
                run.apply_fabric_pod(fabric, time.monotonic(), time.time())
                continue
            pod = PodFacts.parse(obj)
            self._listed_pods.add(pod.name)
            run.apply_pod(pod, time.monotonic())
        if last:
            if run.fabric is not None:
                # Fabric pods deleted while the watch was down.
                for name, gone in list(run.fabric.pods.items()):
                    if name not in self._listed_pods:
                        run.apply_fabric_pod(gone, time.monotonic(), time.time(), deleted=True)
            # A pod that vanished while the watch was down is a deletion we did not see; one
            # seen ending before it went is an end (RunState.apply_pod_deleted says why).
            for record in run.nodes.values():
                if (
                    record.phase is Phase.RUNNING
                    and record.pod_seen
                    and record.pod not in self._listed_pods
                    and record.terminal_since is None
                ):
                    record.pod_gone = not record.deleted_by_us
            self._listed_pods = set()
        self.wake.set()
