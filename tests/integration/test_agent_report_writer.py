"""The in-cluster agent writes its node's GpuNodeReport status on a real control plane.

The real agent (`gpuval-agent cluster`, simulated GPU backend) runs as a process with a
ServiceAccount token, the cluster CA and KUBERNETES_SERVICE_HOST/PORT, as in a pod, and patches
the report through the API server's status subresource under the generated CRD's schema.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

from gpuval_devtools.controlplane import Cluster
from tests.support.kube import get_json

pytestmark = pytest.mark.cluster


def _serviceaccount_dir(cluster: Cluster, namespace: str, account: str, into: Path) -> Path:
    token = cluster.kubectl("create", "token", account, "-n", namespace).stdout.strip()
    (into / "token").write_text(token)
    config = json.loads(cluster.kubectl("config", "view", "--raw", "-o", "json").stdout)
    entry = config["clusters"][0]["cluster"]
    if "certificate-authority-data" in entry:
        (into / "ca.crt").write_bytes(base64.b64decode(entry["certificate-authority-data"]))
    else:
        (into / "ca.crt").write_text(Path(entry["certificate-authority"]).read_text())
    return into


def _agent_env(
    cluster: Cluster, account_dir: Path, report: str, simulate: dict[str, Any]
) -> dict[str, str]:
    config = json.loads(cluster.kubectl("config", "view", "--raw", "-o", "json").stdout)
    server = urlparse(config["clusters"][0]["cluster"]["server"])
    return dict(os.environ) | {
        "KUBERNETES_SERVICE_HOST": server.hostname or "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": str(server.port or 443),
        "GPUVAL_SERVICEACCOUNT_DIR": str(account_dir),
        "GPUVAL_REPORT_NAME": report,
        "GPUVAL_NODE_NAME": "node-under-test",
        "GPUVAL_BACKEND": "simulated",
        "GPUVAL_SIMULATE": json.dumps({"timeScale": 0.001} | simulate),
        "GPUVAL_CHECKS": json.dumps({"burn": {"durationSeconds": 5}}),
        "GPUVAL_EXPECTED_GPUS": "8",
    }


def _create_report(cluster: Cluster, name: str) -> None:
    report = {
        "apiVersion": "gpuval.dev/v1alpha1",
        "kind": "GpuNodeReport",
        "metadata": {"name": name},
        "spec": {"validation": "agent-writer-test", "run": "1", "node": "node-under-test"},
    }
    cluster.kubectl("create", "-f", "-", input=json.dumps(report))


def _run_agent(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuval_agent.cli", "cluster"],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


@pytest.fixture
def writer_account(
    cluster: Cluster, namespace: str, unique_name: Callable[[str], str]
) -> tuple[str, str]:
    """A ServiceAccount allowed to patch GpuNodeReport status and nothing else."""
    account, role = "gpuval-agent", unique_name("agent-writer")
    cluster.kubectl("create", "serviceaccount", account, "-n", namespace)
    cluster.kubectl("create", "clusterrole", role, "--verb=get,patch",
                    "--resource=gpunodereports.gpuval.dev/status")  # fmt: skip
    cluster.kubectl("create", "clusterrolebinding", role, f"--clusterrole={role}",
                    f"--serviceaccount={namespace}:{account}")  # fmt: skip
    return namespace, account


def test_the_agent_writes_a_failed_report_with_reason_summary_and_result(
    cluster: Cluster,
    install_crds: list[str],
    writer_account: tuple[str, str],
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    report = unique_name("report")
    _create_report(cluster, report)
    account_dir = _serviceaccount_dir(cluster, *writer_account, tmp_path)
    env = _agent_env(cluster, account_dir, report,
                     {"gpus": 8, "faults": [{"kind": "miscompare", "gpu": 5}]})  # fmt: skip
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
        "driver",
        "health",
        "burn",
        "bandwidth",
        "nccl",
    ]
    assert result["environment"]["gpus"][5]["uuid"] == "GPU-sim-node-under-test-5"


def test_a_passing_run_replaces_an_earlier_failure(
    cluster: Cluster,
    install_crds: list[str],
    writer_account: tuple[str, str],
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    report = unique_name("report")
    _create_report(cluster, report)
    account_dir = _serviceaccount_dir(cluster, *writer_account, tmp_path)
    overheating = {"gpus": 8, "faults": [{"kind": "overheat", "gpu": 0}]}
    failing = _run_agent(_agent_env(cluster, account_dir, report, overheating))
    assert failing.returncode == 1, failing.stderr
    passing = _run_agent(_agent_env(cluster, account_dir, report, {"gpus": 8}))
    assert passing.returncode == 0, passing.stderr
    status = get_json(cluster, "gpunodereport", report)["status"]
    assert status["verdict"] == "Passed"
    assert "reason" not in status
    assert status["failures"] == []


def test_an_identity_without_the_role_is_refused_with_a_clear_message(
    cluster: Cluster,
    install_crds: list[str],
    namespace: str,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    report = unique_name("report")
    _create_report(cluster, report)
    cluster.kubectl("create", "serviceaccount", "no-rights", "-n", namespace)
    account_dir = _serviceaccount_dir(cluster, namespace, "no-rights", tmp_path)
    completed = _run_agent(_agent_env(cluster, account_dir, report, {"gpus": 8}))
    assert completed.returncode == 2
    assert "HTTP 403" in completed.stderr and report in completed.stderr
    assert "Traceback" not in completed.stderr
    assert "status" not in get_json(cluster, "gpunodereport", report)
