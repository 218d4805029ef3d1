"""The in-cluster agent writes its node's GpuNodeReport status on a real control plane.

The real agent (`gpuval-agent cluster`, simulated GPU backend) runs as a process with a
ServiceAccount token, the cluster CA and KUBERNETES_SERVICE_HOST/PORT, as in a pod, and patches
the report through the API server's status subresource under the generated CRD's schema.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from gpuval_agent.backends.simulated.hardware import TREE_PREFIX
from gpuval_api import keys
from gpuval_api.env import AgentEnv
from gpuval_api.report import parse_termination_message
from gpuval_devtools.controlplane import Cluster
from gpuval_devtools.podrunner import PodRunner
from gpuval_operator.kube import KubeClient, load_credentials
from tests.support.agentpod import agent_env, create_report, serviceaccount_dir
from tests.support.fleet import Fleet
from tests.support.kube import get_json

pytestmark = pytest.mark.cluster


def _run_agent(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuval_agent.cli", "cluster"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_agent_writes_a_failed_report_with_reason_summary_and_result(
    cluster: Cluster,
    install_crds: list[str],
    writer_account: tuple[str, str],
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    report = unique_name("report")
    create_report(cluster, report)
    account_dir = serviceaccount_dir(cluster, *writer_account, tmp_path)
    env = agent_env(
        cluster, account_dir, report, {"gpus": 8, "faults": [{"kind": "miscompare", "gpu": 5}]}
    )
    completed = _run_agent(env)
    assert completed.returncode == 1, completed.stderr
    status = get_json(cluster, "gpunodereport", report)["status"]
    assert status["phase"] == "Completed"
    assert status["verdict"] == "Failed"
    assert status["reason"] == "BurnMismatch"
    assert status["summary"]["gpuCount"] == 8
    assert status["summary"]["burnTflops"] > 0
    assert status["failures"][0] == {
        "check": "burn",
        "gpu": 5,
        "reason": "BurnMismatch",
        "hint": status["failures"][0]["hint"],
        "message": status["failures"][0]["message"],
    }
    assert "GPU 5" in status["failures"][0]["message"]
    result = status["result"]
    assert result["schemaVersion"] == "gpuval.dev/v1alpha1/result"
    assert [c["name"] for c in result["checks"]] == [
        "state",
        "driver",
        "health",
        "burn",
        "bandwidth",
        "nccl",
    ]
    assert result["environment"]["gpus"][5]["uuid"] == "GPU-sim-node-under-test-5"
    # A failing node keeps its evidence bundle in its report.
    assert status["evidence"]["encoding"] == "gzip+base64"


def test_a_passing_run_replaces_an_earlier_failure(
    cluster: Cluster,
    install_crds: list[str],
    writer_account: tuple[str, str],
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    report = unique_name("report")
    create_report(cluster, report)
    account_dir = serviceaccount_dir(cluster, *writer_account, tmp_path)
    overheating = {"gpus": 8, "faults": [{"kind": "overheat", "gpu": 0}]}
    failing = _run_agent(agent_env(cluster, account_dir, report, overheating))
    assert failing.returncode == 1, failing.stderr
    passing = _run_agent(agent_env(cluster, account_dir, report, {"gpus": 8}))
    assert passing.returncode == 0, passing.stderr
    status = get_json(cluster, "gpunodereport", report)["status"]
    assert status["verdict"] == "Passed"
    assert "reason" not in status
    assert status["failures"] == []
    assert "evidence" not in status  # the failing run's bundle went with its verdict


def test_an_identity_without_the_role_is_refused_with_a_clear_message(
    cluster: Cluster,
    install_crds: list[str],
    namespace: str,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    report = unique_name("report")
    create_report(cluster, report)
    cluster.kubectl("create", "serviceaccount", "no-rights", "-n", namespace)
    account_dir = serviceaccount_dir(cluster, namespace, "no-rights", tmp_path)
    completed = _run_agent(agent_env(cluster, account_dir, report, {"gpus": 8}))
    assert completed.returncode == 2
    assert "HTTP 403" in completed.stderr and report in completed.stderr
    assert "Traceback" not in completed.stderr
    assert "status" not in get_json(cluster, "gpunodereport", report)


def test_an_agent_beside_another_process_on_a_gpu_writes_not_run_naming_it(
    cluster: Cluster,
    install_crds: list[str],
    writer_account: tuple[str, str],
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    report = unique_name("report")
    create_report(cluster, report)
    account_dir = serviceaccount_dir(cluster, *writer_account, tmp_path)
    simulate = {"gpus": 8, "faults": [{"kind": "foreign-memory", "gpu": 2, "during": "burn"}]}
    env = agent_env(cluster, account_dir, report, simulate)
    env[AgentEnv.TERMINATION_LOG] = str(tmp_path / "termination")
    completed = _run_agent(env)
    assert completed.returncode == 3, completed.stderr  # not tested
    status = get_json(cluster, "gpunodereport", report)["status"]
    assert (status["verdict"], status["reason"]) == ("NotRun", "GpuInUse")
    assert (
        "GPU 2 was used by PID 5000002 (python3 hold.py (simulated), 135.0 GiB)"
        in (status["message"])
    )
    assert status["failures"] == []
    burn = next(c for c in status["result"]["checks"] if c["name"] == "burn")
    assert [f["reason"] for f in burn["findings"]] == ["GpuInUse"]  # not torch's OOM as CheckError
    left = parse_termination_message((tmp_path / "termination").read_text())
    assert left is not None and (left["verdict"], left["reason"]) == ("NotRun", "GpuInUse")


def _trees(directory: Path) -> list[Path]:
    return list(directory.rglob(f"{TREE_PREFIX}*"))


@pytest.mark.usefixtures("install_crds")
def test_an_agent_the_pod_runner_kills_mid_run_leaves_no_host_tree(
    *,
    cluster: Cluster,
    writer_account: tuple[str, str],
    fleet: Fleet,
    unique_name: Callable[[str], str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Issue 42: the simulated host trees (1.3 MB each) piled up in the temporary directory.
    # An agent killed (SIGKILL, the pod runner's end) cannot remove its own; the container's
    # /tmp goes with the container, as a kubelet's does.
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    namespace, account = writer_account
    node = fleet.add(unique_name("tree"), [{"kind": "hang"}], gpus=2)
    report = unique_name("tree")
    create_report(cluster, report)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": report,
            "namespace": namespace,
            "labels": {keys.LABEL_COMPONENT: keys.AGENT_COMPONENT, keys.LABEL_VALIDATION: "v"},
        },
        "spec": {
            "nodeName": node,
            "serviceAccountName": account,
            "containers": [
                {
                    "name": "agent",
                    "image": "gpuval-agent",
                    "command": ["gpuval-agent", "cluster"],
                    "env": [
                        {"name": AgentEnv.REPORT_NAME, "value": report},
                        {"name": AgentEnv.NODE_NAME, "value": node},
                    ],
                }
            ],
        },
    }
    cluster.kubectl("create", "-f", "-", input=json.dumps(pod))

    async def kill_mid_run() -> list[Path]:
        client = KubeClient(load_credentials(str(cluster.kubeconfig)))
        runner = PodRunner(client, cluster.ca_file, tmp_path / "logs", namespace=namespace)
        task = asyncio.create_task(runner.run())
        try:
            for _ in range(240):  # the hung agent's state check writes its tree, then it waits
                trees = _trees(tmp_path)
                if trees:
                    break
                await asyncio.sleep(0.25)
        finally:
            task.cancel()  # the runner's end: its agents killed (SIGKILL)
            await asyncio.gather(task, return_exceptions=True)
            await client.close()
        return trees

    seen = asyncio.run(kill_mid_run())
    assert seen, "the agent never wrote its host tree"
    assert _trees(tmp_path) == []
