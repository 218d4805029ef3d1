"""gpuval's own processes beside a local control plane: the CRDs and the agents' RBAC installed
from their one sources, the operator as its own process, and the pod runner (the kubelet stand-in
for simulated nodes). Used by the demo, the benchmarks and the tests.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from gpuval_api.env import OperatorEnv
from gpuval_devtools.buildsteps import stop_process
from gpuval_devtools.controlplane import Cluster
from gpuval_operator import rbac

REPO_ROOT = Path(__file__).resolve().parents[3]
CRD_DIR = REPO_ROOT / "crds"
AGENT_NAMESPACE = "gpuval-system"
AGENT_SERVICE_ACCOUNT = "gpuval-agent"


def agent_rbac(
    namespace: str = AGENT_NAMESPACE, account: str = AGENT_SERVICE_ACCOUNT
) -> list[dict[str, Any]]:
    """The agents' namespace, ServiceAccount and their rights, as the chart renders them: the
    report status patch (gpuval_operator.rbac.AGENT_RULES, which the admission policy narrows to
    the agent's node) and a read of pods in their namespace (rbac.AGENT_POD_RULES: a fabric rank
    reads rank 0's pod for its address)."""
    role = f"{account}-reports"
    cluster_role = rbac.cluster_role(role, rbac.AGENT_RULES)
    pods = f"{account}-pods"
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": account, "namespace": namespace},
        },
        cluster_role,
        {
            **rbac.binding("ClusterRole", role, account, namespace),
            "metadata": {"name": f"{role}-{namespace}"},
        },
        rbac.role(pods, namespace, rbac.AGENT_POD_RULES),
        rbac.binding("Role", pods, account, namespace, namespace),
    ]


def install_crds(cluster: Cluster) -> None:
    for path in sorted(CRD_DIR.glob("*.yaml")):
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(path))
        name = yaml.safe_load(path.read_text())["metadata"]["name"]
        cluster.kubectl("wait", "--for=condition=Established", f"crd/{name}", "--timeout=60s")


def _script(name: str) -> str:
    return str(Path(sys.executable).parent / name)


@contextlib.contextmanager
def operator_process(
    kubeconfig: Path,
    *,
    metrics_port: int,
    log_file: Path,
    namespace: str = AGENT_NAMESPACE,
    extra_env: dict[str, str] | None = None,
) -> Iterator[subprocess.Popen[bytes]]:
    """The operator as its own process (`gpuval-operator`), as it runs in its pod."""
    env = {
        **os.environ,
        "KUBECONFIG": str(kubeconfig),
        OperatorEnv.METRICS_PORT: str(metrics_port),
        OperatorEnv.AGENT_NAMESPACE: namespace,
        **(extra_env or {}),
    }
    with log_file.open("wb") as out:
        proc = subprocess.Popen(
            [_script("gpuval-operator")], env=env, stdout=out, stderr=subprocess.STDOUT
        )
        try:
            yield proc
        finally:
            stop_process(proc)


@contextlib.contextmanager
def podrunner_process(
    cluster: Cluster,
    *,
    logs_dir: Path,
    log_file: Path,
    namespace: str | None = None,
    env: Mapping[str, str] | None = None,
) -> Iterator[subprocess.Popen[bytes]]:
    """The pod runner (kubelet stand-in) as its own process; `namespace` limits it to the agent
    pods of one namespace, `env` replaces the inherited environment."""
    argv = [
        sys.executable,
        "-m",
        "gpuval_devtools.podrunner",
        "--kubeconfig",
        str(cluster.kubeconfig),
        "--ca-file",
        str(cluster.ca_file),
        "--logs",
        str(logs_dir),
    ]
    if namespace is not None:
        argv += ["--namespace", namespace]
    with log_file.open("wb") as out:
        proc = subprocess.Popen(
            argv, env=None if env is None else dict(env), stdout=out, stderr=subprocess.STDOUT
        )
        try:
            yield proc
        finally:
            stop_process(proc)


def kubectl_gpuval(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    """`kubectl gpuval ARGS` as a person runs it: the real kubectl finds the plugin (the
    kubectl-gpuval package's script, next to this interpreter) on PATH and hands it KUBECONFIG
    through the environment, as it does for every plugin."""
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "KUBECONFIG": str(cluster.kubeconfig),
    }
    return subprocess.run(
        [str(cluster.binaries.kubectl), "gpuval", *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
