"""An agent run as a pod would run it, against the real control plane: its ServiceAccount
token and the cluster CA in a directory, the in-cluster variables, the report it writes."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from gpuval_devtools.controlplane import Cluster


def serviceaccount_dir(cluster: Cluster, namespace: str, account: str, into: Path) -> Path:
    token = cluster.kubectl("create", "token", account, "-n", namespace).stdout.strip()
    (into / "token").write_text(token)
    config = json.loads(cluster.kubectl("config", "view", "--raw", "-o", "json").stdout)
    entry = config["clusters"][0]["cluster"]
    if "certificate-authority-data" in entry:
        (into / "ca.crt").write_bytes(base64.b64decode(entry["certificate-authority-data"]))
    else:
        (into / "ca.crt").write_text(Path(entry["certificate-authority"]).read_text())
    return into


def agent_env(
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


def create_report(cluster: Cluster, name: str) -> None:
    report = {
        "apiVersion": "gpuval.dev/v1alpha1",
        "kind": "GpuNodeReport",
        "metadata": {"name": name},
        "spec": {"validation": "agent-writer-test", "run": "1", "node": "node-under-test"},
    }
    cluster.kubectl("create", "-f", "-", input=json.dumps(report))
