"""`make demo`: gpuval end to end on a local control plane with simulated GPU nodes.

Starts the control plane (built from Go modules and cached by gpuval_devtools.controlplane) with
six simulated 8-GPU nodes, three of them faulty (GPU 3 of the last computes wrong results, GPU 5
of the one before throttles, gpu-node-1's network is slow), installs the CRDs, runs the real
operator and the pod runner (which runs the real agent, with its simulated backend, for every
agent and fabric pod that gets scheduled), applies examples/gpuvalidation-fleet.yaml, waits for
the run to finish, local checks and fabric phase, and prints `kubectl get
gpuvalidations,gpunodereports`, the fabric's result, the nodes' verdict labels and taints, an
excerpt of the operator's /metrics, `kubectl gpuval status fleet`, and last the path of the HTML
fleet report `kubectl gpuval report` wrote.

`python -m gpuval_devtools.demo [--keep] [--nodes N]`; with --keep the cluster stays up and its
kubeconfig is printed.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gpuval_api.conditions import ValidationPhase
from gpuval_api.report import StatusKey
from gpuval_devtools import launch
from gpuval_devtools.controlplane import Cluster, GpuNode, free_port
from gpuval_devtools.launch import (
    REPO_ROOT,
    agent_rbac,
    install_crds,
    operator_process,
    podrunner_process,
)
from gpuval_devtools.simulation import simulated_node

SAMPLE = REPO_ROOT / "examples" / "gpuvalidation-fleet.yaml"


def get_validation(cluster: Cluster, name: str) -> dict[str, Any] | None:
    proc = cluster.kubectl("get", "gpuvalidation", name, "-o", "json", check=False)
    return json.loads(proc.stdout) if proc.returncode == 0 else None


def wait_completed(
    cluster: Cluster, name: str, timeout: float, *, after_run: int = 0
) -> dict[str, Any]:
    """The GpuValidation once a run numbered above `after_run` has completed; progress on stdout."""
    deadline = time.monotonic() + timeout
    shown = ""
    while time.monotonic() < deadline:
        obj = get_validation(cluster, name) or {}
        status = obj.get("status") or {}
        run = status.get("run") or {}
        nodes = status.get("nodes") or {}
        line = (
            f"  run {run.get('id', '-')}: {status.get('phase', ValidationPhase.PENDING)}, "
            f"{nodes.get('passed', 0)} passed, {nodes.get('failed', 0)} failed, "
            f"{nodes.get('running', 0)} running, {nodes.get('pending', 0)} waiting"
        )
        if line != shown:
            print(line, flush=True)
            shown = line
        if run.get("completedAt") and int(run.get("number") or 0) > after_run:
            return obj
        time.sleep(1)
    raise TimeoutError(
        f"GpuValidation {name} did not complete a run within {timeout:.0f}s (last: {shown.strip()})"
    )


def metrics_excerpt(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text: str = resp.read().decode()
    keep = (
        "gpuval_validation_nodes",
        "gpuval_validation_uniform",
        "gpuval_validation_last_run_completion",
        "gpuval_node_passed",
        "gpuval_node_failure_info",
        "gpuval_node_burn_flops_per_second",
        "gpuval_node_fabric",
        "gpuval_fabric_group_busbw",
        "gpuval_operator_build_info",
    )
    return "\n".join(line for line in text.splitlines() if line.startswith(keep))


def banner(text: str) -> None:
    print(f"\n=== {text}", flush=True)


# The node whose network is slow (one NIC of eight down, and more): the fabric names it once four
# nodes pass their local checks (a slow node is told from a slow link by two pairs and a fast one).
FABRIC_SLOW = 1
FABRIC_NODES = 6


def demo_nodes(nodes: int) -> list[GpuNode]:
    """Healthy nodes, the last one computing wrong results on GPU 3, from three nodes on the one
    before it throttling GPU 5 (slow: the report's outlier), and from six nodes on gpu-node-1
    with a slow network (the fabric names it)."""
    faults: dict[int, list[dict[str, Any]]] = {nodes - 1: [{"kind": "miscompare", "gpu": 3}]}
    if nodes >= 3:
        faults[nodes - 2] = [{"kind": "thermal-slowdown", "gpu": 5}]
    if nodes >= FABRIC_NODES:
        faults[FABRIC_SLOW] = [{"kind": "fabric-slow-node", "factor": 0.7}]
    return [simulated_node(f"gpu-node-{i}", faults=faults.get(i, ())) for i in range(nodes)]


def fabric_lines(cluster: Cluster, obj: Mapping[str, Any]) -> list[str]:
    """The fabric phase: its summary, then each node's group, verdict and busbw."""
    fabric = (obj.get("status") or {}).get(StatusKey.FABRIC)
    if not fabric:
        return ["  (no fabric phase: spec.fabric is unset)"]
    lines = [f"  {fabric.get('summary', '')}"]
    for group in fabric.get("worstGroups") or []:
        lines.append(
            f"  group {group['group']}: {group['nodes']} nodes, busbw "
            f"{group.get('busbwGBps', 0):.1f} GB/s {group.get('reason', '')}".rstrip()
        )
    columns = (
        "custom-columns=NODE:.spec.node,GROUP:.status.fabric.group,FABRIC:.status.fabric.verdict,"
        "REASON:.status.fabric.reason,MESSAGE:.status.fabric.message"
    )
    listed = cluster.kubectl("get", "gpunodereports", "-o", columns).stdout.rstrip()
    return [*lines, *(f"  {line[:160]}" for line in listed.splitlines())]


def kubectl_gpuval(cluster: Cluster, *args: str) -> str:
    """What `kubectl gpuval ARGS` printed; RuntimeError with its words when it failed."""
    proc = launch.kubectl_gpuval(cluster, *args)
    if proc.returncode != 0:
        raise RuntimeError(f"kubectl gpuval {' '.join(args)} failed: {proc.stderr.strip()}")
    return str(proc.stdout).rstrip()


def show_results(cluster: Cluster, workdir: Path) -> None:
    """The last words of the demo: kubectl gpuval status, then the HTML fleet report's path."""
    banner("kubectl gpuval status fleet")
    print(kubectl_gpuval(cluster, "status", "fleet"))
    report = workdir / "fleet-report.html"
    kubectl_gpuval(cluster, "report", "fleet", "--html", str(report))
    banner("HTML fleet report (kubectl gpuval report fleet --html FILE); open it in a browser")
    print(report, flush=True)


def run_demo(nodes: int, keep: bool, timeout: float) -> int:
    cluster_nodes = demo_nodes(nodes)
    slow = f", gpu-node-{nodes - 2} is slow" if nodes >= 3 else ""
    fabric = f", gpu-node-{FABRIC_SLOW}'s network is slow" if nodes >= FABRIC_NODES else ""
    banner(
        f"starting the local control plane with {nodes} simulated 8-GPU nodes "
        f"(gpu-node-{nodes - 1} computes wrong results{slow}{fabric})"
    )
    cluster = Cluster.start("gpuval-demo", cluster_nodes)
    workdir = Path(tempfile.mkdtemp(prefix="gpuval-demo-"))
    try:
        banner("installing the CRDs and the agent's ServiceAccount")
        install_crds(cluster)
        cluster.apply(agent_rbac())
        port = free_port()
        with (
            operator_process(
                cluster.kubeconfig, metrics_port=port, log_file=workdir / "operator.log"
            ),
            podrunner_process(
                cluster, logs_dir=workdir / "agents", log_file=workdir / "podrunner.log"
            ),
        ):
            banner(f"applying {SAMPLE.relative_to(REPO_ROOT)}")
            print(cluster.kubectl("apply", "-f", str(SAMPLE)).stdout.strip())
            obj = wait_completed(cluster, "fleet", timeout)
            banner("kubectl get gpuvalidations,gpunodereports")
            print(cluster.kubectl("get", "gpuvalidations,gpunodereports").stdout.rstrip())
            banner("conditions")
            for cond in obj["status"]["conditions"]:
                print(f"  {cond['type']}={cond['status']} ({cond['reason']}): {cond['message']}")
            banner("fabric: NCCL all-reduce across the nodes that passed their local checks")
            print("\n".join(fabric_lines(cluster, obj)))
            banner("kubectl get nodes -L gpuval.dev/verdict,gpuval.dev/reason (and taints)")
            print(
                cluster.kubectl(
                    "get", "nodes", "-L", "gpuval.dev/verdict,gpuval.dev/reason"
                ).stdout.rstrip()
            )
            print(
                cluster.kubectl(
                    "get",
                    "nodes",
                    "-o",
                    "custom-columns=NAME:.metadata.name,TAINTS:.spec.taints[*].key",
                ).stdout.rstrip()
            )
            banner("operator /metrics (excerpt)")
            print(metrics_excerpt(port))
        banner(f"logs of the operator, the pod runner and every agent: {workdir}")
        if keep:
            print(f"cluster kept: export KUBECONFIG={cluster.kubeconfig}")
        show_results(cluster, workdir)
        return 0
    finally:
        if not keep:
            cluster.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpuval_devtools.demo", description=__doc__)
    parser.add_argument(
        "--nodes",
        type=int,
        default=FABRIC_NODES,
        help="simulated GPU nodes (the last two are faulty; from six on, gpu-node-1's network)",
    )
    parser.add_argument("--keep", action="store_true", help="leave the cluster running")
    parser.add_argument("--timeout", type=float, default=300, help="seconds to wait for the run")
    args = parser.parse_args(argv)
    if args.nodes < 2:
        parser.error(f"--nodes={args.nodes}: the demo needs at least 2 nodes (one of them faulty)")
    return run_demo(args.nodes, args.keep, args.timeout)


if __name__ == "__main__":
    sys.exit(main())
