"""Fleets for the report and plugin tests, made of what the real agent code measures with its
simulated backend (a test double of a GPU node) and what the real report builder writes, so a
page drawn from them is drawn from the same documents a cluster holds."""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from gpuval_agent.backends.simulated.backend import SimulatedBackend, SimulationConfig
from gpuval_agent.display import Display
from gpuval_agent.fabric.driver import FabricPlan, run_fabric
from gpuval_agent.fabric.simulated import SimulatedFabric
from gpuval_agent.runner import run_checks
from gpuval_api.baseline.history import entry_of_result
from gpuval_api.baseline.learn import learn
from gpuval_api.baselinemodel import GpuBaselineSpec
from gpuval_api.checks import ChecksConfig
from gpuval_api.crd import GpuNodeReport, GpuValidation
from gpuval_api.fabric import FABRIC_CHECK, FabricConfig, FabricResult, build_fabric_status
from gpuval_api.fabric.summary import FabricRunStatus
from gpuval_api.report import StatusKey, build_operator_failure_status, build_report_status
from gpuval_api.result import AgentResult, Verdict
from gpuval_api.views import FleetView, fleet_view
from gpuval_devtools.controlplane import free_port
from tests.support.baselines import node_figures, slowed

SLOW = "thermal-slowdown"  # burn at 60 % on one GPU: a slow node (and a failed one)
WRONG = "miscompare"  # one flipped bit in one burn result: a failed node at full speed


def simulated_result(
    node: str,
    faults: Sequence[Mapping[str, Any]] = (),
    config: ChecksConfig | None = None,
    gpus: int = 8,
    time_scale: float = 0.001,
    **more: Any,
) -> AgentResult:
    """The real agent's checks on a simulated H200 node (8 GPUs unless told; `more`: further
    simulation settings)."""
    simulation = {
        "gpus": gpus,
        "timeScale": time_scale,
        "faults": [dict(f) for f in faults],
        **more,
    }
    backend = SimulatedBackend(SimulationConfig.parse(json.dumps(simulation)))
    display = Display(stream=io.StringIO(), quiet=True)
    try:
        return run_checks(config or ChecksConfig(), backend, display, node=node)
    finally:
        display.close()
        backend.close()


def node_report(
    validation: str, run: str, result: AgentResult, history: Sequence[AgentResult] = ()
) -> GpuNodeReport:
    """The GpuNodeReport the in-cluster agent would have written for `result`; with `history`,
    the node's earlier runs' key figures that the operator carries in the report's spec."""
    node = result.node or "node"
    past = [
        entry_of_result(f"{validation}-past-{n}", r).model_dump(mode="json", by_alias=True)
        for n, r in enumerate(history)
    ]
    spec = {"validation": validation, "run": run, "node": node}
    return GpuNodeReport.model_validate(
        {
            "metadata": {"name": f"{validation}-{run}-{node}"},
            "spec": spec | ({"history": past} if past else {}),
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
                "run": {
                    "id": run,
                    "number": 1,
                    "generation": 1,
                    "trigger": "created",
                    "startedAt": "2026-11-30T12:00:00Z",
                    "completedAt": "2026-11-30T12:01:00Z",
                },
                "nodes": {"total": total, "passed": total - len(failed), "failed": len(failed)},
                "conditions": [
                    {
                        "type": "NodesHealthy",
                        "status": "False" if failed else "True",
                        "reason": "NodesFailed" if failed else "AllPassed",
                        "message": f"{len(failed)} failed: {', '.join(failed)}",
                        "observedGeneration": 1,
                        "lastTransitionTime": "2026-11-30T12:01:00Z",
                    },
                ],
            },
        }
    )


def sample_fleet(healthy: int = 5, baseline: bool = False) -> tuple[FleetView, dict[str, str]]:
    """A fleet with `healthy` passing nodes, a slow node, a node computing wrong results and a
    node gpuval could not test; returns the view and the role -> node name of the odd ones.

    With `baseline`, the view is judged against a GpuBaseline learned from the healthy nodes
    (gpuval_api.baseline.learn), and every tested node carries three earlier runs: flat, but for
    the 'decliner' (a healthy node), which loses 3 % a run and is at 0.91 of its first run now."""
    name, run = "fleet", "fleet-1-abcd"
    roles = {"slow": "gpu-node-slow", "wrong": "gpu-node-wrong", "untested": "gpu-node-busy"}
    if baseline:
        roles["decliner"] = "gpu-node-1"
    declining = [0.97**n for n in range(4)]
    results = [
        simulated_result(
            node, slowed(declining[-1], range(8)) if node == roles.get("decliner") else ()
        )
        for node in (f"gpu-node-{i}" for i in range(healthy))
    ]
    results.append(simulated_result(roles["slow"], [{"kind": SLOW, "gpu": 5}]))
    results.append(simulated_result(roles["wrong"], [{"kind": WRONG, "gpu": 3}]))
    histories: dict[str, list[AgentResult]] = {}
    if baseline:
        flat = [results[0]] * 3
        histories = {r.node or "": flat for r in results}
        histories[roles["decliner"]] = [
            simulated_result(roles["decliner"], slowed(f, range(8)) if f < 1 else ())
            for f in declining[:-1]
        ]
    reports = [node_report(name, run, r, histories.get(r.node or "", ())) for r in results]
    reports.append(not_run_report(name, run, roles["untested"]))
    failed = [roles["slow"], roles["wrong"]]
    learned = learned_from(results[:healthy]) if baseline else None
    view = fleet_view(validation(name, run, len(reports), failed), reports, learned)
    return view, roles


def learned_from(results: Sequence[AgentResult]) -> tuple[str, GpuBaselineSpec]:
    """The GpuBaseline learned from `results` (their key's), named after the key."""
    nodes = [node_figures(r) for r in results]
    key = nodes[0].key
    assert key is not None
    outcome = learn(nodes, key, fraction=0.1, min_nodes=2)
    assert outcome.spec is not None, outcome.problem
    return key.default_name(), outcome.spec


def large_fleet(nodes: int = 1000) -> tuple[FleetView, dict[str, list[str]]]:
    """A fleet of `nodes` as a large run looks: most nodes healthy and alike, a fault hitting a
    few nodes the same way (so their figures are equal), some untested. Each kind of node is
    measured once by the real agent code (simulated backend) and copied under its nodes' names;
    returns the view and the kind -> node names."""
    name, run = "fleet", "fleet-1-k000"
    kinds: dict[str, list[Mapping[str, Any]]] = {
        "bandwidth": [{"kind": "low-bandwidth", "gpu": 0}],
        "slow": [{"kind": SLOW, "gpu": 5}],
        "wrong": [{"kind": WRONG, "gpu": 3}],
    }
    counts = {"bandwidth": 6, "slow": 5, "wrong": 3, "untested": 10}
    names = [f"gpu-node-{i:04d}" for i in range(nodes)]
    # The odd nodes spread over the fleet (every 37th name), the rest healthy.
    odd = iter(names[7::37])
    roles = {kind: [next(odd) for _ in range(count)] for kind, count in counts.items()}
    role_of = {node: kind for kind, members in roles.items() for node in members}
    measured = {kind: simulated_result(kind, faults) for kind, faults in kinds.items()}
    measured["healthy"] = simulated_result("healthy")
    reports = [
        not_run_report(name, run, node)
        if role_of.get(node) == "untested"
        else node_report(
            name, run, measured[role_of.get(node, "healthy")].model_copy(update={"node": node})
        )
        for node in names
    ]
    failed = [n for kind in kinds for n in roles[kind]]
    return fleet_view(validation(name, run, nodes, failed), reports), roles


def varied_fleet(nodes: int = 1000) -> tuple[FleetView, dict[str, list[str]]]:
    """A large fleet whose outliers differ, under long node names as a cloud gives them: ten
    nodes each slowed by its own factor (one GPU at 0.53 to 0.89 of the rest: an outlier on every
    figure's plot, each with a value, so a label, of its own), beside nodes alike (a bandwidth
    fault on six, a wrong burn result on three) and untested ones. Returns the view and the kind
    -> node names, the slow ones slowest first."""
    name, run = "fleet", "fleet-1-v000"
    names = [f"gpu-{i:04d}.rack-{i // 40:02d}.eu-central-1.compute.internal" for i in range(nodes)]
    odd = iter(names[5::41])
    factors = [0.53 + 0.04 * n for n in range(10)]
    slow = {next(odd): factor for factor in factors}
    roles = {"slow": list(slow)}
    roles |= {kind: [next(odd) for _ in range(n)] for kind, n in (("bandwidth", 6), ("wrong", 3))}
    roles["untested"] = [next(odd) for _ in range(5)]
    faults: dict[str, list[Mapping[str, Any]]] = {
        "bandwidth": [{"kind": "low-bandwidth", "gpu": 0}],
        "wrong": [{"kind": WRONG, "gpu": 3}],
    }
    measured = {kind: simulated_result(kind, found) for kind, found in faults.items()}
    measured["healthy"] = simulated_result("healthy")
    for node, factor in slow.items():
        measured[node] = simulated_result(node, [{"kind": "slow-gpu", "gpu": 2, "factor": factor}])
    role_of = {node: kind for kind, members in roles.items() for node in members}
    reports = []
    for node in names:
        kind = role_of.get(node, "healthy")
        if kind == "untested":
            reports.append(not_run_report(name, run, node))
            continue
        result = measured[node if kind == "slow" else kind]
        reports.append(node_report(name, run, result.model_copy(update={"node": node})))
    failed = [n for kind in ("slow", "bandwidth", "wrong") for n in roles[kind]]
    return fleet_view(validation(name, run, nodes, failed), reports), roles


def fabric_results(
    nodes: Sequence[str], faults: Mapping[str, Sequence[Mapping[str, Any]]]
) -> list[FabricResult]:
    """One fabric group of `nodes` measured by the real fabric agent code (simulated executor),
    each node's agent in its own thread, meeting rank 0's coordinator over loopback TCP."""
    config = FabricConfig.model_validate(
        {"timeouts": {"initSeconds": 10, "phaseSeconds": 10}, "maxBytes": 1 << 28}
    )
    port, stop = free_port(), threading.Event()
    results: dict[int, FabricResult] = {}

    def agent(rank: int) -> None:
        node = nodes[rank]
        simulation = {
            "gpus": 8,
            "timeScale": 0.001,
            "faults": [dict(f) for f in faults.get(node, [])],
        }
        executor = SimulatedFabric(
            SimulationConfig.parse(json.dumps(simulation)), config, node, stop
        )
        plan = FabricPlan(
            rank=rank,
            world=len(nodes),
            master=("127.0.0.1", port),
            group="fabric-1-g0",
            node=node,
            config=config,
            nodes=list(nodes),
        )
        results[rank] = run_fabric(plan, executor, stop)

    threads = [threading.Thread(target=agent, args=(rank,)) for rank in range(len(nodes))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    stop.set()
    assert len(results) == len(nodes), f"fabric agents finished: {sorted(results)}"
    return [results[rank] for rank in range(len(nodes))]


def fabric_fleet(size: int = 4, slow: int = 1) -> tuple[FleetView, str]:
    """A fleet whose nodes all passed their local checks and then their fabric group, but for
    node `slow`, whose network runs at 0.6 of the rest (the simulated fabric-slow-node fault);
    its report is failed as the operator fails it. Returns the view and the slow node's name."""
    name, run = "fabric", "fabric-1-abcd"
    nodes = [f"gpu-node-{i}" for i in range(size)]
    slow_node = nodes[slow]
    fabric = fabric_results(nodes, {slow_node: [{"kind": "fabric-slow-node", "factor": 0.6}]})
    reports = []
    for node, outcome in zip(nodes, fabric, strict=True):
        status = build_report_status(simulated_result(node))
        if outcome.reason is not None and outcome.verdict == Verdict.FAILED:
            status |= build_operator_failure_status(
                outcome.reason, outcome.message, None, datetime.now(UTC), FABRIC_CHECK
            )
        status[StatusKey.FABRIC] = build_fabric_status(outcome)
        reports.append(
            GpuNodeReport.model_validate(
                {
                    "metadata": {"name": f"{name}-{run}-{node}"},
                    "spec": {"validation": name, "run": run, "node": node},
                    "status": status,
                }
            )
        )
    failed = [o.node for o in fabric if o.verdict == Verdict.FAILED]
    document = validation(name, run, len(nodes), failed)
    assert document.status is not None
    document.status.fabric = FabricRunStatus(summary=f"{len(failed)} failed of {size}")
    return fleet_view(document, reports), slow_node
