"""The in-cluster agent writes its node's GpuNodeReport status on a real control plane.

The real agent (`gpuval-agent cluster`, simulated GPU backend) runs as a process with a
ServiceAccount token, the cluster CA and KUBERNETES_SERVICE_HOST/PORT, as in a pod, and patches
the report through the API server's status subresource under the generated CRD's schema.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from gpuval_api.env import AgentEnv
from gpuval_api.report import parse_termination_message
from gpuval_devtools.controlplane import Cluster
from tests.support.agentpod import agent_env, create_report, serviceaccount_dir
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
