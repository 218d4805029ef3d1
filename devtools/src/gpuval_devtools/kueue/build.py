"""Kueue built from its Go module, pinned, and its manifests rendered from the module's own
``config/`` by kustomize (also built from its Go module); both cached under ``$GPUVAL_CACHE``.

- the manager: ``go install sigs.k8s.io/kueue/cmd/kueue@KUEUE_VERSION`` (the module has no
  ``replace``, so its go.mod and go.sum pin every dependency), stamped with its version as Kueue's
  Makefile does;
- the manifests: ``kustomize build config/default`` over the module as the Go module proxy serves
  it (the zip holds ``config/``), the same kustomization Kueue's release manifests come from.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from gpuval_devtools.binaries import go_install
from gpuval_devtools.buildsteps import (
    BuildError,
    Log,
    cache_dir,
    go_env,
    run_step,
    stamped,
    stderr_log,
)

KUEUE_MODULE = "sigs.k8s.io/kueue"
KUEUE_VERSION = "v0.17.0"
# The newest kustomize whose go.mod this machine's Go (1.26) builds: v5.8.3 asks for Go 1.27.
KUSTOMIZE_MODULE = "sigs.k8s.io/kustomize/kustomize/v5"
KUSTOMIZE_VERSION = "v5.8.1"


@dataclass(frozen=True)
class KueueBuild:
    """The manager binary and the manifests of one Kueue version."""

    version: str
    manager: Path
    manifests: Path


def _module_dir(*, log: Log) -> Path:
    """Where the Go module cache holds Kueue's module (downloaded, checksum-verified)."""
    env = go_env(cache_dir())
    argv = ["go", "mod", "download", "-json", f"{KUEUE_MODULE}@{KUEUE_VERSION}"]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise BuildError(f"build step 'download-kueue' failed: {' '.join(argv)}\n{proc.stdout}")
    found = Path(json.loads(proc.stdout)["Dir"])
    log(f"kueue module: {found}")
    return found


def _manifests(kustomize: Path, *, log: Log) -> Path:
    out = cache_dir() / "kueue" / KUEUE_VERSION
    manifests = out / "manifests.yaml"
    stamp = out / ".stamp"
    key = f"{KUEUE_MODULE}@{KUEUE_VERSION} {KUSTOMIZE_MODULE}@{KUSTOMIZE_VERSION}"
    if stamped(stamp, key) and manifests.is_file():
        return manifests
    out.mkdir(parents=True, exist_ok=True)
    config = _module_dir(log=log) / "config" / "default"
    rendered = out / "manifests.yaml.partial"
    run_step(
        "kustomize-kueue",
        [str(kustomize), "build", str(config), "--output", str(rendered)],
        log=log,
    )
    rendered.replace(manifests)
    stamp.write_text(key)
    return manifests


def build(*, log: Log = stderr_log) -> KueueBuild:
    """Builds Kueue's manager and renders its manifests once; later calls take milliseconds."""
    flags = ["-ldflags", f"-s -w -X {KUEUE_MODULE}/pkg/version.GitVersion={KUEUE_VERSION}"]
    manager = go_install(
        f"kueue-{KUEUE_VERSION}",
        f"{KUEUE_MODULE}/cmd/kueue@{KUEUE_VERSION}",
        ["kueue"],
        log=log,
        flags=flags,
    )["kueue"]
    kustomize = go_install(
        f"kustomize-{KUSTOMIZE_VERSION}",
        f"{KUSTOMIZE_MODULE}@{KUSTOMIZE_VERSION}",
        ["kustomize"],
        log=log,
    )["kustomize"]
    return KueueBuild(
        version=KUEUE_VERSION, manager=manager, manifests=_manifests(kustomize, log=log)
    )


def main() -> int:
    """Builds (or finds cached) and prints the paths: ``python -m gpuval_devtools.kueue``."""
    started = time.monotonic()
    try:
        built = build()
    except BuildError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"kueue      {built.version} {built.manager}")
    print(f"manifests  {built.manifests}")
    print(f"ready in {time.monotonic() - started:.1f}s")
    return 0
