"""The control plane's binaries, built from Go modules or unpacked from Debian once and cached.

- kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, and the real node's kubelet and
  kube-proxy: compiled from the Go module in ``hack/controlplane`` whose mains call
  ``k8s.io/kubernetes/cmd/<component>/app``, stamped with the Kubernetes version so kwokctl can
  read it;
- kwok and kwokctl, helm: ``go install`` at pinned tags;
- etcd (>= 3.5.11, which kube-apiserver >= 1.31 needs): unpacked from Debian trixie's
  ``etcd-server`` package (bookworm's 3.4 is too old); an ``etcd`` already on PATH that is new
  enough is used instead;
- prometheus and promtool (the alert tests): unpacked from Debian trixie;
- the chart's tools (:func:`chart_tools`, built only when asked for): kubeconform, kube-score and
  helm-docs ``go install``ed at pinned tags, checkov synced from its own lock
  (``hack/checkov/uv.lock``: it pins ``packaging<24``, which the workspace's pytest cannot share).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gpuval_devtools.buildsteps import (
    DEBIAN_NEWER_SUITE,
    REPO_ROOT,
    BuildError,
    Log,
    cache_dir,
    debian_binary,
    go_env,
    parse_version,
    run_step,
    stamped,
    stderr_log,
    tree_digest,
    uv_command,
)

KUBE_VERSION = "v1.36.3"
KWOK_VERSION = "v0.8.0"
HELM_MODULE = "helm.sh/helm/v3"
HELM_VERSION = "v3.22.0"
ETCD_MIN_VERSION = (3, 5, 11)
KUBECONFORM_VERSION = "v0.8.0"
KUBE_SCORE_VERSION = "v1.20.0"
HELM_DOCS_VERSION = "v1.14.2"
CHECKOV_PROJECT = REPO_ROOT / "hack" / "checkov"

GO_MODULE_DIR = REPO_ROOT / "hack" / "controlplane"
KUBE_COMPONENTS = (
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
    "kubelet",
    "kube-proxy",
)


@dataclass(frozen=True)
class Binaries:
    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kubectl: Path
    kubelet: Path
    kube_proxy: Path
    kwok: Path
    kwokctl: Path
    helm: Path
    prometheus: Path
    promtool: Path


def etcd_version(binary: Path) -> tuple[int, ...]:
    out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, check=False)
    return parse_version(out.stdout)


def _ensure_etcd(*, log: Log) -> Path:
    on_path = shutil.which("etcd")
    if on_path and etcd_version(Path(on_path)) >= ETCD_MIN_VERSION:
        return Path(on_path)
    etcd = debian_binary("etcd-server", ["etcd"], log=log)["etcd"]
    version = etcd_version(etcd)
    if version < ETCD_MIN_VERSION:
        raise BuildError(
            f"etcd from Debian {DEBIAN_NEWER_SUITE} is {version}, kube-apiserver "
            f"{KUBE_VERSION} needs >= {ETCD_MIN_VERSION}"
        )
    return etcd


def kube_key() -> str:
    """The key of the Go module's state (go.mod, go.sum, the mains) and the Kubernetes version."""
    return tree_digest(
        [GO_MODULE_DIR / "go.mod", GO_MODULE_DIR / "go.sum", GO_MODULE_DIR / "cmd"], KUBE_VERSION
    )


def _ensure_kube(*, log: Log) -> dict[str, Path]:
    root = cache_dir()
    key = kube_key()
    # The key is in the directory name, not only in the stamp: worktrees on different states of
    # the module share this cache, and one directory per state lets them coexist instead of
    # rebuilding over each other.
    out = root / "bin" / f"kube-{KUBE_VERSION}-{key}"
    stamp = out / ".stamp"
    paths = {c: out / c for c in KUBE_COMPONENTS}
    if stamped(stamp, key) and all(p.is_file() for p in paths.values()):
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
    # Measured on 2 cores with empty Go module and build caches: 465 s for the six (the
    # docs/development.md has the whole first `make controlplane`).
    log(
        f"building {', '.join(KUBE_COMPONENTS)} from Go modules: the first build takes "
        "about 8 minutes on 2 cores, later ones are cached"
    )
    run_step(
        "build-kubernetes",
        ["go", "build", "-ldflags", ldflags, "-o", str(out) + "/", "./cmd/..."],
        cwd=GO_MODULE_DIR,
        env=go_env(root),
        log=log,
    )
    stamp.write_text(key)
    return paths


def go_install(
    step: str, target: str, names: Sequence[str], *, log: Log, flags: Sequence[str] = ()
) -> dict[str, Path]:
    """``go install [flags] target`` (``module/cmd/x@version ...``) into ``bin/<step>`` of the
    cache, once: the stamp holds the flags and targets, so a change of either rebuilds."""
    root = cache_dir()
    out = root / "bin" / step
    paths = {n: out / n for n in names}
    stamp = out / ".stamp"
    key = " ".join([*flags, target])
    if stamped(stamp, key) and all(p.is_file() for p in paths.values()):
        return paths
    out.mkdir(parents=True, exist_ok=True)
    env = go_env(root)
    env["GOBIN"] = str(out)
    run_step(f"install-{step}", ["go", "install", *flags, *target.split()], env=env, log=log)
    stamp.write_text(key)
    return paths


def build(*, log: Log = stderr_log) -> Binaries:
    """Builds or unpacks every binary once; later calls return the cached paths in milliseconds."""
    if shutil.which("go") is None:
        raise BuildError("build step 'go' failed: no `go` on PATH (Go >= 1.26 is needed)")
    etcd = _ensure_etcd(log=log)
    kube = _ensure_kube(log=log)
    kwok = go_install(
        f"kwok-{KWOK_VERSION}",
        f"sigs.k8s.io/kwok/cmd/kwok@{KWOK_VERSION} sigs.k8s.io/kwok/cmd/kwokctl@{KWOK_VERSION}",
        ["kwok", "kwokctl"],
        log=log,
    )
    helm = go_install(
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
        kubelet=kube["kubelet"],
        kube_proxy=kube["kube-proxy"],
        kwok=kwok["kwok"],
        kwokctl=kwok["kwokctl"],
        helm=helm["helm"],
        prometheus=prometheus,
        promtool=promtool,
    )


@dataclass(frozen=True)
class ChartTools:
    """What `make chart-lint` and the chart README's generation run."""

    kubeconform: Path
    kube_score: Path
    helm_docs: Path
    checkov: Path


def _ensure_checkov(*, log: Log) -> Path:
    """checkov in a virtual environment under the cache, one per state of its lock, so worktrees
    share it; synced with the lock's hashes (``uv sync --frozen``)."""
    key = tree_digest([CHECKOV_PROJECT / "pyproject.toml", CHECKOV_PROJECT / "uv.lock"], "checkov")
    venv = cache_dir() / "venvs" / f"checkov-{key}"
    checkov = venv / "bin" / "checkov"
    stamp = venv / ".stamp"
    if stamped(stamp, key) and checkov.is_file():
        return checkov
    env = {**os.environ, "UV_PROJECT_ENVIRONMENT": str(venv)}
    argv = [*uv_command(), "sync", "--frozen", "--project", str(CHECKOV_PROJECT)]
    run_step("sync-checkov", argv, env=env, log=log)
    stamp.write_text(key)
    return checkov


def chart_tools(*, log: Log = stderr_log) -> ChartTools:
    """Builds or syncs the chart's tools once; later calls return the cached paths."""
    if shutil.which("go") is None:
        raise BuildError("build step 'go' failed: no `go` on PATH (Go >= 1.26 is needed)")
    kubeconform = go_install(
        f"kubeconform-{KUBECONFORM_VERSION}",
        f"github.com/yannh/kubeconform/cmd/kubeconform@{KUBECONFORM_VERSION}",
        ["kubeconform"],
        log=log,
    )
    kube_score = go_install(
        f"kube-score-{KUBE_SCORE_VERSION}",
        f"github.com/zegl/kube-score/cmd/kube-score@{KUBE_SCORE_VERSION}",
        ["kube-score"],
        log=log,
    )
    helm_docs = go_install(
        f"helm-docs-{HELM_DOCS_VERSION}",
        f"github.com/norwoodj/helm-docs/cmd/helm-docs@{HELM_DOCS_VERSION}",
        ["helm-docs"],
        log=log,
    )
    return ChartTools(
        kubeconform=kubeconform["kubeconform"],
        kube_score=kube_score["kube-score"],
        helm_docs=helm_docs["helm-docs"],
        checkov=_ensure_checkov(log=log),
    )
