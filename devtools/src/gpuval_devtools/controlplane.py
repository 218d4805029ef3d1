"""A real local Kubernetes control plane, built from Go modules, with simulated GPU nodes and,
when asked for, one real node (gpuval_devtools.realnode) that runs containers.

Nothing can be downloaded as a binary on the machines gpuval is developed and tested on, so every
component is built or unpacked from a package registry once and cached under one directory
(``$GPUVAL_CACHE``, default ``~/.cache/gpuval``): gpuval_devtools.binaries says how.

A cluster is started with kwokctl's binary runtime over those binaries, on loopback, with RBAC on;
GPU nodes are kwok nodes that advertise ``nvidia.com/gpu``; kwok manages only the nodes it is told
to (annotated), so a real node's kubelet is left alone.

Command line: ``python -m gpuval_devtools.controlplane build|up|down``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from gpuval_devtools.binaries import (
    ETCD_MIN_VERSION,
    GO_MODULE_DIR,
    KUBE_COMPONENTS,
    KUBE_VERSION,
    KWOK_VERSION,
    Binaries,
    build,
    chart_tools,
)
from gpuval_devtools.buildsteps import (
    BuildError,
    Log,
    cache_dir,
    debian_binary,
    free_port,
    parse_version,
    run_step,
    tree_digest,
)
from gpuval_devtools.buildsteps import stderr_log as _stderr_log
from gpuval_devtools.dra import device_classes
from gpuval_devtools.kueue import Kueue
from gpuval_devtools.kwoknodes import (
    API_SERVICE_IP,
    GPU_RESOURCE,
    KWOK_NODE_ANNOTATION,
    GpuNode,
    default_nodes,
    kwokctl_config,
    loopback_args,
)
from gpuval_devtools.nodetools import node_tools
from gpuval_devtools.realnode import RealNode, stop_left_running

# Earlier names of the build helpers, kept for the tests and tools that import them from here.
_run_step = run_step
_tree_digest = tree_digest
_parse_version = parse_version

__all__ = [
    "API_SERVICE_IP",
    "ETCD_MIN_VERSION",
    "GO_MODULE_DIR",
    "GPU_RESOURCE",
    "KUBE_COMPONENTS",
    "KUBE_VERSION",
    "KWOK_NODE_ANNOTATION",
    "KWOK_VERSION",
    "Binaries",
    "BuildError",
    "Cluster",
    "GpuNode",
    "Log",
    "build",
    "cache_dir",
    "debian_binary",
    "default_nodes",
    "free_port",
    "running_cluster",
]


def _create_argv(
    name: str, binaries: Binaries, workdir: Path, kwok_options: Mapping[str, Any] | None = None
) -> list[str]:
    """`kwokctl create cluster` over the binaries built here (the caller adds loopback flags)."""
    return [
        str(binaries.kwokctl),
        "--config",
        str(kwokctl_config(workdir, name, kwok_options)),
        "create",
        "cluster",
        "--name",
        name,
        "--runtime",
        "binary",
        "--kube-authorization=true",
        "--kube-apiserver-binary",
        str(binaries.kube_apiserver),
        "--kube-controller-manager-binary",
        str(binaries.kube_controller_manager),
        "--kube-scheduler-binary",
        str(binaries.kube_scheduler),
        "--kwok-controller-binary",
        str(binaries.kwok),
        "--etcd-binary",
        str(binaries.etcd),
        "--kubeconfig",
        # kwokctl merges the new context into this file; kept out of clusters/, where
        # kwokctl expects only cluster directories, and away from ~/.kube/config.
        str(workdir / "merged-kubeconfigs" / f"{name}.yaml"),
        "--quiet-pull",
        "--wait",
        "2m",
    ]


class Cluster:
    """A running local control plane. Start it with :meth:`start`, end it with :meth:`stop`."""

    def __init__(self, name: str, binaries: Binaries, workdir: Path) -> None:
        self.name = name
        self.binaries = binaries
        self.workdir = workdir
        self.cluster_dir = workdir / "clusters" / name
        self.kubeconfig = self.cluster_dir / "kubeconfig.yaml"
        config = yaml.safe_load(self.kubeconfig.read_text())
        cluster_entry = config["clusters"][0]["cluster"]
        self.server: str = cluster_entry["server"]
        self.ca_file = self.cluster_dir / "pki" / "ca.crt"
        self.real_node: RealNode | None = None
        self.kueue: Kueue | None = None

    @staticmethod
    def _kwok_env(workdir: Path) -> dict[str, str]:
        env = dict(os.environ)
        env["KWOK_WORKDIR"] = str(workdir)
        return env

    @classmethod
    def start(
        cls,
        name: str = "gpuval",
        nodes: Sequence[GpuNode] = (),
        *,
        log: Log = _stderr_log,
        disable_qps_limits: bool = False,
        extra_args: Sequence[str] = (),
        real_node: bool = False,
        kwok_options: Mapping[str, Any] | None = None,
    ) -> Cluster:
        """Starts the control plane with ``nodes`` (kwok), and with ``real_node`` one real node
        (gpuval_devtools.realnode: needs root) whose name is ``<name>-real``; ``kwok_options``
        are kwok-controller's (KwokConfiguration options, kwoknodes.kwokctl_config)."""
        binaries = build(log=log)
        workdir = cache_dir() / "kwok"
        (workdir / "merged-kubeconfigs").mkdir(parents=True, exist_ok=True)
        env = cls._kwok_env(workdir)
        if (workdir / "clusters" / name).exists():
            log(f"deleting a leftover cluster {name!r}")
            subprocess.run(
                [str(binaries.kwokctl), "delete", "cluster", "--name", name],
                env=env,
                capture_output=True,
                check=False,
            )
        argv = _create_argv(name, binaries, workdir, kwok_options)
        argv.extend(loopback_args())
        if disable_qps_limits:
            argv.append("--disable-qps-limits")
        argv.extend(extra_args)
        env["KWOK_KUBE_VERSION"] = KUBE_VERSION
        env["KWOK_KUBECTL_BINARY"] = str(binaries.kubectl)
        started = time.monotonic()
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise BuildError(
                f"kwokctl create cluster {name!r} failed with exit code {proc.returncode}; "
                f"component logs: {workdir / 'clusters' / name / 'logs'}\n"
                f"{proc.stdout}\n{proc.stderr}"
            )
        cluster = cls(name, binaries, workdir)
        log(f"cluster {name!r} up in {time.monotonic() - started:.1f}s at {cluster.server}")
        try:
            if nodes:
                cluster.add_nodes(nodes)
            if real_node:
                cluster.start_real_node(log=log)
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def _kubectl_base(self, kubeconfig: Path) -> list[str]:
        """kubectl with this cluster's own discovery cache: the default one (~/.kube/cache) is
        keyed by host:port, and a later cluster on a reused loopback port would read the API
        groups of an earlier one (seen: a category that no longer existed)."""
        cache = self.kubeconfig.parent / "kubectl-cache"
        return [
            str(self.binaries.kubectl),
            "--kubeconfig",
            str(kubeconfig),
            "--cache-dir",
            str(cache),
        ]

    def kubectl_argv(self) -> list[str]:
        """kubectl and its flags for this cluster, for a caller that runs it itself."""
        return self._kubectl_base(self.kubeconfig)

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [*self._kubectl_base(self.kubeconfig), *args],
            input=input,
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise subprocess.CalledProcessError(
                proc.returncode, proc.args, output=proc.stdout, stderr=proc.stderr
            )
        return proc

    def apply(self, objects: Sequence[Mapping[str, Any]]) -> None:
        docs = "\n---\n".join(yaml.safe_dump(dict(o)) for o in objects)
        self.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=docs)

    def add_nodes(self, nodes: Sequence[GpuNode], *, wait_ready: bool = True) -> None:
        for start in range(0, len(nodes), 500):
            self.apply([n.manifest() for n in nodes[start : start + 500]])
        slices = [dict(s) for n in nodes for s in n.slices]
        if slices:
            # The DRA driver's DeviceClasses first: the scheduler reads them for every claim.
            self.apply(device_classes())
            for start in range(0, len(slices), 500):
                self.apply(slices[start : start + 500])
        if wait_ready:
            self.wait_nodes_ready([n.name for n in nodes])

    def wait_nodes_ready(self, names: Sequence[str], timeout: float | None = None) -> None:
        """Waits until every named node is Ready. Thousands of nodes take minutes on 2 cores,
        so the default timeout and the poll interval grow with the count (each poll lists them all).
        """
        pending = set(names)
        timeout = 120 + 0.1 * len(pending) if timeout is None else timeout
        interval = max(0.3, len(pending) / 2000)
        ready = (
            "{range .items[*]}{.metadata.name} "
            "{.status.conditions[?(@.type=='Ready')].status}\n{end}"
        )
        deadline = time.monotonic() + timeout
        while pending:
            out = self.kubectl("get", "nodes", "-o", f"jsonpath={ready}", timeout=300).stdout
            for line in out.splitlines():
                name, _, status = line.partition(" ")
                if status == "True":
                    pending.discard(name)
            if not pending:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"nodes not Ready after {timeout:.0f}s: {sorted(pending)[:10]}")
            time.sleep(interval)

    def token_kubeconfig(self, token: str, path: Path) -> Path:
        """Writes a kubeconfig at ``path`` that authenticates with ``token`` alone (no client cert),
        so requests made with it carry exactly that identity."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": self.name,
                    "cluster": {"server": self.server, "certificate-authority": str(self.ca_file)},
                }
            ],
            "users": [{"name": "token", "user": {"token": token}}],
            "contexts": [{"name": "token", "context": {"cluster": self.name, "user": "token"}}],
            "current-context": "token",
        }
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)
        return path

    def kubectl_as(
        self, kubeconfig: Path, *args: str, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """kubectl with another kubeconfig (another identity); never raises on a non-zero exit."""
        return subprocess.run(
            [*self._kubectl_base(kubeconfig), *args],
            input=input,
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )

    def component_pid(self, component: str) -> int:
        """The process id of a control-plane component (``kube-apiserver``...), from the pid file
        kwokctl's binary runtime keeps for it."""
        return int((self.cluster_dir / "pids" / f"{component}.pid").read_text().strip())

    def delete_node(self, name: str) -> None:
        self.kubectl("delete", "node", name, "--wait=true")

    def start_real_node(self, *, log: Log = _stderr_log) -> RealNode:
        """Starts this cluster's real node (``<name>-real``; gpuval_devtools.realnode), or
        starts it anew when one runs."""
        self.stop_real_node()
        self.real_node = RealNode.start(self, log=log)
        return self.real_node

    def stop_real_node(self) -> list[str]:
        """Stops the real node, if one runs; returns what its teardown could not remove."""
        node, self.real_node = self.real_node, None
        return node.stop() if node is not None else []

    def start_kueue(self, *, log: Log = _stderr_log) -> Kueue:
        """Starts Kueue's manager against this cluster (gpuval_devtools.kueue), or starts it
        anew when one runs."""
        self.stop_kueue()
        self.kueue = Kueue.start(self, log=log)
        return self.kueue

    def stop_kueue(self) -> None:
        kueue, self.kueue = self.kueue, None
        if kueue is not None:
            kueue.stop()

    def stop(self) -> None:
        self.stop_kueue()
        self.stop_real_node()
        subprocess.run(
            [str(self.binaries.kwokctl), "delete", "cluster", "--name", self.name],
            env=self._kwok_env(self.workdir),
            capture_output=True,
            check=False,
        )

    @classmethod
    def attach(cls, name: str = "gpuval") -> Cluster:
        """The cluster ``name`` started earlier (by ``up``), without starting anything."""
        workdir = cache_dir() / "kwok"
        if not (workdir / "clusters" / name / "kubeconfig.yaml").is_file():
            raise FileNotFoundError(
                f"no local cluster named {name!r}; start one with `make cluster-up`"
            )
        return cls(name, build(log=lambda _m: None), workdir)


@contextlib.contextmanager
def running_cluster(name: str, nodes: Sequence[GpuNode] = (), **kwargs: Any) -> Iterator[Cluster]:
    cluster = Cluster.start(name, nodes, **kwargs)
    try:
        yield cluster
    finally:
        cluster.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gpuval_devtools.controlplane",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("build", help="build and cache every binary")
    up = sub.add_parser("up", help="start a cluster with simulated GPU nodes")
    up.add_argument("--name", default="gpuval")
    up.add_argument("--nodes", type=int, default=3)
    up.add_argument("--gpus", type=int, default=8)
    up.add_argument(
        "--real-node", action="store_true", help="also one real node (needs root; see realnode)"
    )
    down = sub.add_parser("down", help="stop and delete a cluster")
    down.add_argument("--name", default="gpuval")
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            started = time.monotonic()
            binaries = build()
            tools = node_tools(binaries, log=_stderr_log)
            lint = chart_tools(log=_stderr_log)
            for name, path in [*vars(binaries).items(), *vars(tools).items(), *vars(lint).items()]:
                print(f"{name:24} {path}")
            print(f"ready in {time.monotonic() - started:.1f}s")
        elif args.command == "up":
            nodes = [GpuNode(name=f"gpu-node-{i}", gpus=args.gpus) for i in range(args.nodes)]
            cluster = Cluster.start(args.name, nodes, real_node=args.real_node)
            print(f"export KUBECONFIG={cluster.kubeconfig}")
        elif args.command == "down":
            stop_left_running(args.name)
            Cluster.attach(args.name).stop()
    except (BuildError, FileNotFoundError, TimeoutError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
