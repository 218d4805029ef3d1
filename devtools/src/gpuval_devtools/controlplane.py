"""A real local Kubernetes control plane, built from Go modules, with simulated GPU nodes.

Nothing can be downloaded as a binary on the machines gpuval is developed and tested on, so every
component is built or unpacked from a package registry once and cached under one directory
(``$GPUVAL_CACHE``, default ``~/.cache/gpuval``):

- kube-apiserver, kube-controller-manager, kube-scheduler and kubectl: compiled from the Go module
  in
  ``hack/controlplane`` whose mains call ``k8s.io/kubernetes/cmd/<component>/app``, stamped with the
  Kubernetes version so kwokctl can read it;
- kwok and kwokctl, helm: ``go install`` at pinned tags;
- etcd (>= 3.5.11, which kube-apiserver >= 1.31 needs): unpacked from Debian trixie's
  ``etcd-server``
  package (bookworm's 3.4 is too old); an ``etcd`` already on PATH that is new enough is used
  instead.

A cluster is started with kwokctl's binary runtime over those binaries, on loopback, with RBAC on;
GPU nodes are kwok nodes that advertise ``nvidia.com/gpu``.

Command line: ``python -m gpuval_devtools.controlplane build|up|down|status``.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

KUBE_VERSION = "v1.36.3"
KWOK_VERSION = "v0.8.0"
HELM_MODULE = "helm.sh/helm/v3"
HELM_VERSION = "v3.22.0"
ETCD_MIN_VERSION = (3, 5, 11)
DEBIAN_NEWER_SUITE = "trixie"

REPO_ROOT = Path(__file__).resolve().parents[3]
GO_MODULE_DIR = REPO_ROOT / "hack" / "controlplane"
KUBE_COMPONENTS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")

GPU_RESOURCE = "nvidia.com/gpu"
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"


def cache_dir() -> Path:
    return Path(os.environ.get("GPUVAL_CACHE", "~/.cache/gpuval")).expanduser()


class BuildError(RuntimeError):
    """A build step failed; the message names the step and where its log is."""


@dataclass(frozen=True)
class Binaries:
    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kubectl: Path
    kwok: Path
    kwokctl: Path
    helm: Path
    prometheus: Path
    promtool: Path


Log = Callable[[str], None]


def _stderr_log(message: str) -> None:
    print(f"[controlplane] {message}", file=sys.stderr, flush=True)


def _go_env(root: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        GOMODCACHE=str(root / "go" / "mod"),
        GOCACHE=str(root / "go" / "build"),
        GOPATH=str(root / "go" / "path"),
        GOTOOLCHAIN="local",
        GOFLAGS="-buildvcs=false -trimpath",
    )
    return env


def _run_step(
    step: str,
    argv: Sequence[str],
    *,
    log: Log,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> None:
    logs = cache_dir() / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log_path = logs / f"{step}.log"
    started = time.monotonic()
    log(f"{step}: {' '.join(argv)}  (log: {log_path})")
    with log_path.open("w") as out:
        proc = subprocess.run(
            list(argv), cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, check=False
        )
    if proc.returncode != 0:
        tail = log_path.read_text(errors="replace").splitlines()[-15:]
        raise BuildError(
            f"build step {step!r} failed with exit code {proc.returncode}; "
            f"full log: {log_path}\n" + "\n".join(tail)
        )
    log(f"{step}: done in {time.monotonic() - started:.0f}s")


def _tree_digest(paths: Sequence[Path], extra: str) -> str:
    digest = hashlib.sha256(extra.encode())
    for base in paths:
        files = sorted(p for p in base.rglob("*") if p.is_file()) if base.is_dir() else [base]
        for f in files:
            digest.update(str(f.relative_to(REPO_ROOT)).encode())
            digest.update(f.read_bytes())
    return digest.hexdigest()[:16]


def _stamped(stamp: Path, key: str) -> bool:
    return stamp.is_file() and stamp.read_text().strip() == key


def _parse_version(text: str) -> tuple[int, ...]:
    for token in text.replace(",", " ").split():
        parts = token.lstrip("v").split(".")
        if len(parts) >= 3 and all(p.isdigit() for p in parts[:3]):
            return tuple(int(p) for p in parts[:3])
    return ()


def _etcd_version(binary: Path) -> tuple[int, ...]:
    out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, check=False)
    return _parse_version(out.stdout)


def _ensure_debian_suite(suite: str, *, log: Log) -> None:
    """Adds a newer Debian suite at low priority: only packages asked for by name come from it."""
    sources = Path(f"/etc/apt/sources.list.d/gpuval-{suite}.sources")
    prefs = Path(f"/etc/apt/preferences.d/gpuval-{suite}")
    if not sources.exists():
        if os.geteuid() != 0:
            raise BuildError(
                f"build step 'debian-{suite}' needs root to add the Debian {suite} package source "
                f"(for etcd >= 3.5.11); run `make controlplane` as root once, or put an etcd >= "
                f"3.5.11 on PATH"
            )
        sources.write_text(
            "Types: deb\nURIs: http://deb.debian.org/debian\n"
            f"Suites: {suite}\nComponents: main\n"
            "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
        )
        prefs.write_text(f"Package: *\nPin: release n={suite}\nPin-Priority: 100\n")
        log(f"added Debian {suite} at pin priority 100: {sources}")
    lists = list(Path("/var/lib/apt/lists").glob(f"*_dists_{suite}_*Packages*"))
    if not lists:
        _run_step(f"apt-update-{suite}", ["apt-get", "update"], log=log)


def debian_binary(package: str, binaries: Sequence[str], *, log: Log) -> dict[str, Path]:
    """Unpacks ``package`` from Debian's newer suite into the cache; returns the named binaries."""
    root = cache_dir() / "debian" / package
    found = {b: root / "usr" / "bin" / b for b in binaries}
    if all(p.is_file() for p in found.values()):
        return found
    _ensure_debian_suite(DEBIAN_NEWER_SUITE, log=log)
    debs = cache_dir() / "debian" / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    for old in debs.glob(f"{package}_*.deb"):
        old.unlink()
    download = ["apt-get", "download", f"{package}/{DEBIAN_NEWER_SUITE}"]
    try:
        _run_step(f"apt-download-{package}", download, cwd=debs, log=log)
    except BuildError:
        # Package lists older than the mirror name a .deb that is gone: refresh once and retry.
        _run_step(f"apt-update-{DEBIAN_NEWER_SUITE}", ["apt-get", "update"], log=log)
        _run_step(f"apt-download-{package}", download, cwd=debs, log=log)
    deb = next(iter(sorted(debs.glob(f"{package}_*.deb"))), None)
    if deb is None:
        raise BuildError(f"build step 'apt-download-{package}' produced no .deb in {debs}")
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    _run_step(f"unpack-{package}", ["dpkg-deb", "-x", str(deb), str(root)], log=log)
    missing = [b for b, p in found.items() if not p.is_file()]
    if missing:
        raise BuildError(f"Debian package {package} has no {missing} under {root}/usr/bin")
    return found


def _ensure_etcd(*, log: Log) -> Path:
    on_path = shutil.which("etcd")
    if on_path and _etcd_version(Path(on_path)) >= ETCD_MIN_VERSION:
        return Path(on_path)
    etcd = debian_binary("etcd-server", ["etcd"], log=log)["etcd"]
    version = _etcd_version(etcd)
    if version < ETCD_MIN_VERSION:
        raise BuildError(
            f"etcd from Debian {DEBIAN_NEWER_SUITE} is {version}, kube-apiserver "
            f"{KUBE_VERSION} needs >= {ETCD_MIN_VERSION}"
        )
    return etcd


def _ensure_kube(*, log: Log) -> dict[str, Path]:
    root = cache_dir()
    key = _tree_digest(
        [GO_MODULE_DIR / "go.mod", GO_MODULE_DIR / "go.sum", GO_MODULE_DIR / "cmd"], KUBE_VERSION
    )
    out = root / "bin" / f"kube-{KUBE_VERSION}"
    stamp = out / ".stamp"
    paths = {c: out / c for c in KUBE_COMPONENTS}
    if _stamped(stamp, key) and all(p.is_file() for p in paths.values()):
        return paths
    out.mkdir(parents=True, exist_ok=True)
    major, minor = KUBE_VERSION.lstrip("v").split(".")[:2]
    pkg = "k8s.io/component-base/version"
    ldflags = " ".join(
        [
            "-s -w",
            f"-X {pkg}.gitVersion={KUBE_VERSION}",
            f"-X {pkg}.gitMajor={major}",
            f"-X {pkg}.gitMinor={minor}",
            f"-X {pkg}.gitTreeState=clean",
            f"-X {pkg}.buildDate=1970-01-01T00:00:00Z",
        ]
    )
    log(
        "building kube-apiserver, kube-controller-manager, kube-scheduler and kubectl from Go "
        "modules: the first build takes 20-40 minutes on 2 cores, later ones are cached"
    )
    _run_step(
        "build-kubernetes",
        ["go", "build", "-ldflags", ldflags, "-o", str(out) + "/", "./cmd/..."],
        cwd=GO_MODULE_DIR,
        env=_go_env(root),
        log=log,
    )
    stamp.write_text(key)
    return paths


def _go_install(step: str, target: str, names: Sequence[str], *, log: Log) -> dict[str, Path]:
    root = cache_dir()
    out = root / "bin" / step
    paths = {n: out / n for n in names}
    stamp = out / ".stamp"
    if _stamped(stamp, target) and all(p.is_file() for p in paths.values()):
        return paths
    out.mkdir(parents=True, exist_ok=True)
    env = _go_env(root)
    env["GOBIN"] = str(out)
    _run_step(f"install-{step}", ["go", "install", *target.split()], env=env, log=log)
    stamp.write_text(target)
    return paths


def build(*, log: Log = _stderr_log) -> Binaries:
    """Builds or unpacks every binary once; later calls return the cached paths in milliseconds."""
    if shutil.which("go") is None:
        raise BuildError("build step 'go' failed: no `go` on PATH (Go >= 1.26 is needed)")
    etcd = _ensure_etcd(log=log)
    kube = _ensure_kube(log=log)
    kwok = _go_install(
        f"kwok-{KWOK_VERSION}",
        f"sigs.k8s.io/kwok/cmd/kwok@{KWOK_VERSION} sigs.k8s.io/kwok/cmd/kwokctl@{KWOK_VERSION}",
        ["kwok", "kwokctl"],
        log=log,
    )
    helm = _go_install(
        f"helm-{HELM_VERSION}", f"{HELM_MODULE}/cmd/helm@{HELM_VERSION}", ["helm"], log=log
    )
    # The alert tests run a real Prometheus; unpacked here so no test downloads anything.
    prometheus = debian_binary("prometheus", ["prometheus"], log=log)["prometheus"]
    promtool = debian_binary("promtool", ["promtool"], log=log)["promtool"]
    return Binaries(
        etcd=etcd,
        kube_apiserver=kube["kube-apiserver"],
        kube_controller_manager=kube["kube-controller-manager"],
        kube_scheduler=kube["kube-scheduler"],
        kubectl=kube["kubectl"],
        kwok=kwok["kwok"],
        kwokctl=kwok["kwokctl"],
        helm=helm["helm"],
        prometheus=prometheus,
        promtool=promtool,
    )


def free_port() -> int:
    """A free TCP port on loopback."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _loopback_args() -> list[str]:
    """kwokctl binds every component to 0.0.0.0; a test control plane belongs on loopback."""
    etcd, peer, kwok = free_port(), free_port(), free_port()
    overrides = {
        "etcd": {
            "listen-client-urls": f"http://127.0.0.1:{etcd}",
            "advertise-client-urls": f"http://127.0.0.1:{etcd}",
            "listen-peer-urls": f"http://127.0.0.1:{peer}",
            "initial-advertise-peer-urls": f"http://127.0.0.1:{peer}",
            "initial-cluster": f"node0=http://127.0.0.1:{peer}",
        },
        "kube-apiserver": {"bind-address": "127.0.0.1"},
        "kube-controller-manager": {"bind-address": "127.0.0.1"},
        "kube-scheduler": {"bind-address": "127.0.0.1"},
        "kwok-controller": {"server-address": f"127.0.0.1:{kwok}"},
    }
    args = ["--etcd-port", str(etcd), "--controller-port", str(kwok)]
    for component, flags in overrides.items():
        for key, value in flags.items():
            args += ["--extra-args", f"{component}={key}={value}"]
    return args


@dataclass(frozen=True)
class GpuNode:
    """A simulated node (kwok) that advertises ``gpus`` NVIDIA GPUs as ``nvidia.com/gpu``."""

    name: str
    gpus: int = 8
    product: str = "NVIDIA-H200"
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    taints: Sequence[Mapping[str, str]] = ()
    cpu: str = "192"
    memory: str = "2Ti"
    boot_id: str = "boot-1"

    def manifest(self) -> dict[str, Any]:
        labels = {
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "node-role.kubernetes.io/gpu": "",
            "type": "kwok",
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.product": self.product,
            "nvidia.com/gpu.count": str(self.gpus),
            "nvidia.com/gpu.memory": "143771",
            **self.labels,
        }
        resources = {
            "cpu": self.cpu,
            "memory": self.memory,
            "pods": "110",
            "ephemeral-storage": "1Ti",
            GPU_RESOURCE: str(self.gpus),
        }
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.name,
                "labels": labels,
                "annotations": {KWOK_NODE_ANNOTATION: "fake", **self.annotations},
            },
            "spec": {"taints": [dict(t) for t in self.taints]},
            "status": {
                "capacity": resources,
                "allocatable": resources,
                "nodeInfo": {
                    "architecture": "amd64",
                    "operatingSystem": "linux",
                    "kubeletVersion": f"{KUBE_VERSION}-kwok",
                    # A real kubelet reports its boot; gpuval's gating re-validates on a new one.
                    "bootID": self.boot_id,
                },
            },
        }


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
    ) -> Cluster:
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
        argv = [
            str(binaries.kwokctl),
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
        argv.extend(_loopback_args())
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
        if nodes:
            cluster.add_nodes(nodes)
        return cluster

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [str(self.binaries.kubectl), "--kubeconfig", str(self.kubeconfig), *args],
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
            [str(self.binaries.kubectl), "--kubeconfig", str(kubeconfig), *args],
            input=input,
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )

    def delete_node(self, name: str) -> None:
        self.kubectl("delete", "node", name, "--wait=true")

    def stop(self) -> None:
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


def default_nodes(count: int, prefix: str = "gpu-node") -> list[GpuNode]:
    return [GpuNode(name=f"{prefix}-{i}") for i in range(count)]


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
    down = sub.add_parser("down", help="stop and delete a cluster")
    down.add_argument("--name", default="gpuval")
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            started = time.monotonic()
            binaries = build()
            for name, path in vars(binaries).items():
                print(f"{name:24} {path}")
            print(f"ready in {time.monotonic() - started:.1f}s")
        elif args.command == "up":
            nodes = [GpuNode(name=f"gpu-node-{i}", gpus=args.gpus) for i in range(args.nodes)]
            cluster = Cluster.start(args.name, nodes)
            print(f"export KUBECONFIG={cluster.kubeconfig}")
        elif args.command == "down":
            Cluster.attach(args.name).stop()
    except (BuildError, FileNotFoundError, TimeoutError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
