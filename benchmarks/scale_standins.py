"""The stand-in agents of benchmarks/operator_scale.py: each agent pod kwok marks Running gets its
report completed as an agent would write it (fabric pods go to benchmarks/scale_fabric.py's
stand-ins, and with `--baseline` the report is judged: benchmarks/scale_baseline.py), and what the
benchmark reads of the GpuValidation's status while a run goes on."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import scale_baseline
import scale_fabric
import scale_repairs
from gpuval_api.conditions import ConditionReason, ConditionType
from gpuval_api.figures import BURN, H2D
from gpuval_devtools.launch import AGENT_NAMESPACE
from gpuval_operator.kube import KubeClient, q


class StandInAgents:
    """Completes the report of every agent pod kwok marks Running (see the module docstring);
    fabric pods go to the fabric's stand-ins (`--fabric`), reports are judged (`--baseline`)."""

    def __init__(
        self,
        client: KubeClient,
        fabric: scale_fabric.StandInFabric | None,
        judged: scale_baseline.Judged | None,
        janitor: scale_repairs.StandInJanitor | None = None,
    ) -> None:
        self.client = client
        self.fabric = fabric
        self.judged = judged
        self.janitor = janitor
        self.pods_of_run: dict[str, set[str]] = {}  # run id -> its (non-fabric) agent pods
        self.done: set[str] = set()
        self.last_report = 0.0
        self.last_report_at = 0.0  # the same, wall clock
        self.reports_written = 0
        self.sem = asyncio.Semaphore(32)
        self.tasks: set[asyncio.Task[None]] = set()

    def report_status(self, env: dict[str, str | None], pod: dict[str, Any]) -> dict[str, Any]:
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        node = pod["metadata"]["annotations"]["gpuval.dev/node"]
        if self.janitor is not None and self.janitor.fails(node):
            return {**scale_repairs.failed_status(node), "completedAt": now, "startedAt": now}
        if self.judged is not None:
            node = pod["metadata"]["annotations"]["gpuval.dev/node"]
            return {**self.judged.status(env, node), "completedAt": now, "startedAt": now}
        return {
            "phase": "Completed",
            "verdict": "Passed",
            "message": "stand-in agent (operator scale benchmark)",
            "completedAt": now,
            "summary": {"gpuCount": 8, BURN.key: 780.0, H2D.key: 55.0},
        }

    async def finish(self, pod: dict[str, Any]) -> None:
        async with self.sem:
            env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0].get("env", [])}
            report = q(str(env["GPUVAL_REPORT_NAME"]))
            await self.client.merge_patch(
                f"/apis/gpuval.dev/v1alpha1/gpunodereports/{report}/status",
                {"status": self.report_status(env, pod)},
            )
            self.last_report, self.last_report_at = time.monotonic(), time.time()
            self.reports_written += 1
            pod_name = q(pod["metadata"]["name"])
            await self.client.merge_patch(
                f"/api/v1/namespaces/{AGENT_NAMESPACE}/pods/{pod_name}/status",
                {"status": {"phase": "Succeeded"}},
            )

    def on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        if self.fabric is not None and self.fabric.on_pod(kind, pod):
            return
        run = (pod["metadata"].get("labels") or {}).get(scale_fabric.RUN_LABEL, "")
        self.pods_of_run.setdefault(run, set()).add(pod["metadata"]["name"])
        uid = pod["metadata"]["uid"]
        running = (pod.get("status") or {}).get("phase") == "Running"
        if kind != "DELETED" and running and uid not in self.done:
            self.done.add(uid)
            task = asyncio.ensure_future(self.finish(pod))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    def on_page(self, items: list[dict[str, Any]], _first: bool, _last: bool) -> None:
        for pod in items:
            self.on_pod("ADDED", pod)

    def last_report_ago(self) -> float:
        """Seconds since the last report was written, the fabric's results included."""
        ago = time.monotonic() - self.last_report
        if self.fabric is not None:
            written = [g.written or 0.0 for g in self.fabric.groups.values()]
            ago = min(ago, time.time() - max(written, default=0.0))
        return ago


def all_verdicts_in(gv: dict[str, Any]) -> bool:
    """Whether the validation's status counts every node with a verdict (none pending or
    running; a node awaiting the fabric counts as running)."""
    counts = (gv.get("status") or {}).get("nodes") or {}
    return bool(counts.get("total")) and not counts.get("pending") and not counts.get("running")


def acting_message(gv: dict[str, Any]) -> str | None:
    """The Succeeded condition's message while node actions for every verdict are applied."""
    for cond in (gv.get("status") or {}).get("conditions") or []:
        type_, reason = cond.get("type"), cond.get("reason")
        if type_ == ConditionType.SUCCEEDED and reason == ConditionReason.APPLYING_NODE_ACTIONS:
            return str(cond.get("message"))
    return None
