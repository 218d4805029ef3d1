"""Fleets for the report and plugin tests, made of what the real agent code measures with its
simulated backend (a test double of a GPU node) and what the real report builder writes, so a
page drawn from them is drawn from the same documents a cluster holds."""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from typing import Any

from gpuval_agent.backends.simulated import SimulatedBackend, SimulationConfig
from gpuval_agent.display import Display
from gpuval_agent.runner import run_checks
from gpuval_api.checks import ChecksConfig
from gpuval_api.crd import GpuNodeReport, GpuValidation
from gpuval_api.report import build_report_status
from gpuval_api.result import AgentResult
from gpuval_api.views import FleetView, fleet_view

SLOW = "thermal-slowdown"  # burn at 60 % on one GPU: a slow node (and a failed one)
WRONG = "miscompare"  # one flipped bit in one burn result: a failed node at full speed


def simulated_result(
    node: str, faults: Sequence[Mapping[str, Any]] = (), config: ChecksConfig | None = None
) -> AgentResult:
    """The real agent's checks on a simulated 8-GPU H200 node."""
    simulation = {"timeScale": 0.001, "faults": [dict(f) for f in faults]}
    backend = SimulatedBackend(SimulationConfig.parse(json.dumps(simulation)))
    display = Display(stream=io.StringIO(), quiet=True)
    try:
        return run_checks(config or ChecksConfig(), backend, display, node=node)
    finally:
        display.close()
        backend.close()


def node_report(validation: str, run: str, result: AgentResult) -> GpuNodeReport:
    """The GpuNodeReport the in-cluster agent would have written for `result`."""
    node = result.node or "node"
    return GpuNodeReport.model_validate(
        {
            "metadata": {"name": f"{validation}-{run}-{node}"},
            "spec": {"validation": validation, "run": run, "node": node},
            "status": build_report_status(result),
        }
    )


def not_run_report(validation: str, run: str, node: str) -> GpuNodeReport:
    """A verdict this version does not know: what a later operator writes for an untested node."""
    return GpuNodeReport.model_validate(
        {
            "metadata": {"name": f"{validation}-{run}-{node}"},
            "spec": {"validation": validation, "run": run, "node": node},
            "status": {
                "phase": "Completed",
                "verdict": "NotRun",
                "reason": "PodUnschedulable",
                "message": "a workload held the GPUs for the whole run",
            },
        }
    )


def validation(name: str, run: str, total: int, failed: Sequence[str]) -> GpuValidation:
    return GpuValidation.model_validate(
        {
            "metadata": {"name": name},
            "status": {
                "phase": "Failed" if failed else "Succeeded",
                "run": {"id": run, "number": 1, "generation": 1, "trigger": "created",
                        "startedAt": "2026-11-30T12:00:00Z", "completedAt": "2026-11-30T12:01:00Z"},
                "nodes": {"total": total, "passed": total - len(failed), "failed": len(failed)},
                "conditions": [
                    {"type": "NodesHealthy", "status": "False" if failed else "True",
                     "reason": "NodesFailed" if failed else "AllPassed",
                     "message": f"{len(failed)} failed: {', '.join(failed)}",
                     "observedGeneration": 1, "lastTransitionTime": "2026-11-30T12:01:00Z"},
                ],
            },
        }
    )  # fmt: skip


def sample_fleet(healthy: int = 5) -> tuple[FleetView, dict[str, str]]:
    """A fleet with `healthy` passing nodes, a slow node, a node computing wrong results and a
    node gpuval could not test; returns the view and the role -> node name of the odd ones."""
    name, run = "fleet", "fleet-1-abcd"
    roles = {"slow": "gpu-node-slow", "wrong": "gpu-node-wrong", "untested": "gpu-node-busy"}
    results = [simulated_result(f"gpu-node-{i}") for i in range(healthy)]
    results.append(simulated_result(roles["slow"], [{"kind": SLOW, "gpu": 5}]))
    results.append(simulated_result(roles["wrong"], [{"kind": WRONG, "gpu": 3}]))
    reports = [node_report(name, run, r) for r in results]
    reports.append(not_run_report(name, run, roles["untested"]))
    failed = [roles["slow"], roles["wrong"]]
    view = fleet_view(validation(name, run, len(reports), failed), reports)
    return view, roles
