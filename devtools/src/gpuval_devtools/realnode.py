"""One real node in the test cluster: a kubelet that runs gpuval's images as real containers.

Beside the kwok nodes (which run nothing), this node runs the kubelet and kube-proxy built from
``hack/controlplane``, Debian bookworm's containerd 1.6 with runc, and the standard CNI plugins
(bridge, host-local, portmap, loopback), all from this module's own paths under
``$GPUVAL_CACHE/realnode/<cluster>`` (logs in ``logs/`` there, kept after the node stops). It
registers with the cluster's API server over loopback, tainted ``gpuval.dev/real-node`` so only
pods that ask for it land there, and advertises ``nvidia.com/gpu`` without a device plugin: its
node status capacity is patched (the status subresource), as Kubernetes documents for extended
resources; the kubelet copies it to allocatable and admits pods that request it.

The snags this works around (design.md, "A real node in the tests"): the machine has cgroup v1
(``failCgroupV1: false``) and swap may be on (``failSwapOn: false``); this sandbox lacks
CAP_SYS_RESOURCE, so containerd restricts OOM score changes and no daemon lowers its own; the
sandbox image is built here; the node IP is the machine's interface address, never loopback.
Pods reach the API server at the ``kubernetes`` Service address through a DNAT to loopback
(kube-proxy leaves that one Service to it), other Services through kube-proxy, and names through a
cluster DNS stand-in (gpuval_devtools.clusterdns). gpuval_devtools.nodenet records the machine
before the node starts and puts it back afterwards, also after a crash.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from gpuval_devtools import images, nodeconfig, nodenet
from gpuval_devtools.buildsteps import (
    BuildError,
    Log,
    cache_dir,
    stderr_log,
)
from gpuval_devtools.nodetools import NodeTools, node_tools

if TYPE_CHECKING:
    from gpuval_devtools.clusteraccess import ClusterAccess

GPU_RESOURCE = "nvidia.com/gpu"
TAINT_KEY = nodeconfig.TAINT_KEY
# kube-proxy skips Services with this label; the `kubernetes` Service is our DNAT's (the API
# server's endpoint is the machine's address, where it does not listen).
PROXY_NAME_LABEL = "service.kubernetes.io/service-proxy-name"


def node_root(cluster_name: str) -> Path:
    return cache_dir() / "realnode" / cluster_name


@dataclass
class RealNode:
    """A running real node; :meth:`start` it for a cluster, :meth:`stop` it before the cluster."""

    cluster: ClusterAccess
    name: str
    gpus: int
    tools: NodeTools
    paths: nodeconfig.NodePaths
    footprint: nodenet.Footprint
    exit_stack: contextlib.ExitStack
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    image_refs: dict[str, str] = field(default_factory=dict)

    @classmethod
    def start(
        cls,
        cluster: ClusterAccess,
        *,
        name: str | None = None,
        gpus: int = 8,
        log: Log = stderr_log,
    ) -> RealNode:
        """Starts the node and waits until it is Ready with its GPUs advertised; on any failure
        the machine is put back as it was before raising."""
        started = time.monotonic()
        tools = node_tools(cluster.binaries, log=log)
        pause = images.ensure_pause(log=log)
        built = images.ensure(log=log)
        stack = contextlib.ExitStack()
        with contextlib.ExitStack() as on_failure:
            on_failure.callback(stack.close)
            stack.enter_context(nodenet.machine_lock(log=log))
            nodenet.sweep(log=log)
            paths = nodeconfig.NodePaths.fresh(node_root(cluster.name))
            footprint = nodenet.record(paths.root, paths.containerd_socket)
            on_failure.pop_all()
        node = cls(cluster, name or f"{cluster.name}-real", gpus, tools, paths, footprint, stack)
        try:
            node._boot(pause, built, log=log)
        except BaseException:
            node.stop(log=log)
            raise
        log(
            f"real node {node.name} Ready in {time.monotonic() - started:.1f}s (logs: {paths.logs})"
        )
        return node

    def _boot(self, pause: images.BuiltImage, built: list[images.BuiltImage], *, log: Log) -> None:
        cluster, paths = self.cluster, self.paths
        node_ip = nodenet.host_ip()
        api_port = int(cluster.server.rsplit(":", 1)[1])
        nodenet.setup_network(api_port)
        nodenet.setup_cgroups()
        nodeconfig.write_all(
            paths, cluster, node=self.name, node_ip=node_ip, tools=self.tools, pause=pause.ref
        )
        containerd = [str(self.tools.containerd), "--config", str(paths.containerd_config)]
        self._spawn("containerd", containerd, path=self.tools.containerd.parent)
        self._wait_containerd()
        for image in [pause, *built]:
            self.load_images([image.archive])
            self.image_refs[image.name] = image.ref
        cluster.kubectl(
            "label",
            "service",
            "kubernetes",
            "-n",
            "default",
            f"{PROXY_NAME_LABEL}=gpuval-dnat",
            "--overwrite",
        )
        self._spawn("clusterdns", nodeconfig.clusterdns_argv(paths, cluster))
        self._spawn("kube-proxy", [str(self.tools.kube_proxy), "--config", str(paths.proxy_config)])
        self._spawn("kubelet", nodeconfig.kubelet_argv(paths, self.tools, self.name, node_ip))
        self._wait_ready(timeout=180)
        self._advertise_gpus()

    def _spawn(self, component: str, argv: list[str], *, path: Path | None = None) -> None:
        env = None
        if path is not None:
            # containerd finds its shim (containerd-shim-runc-v2) on PATH.
            env = {**os.environ, "PATH": f"{path}:{os.environ.get('PATH', '')}"}
        # Its own session: a Ctrl-C to the tests must not kill it before teardown does.
        with (self.paths.logs / f"{component}.log").open("ab") as log_file:
            proc = subprocess.Popen(
                argv, stdout=log_file, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        self.processes[component] = proc
        self.footprint.pids[component] = proc.pid
        self.footprint.save()
        time.sleep(0.2)
        if proc.poll() is not None:
            raise BuildError(
                f"real node: {component} exited with {proc.returncode} at start; "
                f"log: {self.paths.logs / f'{component}.log'}"
            )

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        ready = "{.status.conditions[?(@.type=='Ready')].status}"
        while time.monotonic() < deadline:
            self._check_alive()
            got = self.cluster.kubectl(
                "get", "node", self.name, "-o", f"jsonpath={ready}", check=False
            )
            if got.stdout.strip() == "True":
                return
            time.sleep(0.5)
        raise BuildError(
            f"real node {self.name} not Ready after {timeout:.0f}s; "
            f"kubelet log: {self.paths.logs / 'kubelet.log'}"
        )

    def _check_alive(self) -> None:
        for component, proc in self.processes.items():
            if proc.poll() is not None:
                raise BuildError(
                    f"real node: {component} exited with {proc.returncode}; "
                    f"log: {self.paths.logs / f'{component}.log'}"
                )

    def _wait_containerd(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._ctr("version", check=False).returncode == 0:
                return
            time.sleep(0.2)
        raise BuildError(
            f"real node: containerd did not answer on {self.paths.containerd_socket} within "
            f"{timeout:.0f}s; log: {self.paths.logs / 'containerd.log'}"
        )

    def _ctr(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [
                str(self.tools.ctr),
                "--address",
                str(self.paths.containerd_socket),
                "--namespace",
                "k8s.io",
                *args,
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )
        if check and proc.returncode != 0:
            raise BuildError(
                f"real node: ctr {' '.join(args)} exited {proc.returncode}: {proc.stderr.strip()}"
                f"; containerd log: {self.paths.logs / 'containerd.log'}"
            )
        return proc

    def load_images(self, archives: list[Path]) -> None:
        """``ctr images import`` each OCI archive into the node's containerd (namespace k8s.io)."""
        for archive in archives:
            self._ctr("images", "import", str(archive))

    def _advertise_gpus(self) -> None:
        patch = [{"op": "add", "path": "/status/capacity/nvidia.com~1gpu", "value": str(self.gpus)}]
        self.cluster.kubectl(
            "patch",
            "node",
            self.name,
            "--subresource=status",
            "--type=json",
            "-p",
            json.dumps(patch),
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            out = self.cluster.kubectl(
                "get", "node", self.name, "-o", "jsonpath={.status.allocatable.nvidia\\.com/gpu}"
            ).stdout.strip()
            if out == str(self.gpus):
                return
            time.sleep(0.5)
        raise BuildError(
            f"real node {self.name}: allocatable {GPU_RESOURCE} never became {self.gpus} after "
            f"patching its capacity; kubelet log: {self.paths.logs / 'kubelet.log'}"
        )

    def container_pid(self, container_id: str) -> int:
        """The host PID of a running container (``containerd://<id>`` or the bare id)."""
        wanted = container_id.removeprefix("containerd://")
        for line in self._ctr("tasks", "ls").stdout.splitlines()[1:]:
            task, pid, *_ = line.split()
            if task == wanted:
                return int(pid)
        raise LookupError(f"no running task {wanted} on the real node {self.name}")

    def stop(self, *, log: Log = stderr_log) -> list[str]:
        """Stops every process of the node and removes what it added to the machine; returns
        what could not be removed (empty when the machine is as it was)."""
        for proc in self.processes.values():
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        for proc in self.processes.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
        self.processes.clear()
        problems = nodenet.teardown(self.footprint, log=log)
        if not problems:  # never delete through a mount that stayed
            for sub in ("containerd", "kubelet", "cni"):
                shutil.rmtree(self.paths.root / sub, ignore_errors=True)
        self.exit_stack.close()
        return problems


def stop_left_running(cluster_name: str, *, log: Log = stderr_log) -> bool:
    """Stops the real node of ``cluster_name`` that a process which has ended started (as
    `make cluster-up REAL_NODE=1` does); False when there is none."""
    footprint = nodenet.Footprint.load()
    if footprint is None or Path(footprint.root) != node_root(cluster_name):
        return False
    with nodenet.machine_lock(log=log):
        nodenet.sweep(log=log)
    return True
