"""`gpuval-agent fabric --cluster` writes each node's status.fabric on a real control plane.

Two real agent processes (simulated backend) meet over loopback as the fabric pods of one group
would, from the GPUVAL_FABRIC_* variables, and each merge-patches its own GpuNodeReport's
status.fabric through the status subresource under the generated CRD's schema, after leaving the
compact fabric verdict in its termination message.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpuval_api.env import AgentEnv
from gpuval_api.fabric import parse_fabric_termination_message
from gpuval_devtools.controlplane import Cluster, free_port
from tests.support.agentpod import agent_env, create_report, serviceaccount_dir
from tests.support.kube import get_json

pytestmark = pytest.mark.cluster

NODES = ["fabric-node-a", "fabric-node-b"]
CONFIG = {"timeouts": {"initSeconds": 5, "phaseSeconds": 5}, "maxBytes": 1 << 28}


def _fabric_agents(
    cluster: Cluster,
    account_dir: Path,
    reports: list[str],
    faults: dict[int, list[dict[str, Any]]],
    tmp_path: Path,
) -> list[subprocess.CompletedProcess[str]]:
    port = free_port()
    processes = []
    for rank, report in enumerate(reports):
        env = agent_env(cluster, account_dir, report, {"gpus": 4, "faults": faults.get(rank, [])})
        env |= {
            AgentEnv.NODE_NAME: NODES[rank],
            AgentEnv.FABRIC_RANK: str(rank),
            AgentEnv.FABRIC_NODES: json.dumps(NODES),
            AgentEnv.FABRIC_MASTER: f"127.0.0.1:{port}",
            AgentEnv.FABRIC_GROUP: "run-1-g0",
            AgentEnv.FABRIC_CONFIG: json.dumps(CONFIG),
            AgentEnv.TERMINATION_LOG: str(tmp_path / f"termination-{rank}"),
        }
        processes.append(
            subprocess.Popen(
                [sys.executable, "-m", "gpuval_agent.cli", "fabric", "--cluster"],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    done = []
    for process in processes:
        out, err = process.communicate(timeout=120)
        done.append(subprocess.CompletedProcess(process.args, process.returncode, out, err))
    return done


@pytest.fixture
def fabric_reports(
    cluster: Cluster,
    install_crds: list[str],
    writer_account: tuple[str, str],
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> tuple[list[str], Path]:
    reports = [unique_name("fabric-report") for _ in NODES]
    for report in reports:
        create_report(cluster, report)
    return reports, serviceaccount_dir(cluster, *writer_account, tmp_path)


def test_each_node_of_a_healthy_group_writes_its_fabric_status_and_termination_message(
    cluster: Cluster, fabric_reports: tuple[list[str], Path], tmp_path: Path
) -> None:
    reports, account_dir = fabric_reports
    done = _fabric_agents(cluster, account_dir, reports, {}, tmp_path)
    assert [d.returncode for d in done] == [0, 0], [d.stderr for d in done]
    for rank, report in enumerate(reports):
        status = get_json(cluster, "gpunodereport", report)["status"]
        # The node's own verdict is the node agent's: the fabric agent writes status.fabric only
        # ('failures' is the schema's default).
        assert set(status) - {"failures"} == {"fabric"}
        fabric = status["fabric"]
        assert (fabric["group"], fabric["rank"], fabric["world"]) == ("run-1-g0", rank, 2)
        assert (fabric["verdict"], fabric["transport"]) == ("Passed", "IB/GDRDMA")
        assert fabric["busbwGBps"] > 0 and "reason" not in fabric
        result = fabric["result"]
        assert result["schemaVersion"] == "gpuval.dev/v1alpha1/fabric"
        assert result["node"] == NODES[rank] and result["gpusPerNode"] == 4
        assert [(p["a"], p["b"]) for p in result["pairs"]] == [tuple(NODES)]
        left = parse_fabric_termination_message((tmp_path / f"termination-{rank}").read_text())
        assert left is not None and left["verdict"] == "Passed"


def test_an_unreachable_node_is_failed_and_its_group_not_run_in_their_reports(
    cluster: Cluster, fabric_reports: tuple[list[str], Path], tmp_path: Path
) -> None:
    reports, account_dir = fabric_reports
    done = _fabric_agents(
        cluster, account_dir, reports, {1: [{"kind": "fabric-unreachable"}]}, tmp_path
    )
    assert [d.returncode for d in done] == [3, 1], [d.stderr for d in done]
    rank0 = get_json(cluster, "gpunodereport", reports[0])["status"]["fabric"]
    rank1 = get_json(cluster, "gpunodereport", reports[1])["status"]["fabric"]
    assert (rank0["verdict"], rank0["reason"]) == ("NotRun", "FabricUnreachable")
    assert "fabric-node-b (rank 1) never reached" in rank0["message"]
    assert (rank1["verdict"], rank1["reason"]) == ("Failed", "FabricUnreachable")
    assert "could not reach rank 0's rendezvous at 127.0.0.1:" in rank1["message"]
