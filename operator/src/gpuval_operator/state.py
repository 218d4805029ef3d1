"""What the operator remembers per node: a few hundred bytes, parsed once from each watch event.

Pods and reports arrive as whole objects (tens of KiB with the agent's result document); they are
cut down to the fields the decisions need (`PodView`, `ReportView`) and dropped. `RunState` holds
one run's nodes and applies the views; `due_failures` is the pure decision of which running nodes
have failed without a verdict from their agent. Everything here is pure and synchronous: the
reconciler does the I/O.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import IntEnum
from typing import Any

from gpuval_api.reasons import Reason
from gpuval_operator import names


class Phase(IntEnum):
    PENDING = 0
    RUNNING = 1
    PASSED = 2
    FAILED = 3


def parse_time(text: str | None) -> float | None:
    """Epoch seconds of an RFC 3339 timestamp, None for None or garbage."""
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def run_number(run_id: str) -> int:
    """The number in a run id `<number>-<suffix>`; 0 for an id of another form."""
    head = run_id.split("-", 1)[0]
    return int(head) if head.isdigit() else 0


@dataclass(slots=True)
class PodView:
    name: str
    node: str
    run: str
    phase: str
    created: float
    scheduled: bool
    unschedulable: str | None
    evicted: bool
    exit_code: int | None
    deleting: bool
    oom_killed: bool = False

    @classmethod
    def parse(cls, pod: Mapping[str, Any]) -> PodView:
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        status = pod.get("status") or {}
        labels = meta.get("labels") or {}
        annotations = meta.get("annotations") or {}
        scheduled = bool(spec.get("nodeName"))
        unschedulable = None
        evicted = status.get("reason") == "Evicted"
        for cond in status.get("conditions") or []:
            if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
                unschedulable = cond.get("message") or cond.get("reason") or "unschedulable"
            if (
                cond.get("type") == "DisruptionTarget"
                and cond.get("status") == "True"
                and cond.get("reason") in ("EvictionByEvictionAPI", "TerminationByKubelet")
            ):
                evicted = True
        exit_code = None
        oom_killed = False
        for cs in status.get("containerStatuses") or []:
            terminated = (cs.get("state") or {}).get("terminated")
            if terminated is not None:
                exit_code = terminated.get("exitCode")
                # The kubelet's word for the kernel's OOM kill under the container's limit; the
                # exit code alone (137) cannot tell it from any other SIGKILL.
                oom_killed = oom_killed or terminated.get("reason") == "OOMKilled"
        return cls(
            name=meta.get("name", ""),
            node=annotations.get(names.ANNOTATION_NODE) or spec.get("nodeName") or "",
            run=labels.get(names.LABEL_RUN, ""),
            phase=status.get("phase") or "Pending",
            created=parse_time(meta.get("creationTimestamp")) or 0.0,
            scheduled=scheduled,
            unschedulable=unschedulable,
            evicted=evicted,
            exit_code=exit_code,
            deleting=bool(meta.get("deletionTimestamp")),
            oom_killed=oom_killed,
        )


# Environment fields compared across nodes for uniformity, in output order.
UNIFORMITY_FIELDS = (
    "driverVersion",
    "cudaDriverVersion",
    "ncclVersion",
    "gpuProduct",
    "gpuCount",
    "vbios",
    "kernel",
    "eccEnabled",
    "migMode",
    "persistenceMode",
)

# Figures of the report summary exported per node: summary key -> (metric suffix, factor to base
# units).
SUMMARY_FIGURES: dict[str, tuple[str, float]] = {
    "burnTflops": ("burn_flops_per_second", 1e12),
    "h2dGBps": ("h2d_bytes_per_second", 1e9),
    "d2hGBps": ("d2h_bytes_per_second", 1e9),
    "deviceCopyGBps": ("device_copy_bytes_per_second", 1e9),
    "p2pGBps": ("p2p_bytes_per_second", 1e9),
    "ncclBusbwGBps": ("nccl_busbw_bytes_per_second", 1e9),
    "maxTemperatureCelsius": ("max_temperature_celsius", 1.0),
}

# Per-GPU figures (check, metric key in the result document) -> (metric suffix, factor).
GPU_FIGURES: dict[tuple[str, str], tuple[str, float]] = {
    ("burn", "tflops"): ("burn_flops_per_second", 1e12),
    ("burn", "maxTemperatureCelsius"): ("max_temperature_celsius", 1.0),
    ("bandwidth", "h2dGBps"): ("h2d_bytes_per_second", 1e9),
    ("bandwidth", "d2hGBps"): ("d2h_bytes_per_second", 1e9),
    ("bandwidth", "deviceCopyGBps"): ("device_copy_bytes_per_second", 1e9),
}


def _distinct(values: list[Any]) -> str | None:
    present = sorted(
        {str(v).lower() if isinstance(v, bool) else str(v) for v in values if v is not None}
    )
    return sys.intern(",".join(present)) if present else None


def environment_fingerprint(result: Mapping[str, Any] | None) -> dict[str, str]:
    """The uniformity fields of an agent result document (docs/contracts.md), absent ones left
    out.

    Per-GPU fields (model, VBIOS, modes) become the node's distinct values joined by ',' so a node
    with mixed GPUs differs from a uniform one. Strings are interned: 10,000 nodes share a handful
    of versions.
    """
    if not result:
        return {}
    env = result.get("environment") or {}
    gpus = env.get("gpus") or []
    raw: dict[str, str | None] = {
        "driverVersion": env.get("driverVersion"),
        "cudaDriverVersion": env.get("cudaDriverVersion"),
        "ncclVersion": env.get("ncclVersion"),
        "gpuProduct": _distinct([g.get("name") for g in gpus]),
        "gpuCount": str(env["gpuCount"]) if env.get("gpuCount") is not None else None,
        "vbios": _distinct([g.get("vbios") for g in gpus]),
        "kernel": env.get("kernel"),
        "eccEnabled": _distinct([g.get("eccEnabled") for g in gpus]),
        "migMode": _distinct([g.get("migMode") for g in gpus]),
        "persistenceMode": _distinct([g.get("persistenceMode") for g in gpus]),
    }
    return {k: sys.intern(str(v)) for k, v in raw.items() if v is not None}


def failed_checks(failures: Any) -> tuple[tuple[str, str], ...]:
    """(check, reason) of every distinct failure a report lists, in report order.

    A node's headline reason is its first failure only; the burn alert must still fire when a
    node fails an earlier check (health, say) and its burn as well.
    """
    if not isinstance(failures, list):
        return ()
    seen: dict[tuple[str, str], None] = {}
    for entry in failures:
        if isinstance(entry, Mapping):
            check, reason = entry.get("check"), entry.get("reason")
            if isinstance(check, str) and isinstance(reason, str):
                seen.setdefault((check, reason), None)
    return tuple(seen)


def gpu_figures(result: Mapping[str, Any] | None) -> tuple[tuple[int, str, float], ...]:
    """(gpu index, metric suffix, value in base units) for each per-GPU figure of a result
    document.
    """
    if not result:
        return ()
    out: list[tuple[int, str, float]] = []
    for check in result.get("checks") or []:
        for gpu in check.get("gpus") or []:
            for key, value in (gpu.get("metrics") or {}).items():
                figure = GPU_FIGURES.get((check.get("name", ""), key))
                if figure is not None and isinstance(value, int | float):
                    out.append((int(gpu.get("index", -1)), figure[0], float(value) * figure[1]))
    return tuple(out)


@dataclass(slots=True)
class ReportView:
    name: str
    node: str
    run: str
    phase: str
    verdict: str | None
    reason: str | None
    message: str
    completed_at: float | None
    gpus: int | None
    summary: dict[str, float]
    environment: dict[str, str]
    gpu_figures: tuple[tuple[int, str, float], ...]
    failed_checks: tuple[tuple[str, str], ...] = ()

    @property
    def completed(self) -> bool:
        return self.phase == "Completed" and self.verdict in ("Passed", "Failed")

    @classmethod
    def parse(cls, report: Mapping[str, Any], *, per_gpu: bool = False) -> ReportView:
        meta = report.get("metadata") or {}
        spec = report.get("spec") or {}
        status = report.get("status") or {}
        annotations = meta.get("annotations") or {}
        summary = status.get("summary") or {}
        result = status.get("result")
        gpus = annotations.get(f"{names.PREFIX}/gpus", "")
        return cls(
            name=meta.get("name", ""),
            node=spec.get("node", ""),
            run=spec.get("run", ""),
            phase=status.get("phase") or "Pending",
            verdict=status.get("verdict"),
            reason=status.get("reason"),
            message=(status.get("message") or "")[:300],
            completed_at=parse_time(status.get("completedAt")),
            gpus=int(gpus) if gpus.isdigit() else None,
            summary={
                k: float(v)
                for k, v in summary.items()
                if k in SUMMARY_FIGURES and isinstance(v, int | float)
            },
            environment=environment_fingerprint(result),
            gpu_figures=gpu_figures(result) if per_gpu else (),
            failed_checks=failed_checks(status.get("failures")),
        )


@dataclass(slots=True)
class NodeResult:
    """A node's latest completed verdict, kept for metrics and uniformity."""

    run: str
    verdict: str
    reason: str | None
    completed_at: float | None
    summary: dict[str, float]
    environment: dict[str, str]
    gpu_figures: tuple[tuple[int, str, float], ...]
    failed_checks: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, view: ReportView) -> NodeResult:
        return cls(
            run=view.run,
            verdict=view.verdict or "Failed",
            reason=view.reason,
            completed_at=view.completed_at,
            summary=view.summary,
            environment=view.environment,
            gpu_figures=view.gpu_figures,
            failed_checks=view.failed_checks,
        )


@dataclass(slots=True)
class NodeRecord:
    node: str
    gpus: int
    report: str
    pod: str
    phase: Phase = Phase.PENDING
    # Its report exists: only then may its pod start (the agent writes to that report).
    planned: bool = False
    pod_seen: bool = False
    pod_created: float | None = None
    pod_phase: str | None = None
    scheduled: bool = False
    unschedulable: str | None = None
    evicted: bool = False
    exit_code: int | None = None
    oom_killed: bool = False
    pod_gone: bool = False
    terminal_since: float | None = None
    deleted_by_us: bool = False
    reason: str | None = None
    message: str = ""

    @property
    def done(self) -> bool:
        return self.phase >= Phase.PASSED


@dataclass(frozen=True, slots=True)
class Failure:
    """A running node that failed without a verdict from its agent."""

    node: str
    reason: Reason
    message: str
    delete_pod: bool
    # NodeGone takes precedence: the reconciler looks the node up before recording `reason`.
    check_node: bool


@dataclass(slots=True)
class RunState:
    """One run of one GpuValidation: its nodes and their progress."""

    validation: str
    run_id: str
    number: int
    generation: int
    trigger: str
    started_at: float
    nodes: dict[str, NodeRecord] = field(default_factory=dict)
    completed_at: float | None = None
    finished: list[str] = field(default_factory=list)

    def add(self, node: str, gpus: int, report: str, pod: str) -> NodeRecord:
        record = self.nodes.get(node)
        if record is None:
            record = self.nodes[node] = NodeRecord(
                node=sys.intern(node), gpus=gpus, report=report, pod=pod
            )
        return record

    def counts(self) -> dict[str, int]:
        counts = {"total": len(self.nodes), "pending": 0, "running": 0, "passed": 0, "failed": 0}
        for record in self.nodes.values():
            counts[record.phase.name.lower()] += 1
        return counts

    def running(self) -> int:
        return sum(1 for r in self.nodes.values() if r.phase is Phase.RUNNING)

    def pending(self) -> Iterator[NodeRecord]:
        """Nodes waiting for their wave whose report exists."""
        return (r for r in self.nodes.values() if r.phase is Phase.PENDING and r.planned)

    def all_done(self) -> bool:
        return all(r.done for r in self.nodes.values())

    def failed(self) -> list[NodeRecord]:
        return sorted(
            (r for r in self.nodes.values() if r.phase is Phase.FAILED), key=lambda r: r.node
        )

    def finish_node(self, node: str, passed: bool, reason: str | None, message: str) -> bool:
        """Record a verdict; False when the node already had one (the first verdict stands)."""
        record = self.nodes.get(node)
        if record is None or record.done:
            return False
        record.phase = Phase.PASSED if passed else Phase.FAILED
        record.reason = None if passed else (reason or str(Reason.CHECK_ERROR))
        record.message = message[:300]
        self.finished.append(node)
        return True

    def apply_report(self, view: ReportView) -> bool:
        """Apply a report of this run; True when it gave its node a verdict."""
        if view.run != self.run_id:
            return False
        record = self.nodes.get(view.node)
        if record is None:
            gpus = view.gpus or 0
            record = self.add(
                view.node, gpus, view.name, names.pod_name(self.validation, self.run_id, view.node)
            )
        record.planned = True
        if view.completed:
            return self.finish_node(view.node, view.verdict == "Passed", view.reason, view.message)
        return False

    def apply_pod(self, view: PodView, now: float) -> None:
        if view.run != self.run_id:
            return
        record = self.nodes.get(view.node)
        if record is None:
            return
        record.pod_seen = True
        record.pod_created = view.created or record.pod_created
        if record.phase is Phase.PENDING:
            record.phase = Phase.RUNNING
        terminal = view.phase in ("Succeeded", "Failed")
        if terminal and record.terminal_since is None:
            record.terminal_since = now
        record.pod_phase = view.phase
        record.scheduled = view.scheduled
        record.unschedulable = None if view.scheduled else view.unschedulable
        record.evicted = view.evicted
        record.exit_code = view.exit_code
        record.oom_killed = view.oom_killed

    def apply_pod_deleted(self, view: PodView) -> None:
        if view.run != self.run_id:
            return
        record = self.nodes.get(view.node)
        if record is not None and record.phase is Phase.RUNNING and not record.deleted_by_us:
            record.pod_gone = True
            # The Eviction API deletes the pod; its last state carries the DisruptionTarget mark.
            record.evicted = record.evicted or view.evicted


def due_failures(
    run: RunState, *, now: float, monotonic: float, timeout: float, grace: float
) -> list[Failure]:
    """Running nodes that have failed without their agent's verdict, and why.

    `now` is wall-clock time (compared with pod creation times, which survive an operator restart);
    `monotonic` is compared with when the operator saw a pod end, because the agent's report and the
    pod's end arrive on two different watches in either order: a pod that ended is given `grace`
    seconds for its report to show up.
    """
    failures: list[Failure] = []
    for r in run.nodes.values():
        if r.phase is not Phase.RUNNING:
            continue
        if r.pod_gone:
            failures.append(
                Failure(
                    r.node,
                    Reason.POD_EVICTED if r.evicted else Reason.POD_FAILED,
                    f"agent pod {r.pod} was "
                    + ("evicted" if r.evicted else "deleted")
                    + " before it finished",
                    False,
                    True,
                )
            )
        elif r.terminal_since is not None and monotonic - r.terminal_since >= grace:
            if r.evicted:
                failures.append(
                    Failure(
                        r.node, Reason.POD_EVICTED, f"agent pod {r.pod} was evicted", False, False
                    )
                )
            elif r.oom_killed:
                code = "" if r.exit_code is None else f" (exit code {r.exit_code})"
                failures.append(
                    Failure(
                        r.node,
                        Reason.POD_OOM_KILLED,
                        f"agent pod {r.pod} was OOM-killed{code} under its memory limit",
                        False,
                        False,
                    )
                )
            elif r.pod_phase == "Failed":
                code = "" if r.exit_code is None else f" with exit code {r.exit_code}"
                failures.append(
                    Failure(
                        r.node,
                        Reason.POD_FAILED,
                        f"agent pod {r.pod} failed{code} without writing a verdict",
                        False,
                        False,
                    )
                )
            else:
                failures.append(
                    Failure(
                        r.node,
                        Reason.POD_FAILED,
                        f"agent pod {r.pod} exited without writing a verdict",
                        False,
                        False,
                    )
                )
        elif r.pod_created is not None and now - r.pod_created >= timeout:
            if not r.scheduled:
                why = f": {r.unschedulable}" if r.unschedulable else ""
                failures.append(
                    Failure(
                        r.node,
                        Reason.POD_UNSCHEDULABLE,
                        f"agent pod {r.pod} was not scheduled within {timeout:.0f}s{why}",
                        True,
                        True,
                    )
                )
            else:
                failures.append(
                    Failure(
                        r.node,
                        Reason.TIMED_OUT,
                        f"agent pod {r.pod} did not finish within {timeout:.0f}s",
                        True,
                        True,
                    )
                )
    return failures
