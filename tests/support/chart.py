"""Helpers for the tests of charts/gpuval: rendering and installing the chart with the helm built by
gpuval_devtools.controlplane, ServiceAccount tokens bound to pods, and the identities the chart
creates. Used by test_chart_*.py, test_admission_*.py and test_alerts_*.py."""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import os
import subprocess
import urllib.request
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuval_devtools.controlplane import Binaries, Cluster, GpuNode, build, free_port
from gpuval_devtools.launch import podrunner_process
from gpuval_devtools.simulation import simulated_node

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART = REPO_ROOT / "charts" / "gpuval"
# The kube version helm renders for when there is no cluster to ask (the chart needs >= 1.30).
KUBE_VERSION = "1.36.3"


def binaries() -> Binaries:
    """helm, kubectl and the rest, built once by the control-plane build (cached)."""
    return build(log=lambda _message: None)


def helm(
    *args: str, kubeconfig: Path | None = None, check: bool = True, timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    argv = [str(binaries().helm), *args]
    if kubeconfig is not None:
        argv += ["--kubeconfig", str(kubeconfig)]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} exited {proc.returncode}:\n{proc.stderr}")
    return proc


def set_args(values: Mapping[str, Any]) -> list[str]:
    """--set-json for each dotted key, so booleans, numbers and lists keep their types."""
    out: list[str] = []
    for key, value in values.items():
        out += ["--set-json", f"{key}={json.dumps(value)}"]
    return out


def render(
    *,
    release: str = "gpuval",
    namespace: str = "gpuval-system",
    values_files: Sequence[Path] = (),
    values: Mapping[str, Any] | None = None,
    show_only: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """The objects `helm template` renders (hooks and tests included)."""
    args = ["template", release, str(CHART), "--namespace", namespace]
    args += ["--kube-version", KUBE_VERSION]
    for path in values_files:
        args += ["--values", str(path)]
    args += set_args(values or {})
    for template in show_only:
        args += ["--show-only", template]
    out = helm(*args).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def find(objs: Sequence[Mapping[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    matches = [
        dict(o)
        for o in objs
        if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]
    assert len(matches) == 1, f"expected one {kind} {name or ''}, rendered {len(matches)}"
    return matches[0]


@dataclass(frozen=True)
class Release:
    """An installed release of the chart and the names it gave its objects."""

    name: str
    namespace: str
    fullname: str

    @property
    def agent_namespace(self) -> str:
        """Where the agent pods run: the chart's default, `<release namespace>-agents`."""
        return f"{self.namespace}-agents"

    @property
    def operator_sa(self) -> str:
        return f"{self.fullname}-operator"

    @property
    def agent_sa(self) -> str:
        return f"{self.fullname}-agent"

    @property
    def policy(self) -> str:
        return f"{self.fullname}-agent-own-node-report"

    def user(self, account: str, namespace: str | None = None) -> str:
        return f"system:serviceaccount:{namespace or self.namespace}:{account}"


def new_release_name() -> str:
    # "gpuval" in the release name makes it the fullname: short, recognisable object names.
    return f"gpuval-{uuid.uuid4().hex[:6]}"


def install(
    cluster: Cluster,
    release: str,
    namespace: str,
    values: Mapping[str, Any] | None = None,
) -> Release:
    helm(
        "install",
        release,
        str(CHART),
        "--namespace",
        namespace,
        *set_args(values or {}),
        kubeconfig=cluster.kubeconfig,
    )
    return Release(name=release, namespace=namespace, fullname=release)


RESTRICTED = {
    f"pod-security.kubernetes.io/{mode}": "restricted" for mode in ("enforce", "audit", "warn")
}


def restricted_namespace(cluster: Cluster, namespace: str) -> None:
    """A namespace that enforces Pod Security's `restricted` level (the operator's)."""
    cluster.kubectl("create", "namespace", namespace)
    cluster.kubectl("label", "namespace", namespace, *(f"{k}={v}" for k, v in RESTRICTED.items()))


def uninstall(cluster: Cluster, release: Release) -> None:
    helm(
        "uninstall",
        release.name,
        "--namespace",
        release.namespace,
        "--wait",
        kubeconfig=cluster.kubeconfig,
        check=False,
    )


def token_for(
    cluster: Cluster, namespace: str, account: str, *, pod: str | None = None, minutes: int = 30
) -> str:
    """A TokenRequest token for `account`; bound to `pod` (its node is then in the token)."""
    args = ["create", "token", account, "-n", namespace, f"--duration={minutes}m"]
    if pod is not None:
        args += ["--bound-object-kind", "Pod", "--bound-object-name", pod]
    return cluster.kubectl(*args).stdout.strip()


def jwt_claims(token: str) -> dict[str, Any]:
    payload = token.split(".")[1]
    decoded: dict[str, Any] = json.loads(
        base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
    )
    return decoded


def kubeconfig_for(cluster: Cluster, token: str, path: Path, namespace: str) -> Path:
    """A token-only kubeconfig whose context namespace is `namespace`, as a pod's in-cluster
    config has (kopf posts Events of cluster-scoped objects to that namespace)."""
    cluster.token_kubeconfig(token, path)
    config = yaml.safe_load(path.read_text())
    config["contexts"][0]["context"]["namespace"] = namespace
    path.write_text(yaml.safe_dump(config))
    return path


def pinned_pod(name: str, namespace: str, node: str, account: str) -> dict[str, Any]:
    """A pod running as `account`, placed on `node` by kube-scheduler (nodeSelector, not nodeName),
    which kwok then marks Running."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "serviceAccountName": account,
            "nodeSelector": {"kubernetes.io/hostname": node},
            "containers": [{"name": "agent", "image": "gpuval/agent:test"}],
        },
    }


def report(name: str, node: str, validation: str = "admission-test") -> dict[str, Any]:
    return {
        "apiVersion": "gpuval.dev/v1alpha1",
        "kind": "GpuNodeReport",
        "metadata": {"name": name},
        "spec": {"validation": validation, "run": "r1", "node": node},
    }


def scheduled_node(cluster: Cluster, namespace: str, pod: str) -> str:
    proc = cluster.kubectl(
        "get", "pod", pod, "-n", namespace, "-o", "jsonpath={.spec.nodeName}", check=False
    )
    return proc.stdout.strip() if proc.returncode == 0 else ""


def rules_of(objs: Sequence[Mapping[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(role name, rule) for every rule of every (Cluster)Role rendered."""
    for obj in objs:
        if obj["kind"] in ("ClusterRole", "Role"):
            for rule in obj.get("rules") or []:
                yield obj["metadata"]["name"], rule


def operator_env(release: Release) -> dict[str, str]:
    """The operator container's environment exactly as the chart's Deployment sets it."""
    objs = render(release=release.name, namespace=release.namespace)
    deployment = find(objs, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return {e["name"]: str(e["value"]) for e in container["env"]}


def pool_node(name: str, pool: str, faults: Sequence[Mapping[str, Any]] = ()) -> GpuNode:
    """A simulated GPU node (its agent pods run by the pod runner) in the test's own pool."""
    node = simulated_node(name, [dict(f) for f in faults])
    return dataclasses.replace(node, labels={**node.labels, POOL_LABEL: pool})


POOL_LABEL = "test.gpuval.dev/pool"


def validation(name: str, pool: str, **spec: Any) -> dict[str, Any]:
    """A GpuValidation of the test's pool that exercises every call the operator makes: reports,
    pods, node labels, taints and cordons, Events, status (`spec` overrides fields)."""
    body = {
        "apiVersion": "gpuval.dev/v1alpha1",
        "kind": "GpuValidation",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"matchLabels": {POOL_LABEL: pool}},
            "maxConcurrent": 4,
            "nodeTimeoutSeconds": 120,
            "checks": {"burn": {"durationSeconds": 2}},
            "nodeActions": {"label": True, "taint": {"effect": "NoSchedule"}, "cordon": True},
        },
    }
    body["spec"].update(spec)
    return body


@contextlib.contextmanager
def podrunner(cluster: Cluster, namespace: str, workdir: Path) -> Iterator[subprocess.Popen[bytes]]:
    """The kubelet stand-in for the pool's kwok nodes, for agent pods of `namespace` only."""
    # Agents inherit the runner's environment, as a pod's containers do not: keep the operator's
    # settings (GPUVAL_METRICS_PORT above all) out of it.
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUVAL_") and k != "KUBECONFIG"}
    with podrunner_process(
        cluster,
        logs_dir=workdir / "agents",
        log_file=workdir / "podrunner.log",
        namespace=namespace,
        env=env,
    ) as proc:
        yield proc


@contextlib.contextmanager
def installed(cluster: Cluster, prefix: str) -> Iterator[Release]:
    """The chart installed as a new release into a new namespace, both removed afterwards. The
    namespace enforces Pod Security's `restricted` level, as docs/install.md says to label it:
    the ReplicaSet's operator pods are refused there unless they meet it."""
    namespace = f"{prefix}-{uuid.uuid4().hex[:6]}"
    restricted_namespace(cluster, namespace)
    release = install(cluster, new_release_name(), namespace)
    try:
        yield release
    finally:
        uninstall(cluster, release)
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def operator_as_chart_serviceaccount(
    cluster: Cluster, release: Release, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> int:
    """Points this process's environment at the chart's operator identity and configuration, for
    the operator that kopf_runner then starts in-process; returns its metrics port.

    The identity is a token of the chart's operator ServiceAccount and nothing else (no client
    certificate), in a kubeconfig whose namespace is the release's, as in the operator's pod.
    """
    token = token_for(cluster, release.namespace, release.operator_sa, minutes=60)
    kubeconfig = kubeconfig_for(cluster, token, workdir / "operator.kubeconfig", release.namespace)
    port = free_port()
    for key, value in operator_env(release).items():
        monkeypatch.setenv(key, value)
    # The chart's port is the pod's; in-process the operator shares the host's ports.
    monkeypatch.setenv("GPUVAL_METRICS_PORT", str(port))
    # Read at login and at start-up (kopf's login, gpuval_operator.kube.credentials), not at import.
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    return port


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text: str = answer.read().decode()
        return text
