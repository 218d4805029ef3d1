"""Medik8s' NodeHealthCheck controller beside a local control plane: a real repair engine for the
tests of spec.remediation's mode Condition (docs/operator/remediation.md, "Remediation").

The Go module proxy does not serve github.com/medik8s/node-healthcheck-operator (403), but its
repository vendors every module it needs, so a checkout of it builds with `go build -mod=vendor`
and no network. Where the checkout comes from: ``GPUVAL_NHC_SOURCE`` (a source tree, or a git
directory whose commit ``PINNED`` is checked out), else ``<cache>/nhc/src``; with neither,
:func:`build` raises :class:`NotAvailableError` and the test that needs it is skipped, saying so.
The binary is cached per commit under ``<cache>/nhc/bin``.

The controller runs as its own process with the cluster's admin kubeconfig (it has no pod here),
without leader election, metrics or probes; its webhook server needs a certificate to start, so it
gets a self-signed one (no webhook is registered with the API server). It watches NodeHealthCheck
objects and nodes, and creates the remediation objects of the template a NodeHealthCheck names
(SelfNodeRemediation: the kinds come from tests/fixtures/remediation, their published CRDs) when a
node's conditions match its `unhealthyConditions`, deleting them once the node is healthy again.
Self Node Remediation itself needs an agent on the node, which kwok nodes do not run: the test
plays its reboot.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from gpuval_devtools.buildsteps import (
    BuildError,
    Log,
    cache_dir,
    go_env,
    run_step,
    stderr_log,
    stop_process,
)

SOURCE_ENV = "GPUVAL_NHC_SOURCE"
# The node-healthcheck-operator commit built and tested here (main, July 2026).
PINNED = "dd44432997c6edb4b577043919c4701c16524a73"
# The namespace it runs "in" (DEPLOYMENT_NAMESPACE): where it keeps its RBAC aggregation and
# looks for nothing else; the remediation templates may live elsewhere.
NAMESPACE = "medik8s"


class NotAvailableError(BuildError):
    """No checkout of the node-healthcheck-operator to build from."""


def _checkout(log: Log) -> Path:
    """A source tree at PINNED: the given tree, or one checked out of the given git directory."""
    given = os.environ.get(SOURCE_ENV)
    root = Path(given).expanduser() if given else cache_dir() / "nhc" / "src"
    if (root / "go.mod").is_file() and (root / "vendor").is_dir():
        return root
    if (root / "HEAD").is_file() or (root / ".git").exists():
        tree = cache_dir() / "nhc" / f"tree-{PINNED[:12]}"
        if not (tree / "go.mod").is_file():
            tree.mkdir(parents=True, exist_ok=True)
            log(f"nhc: checking out {PINNED[:12]} from {root}")
            archive = subprocess.run(
                ["git", f"--git-dir={_git_dir(root)}", "archive", PINNED],
                capture_output=True,
                check=False,
            )
            if archive.returncode != 0:
                raise BuildError(f"nhc: git archive {PINNED} failed: {archive.stderr.decode()}")
            subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
        return tree
    raise NotAvailableError(
        f"no node-healthcheck-operator checkout at {root}: set {SOURCE_ENV} to a checkout of "
        f"github.com/medik8s/node-healthcheck-operator (commit {PINNED[:12]}); the Go module "
        "proxy does not serve it"
    )


def _git_dir(root: Path) -> Path:
    return root / ".git" if (root / ".git").exists() else root


def build(*, log: Log = stderr_log) -> Path:
    """The controller's binary, built once per commit; later calls take milliseconds."""
    binary = cache_dir() / "nhc" / "bin" / f"nhc-{PINNED[:12]}"
    if binary.is_file():
        return binary
    source = _checkout(log)
    binary.parent.mkdir(parents=True, exist_ok=True)
    env = go_env(cache_dir())
    env["GOFLAGS"] = "-mod=vendor -buildvcs=false -trimpath"
    env["GOPROXY"] = "off"
    partial = binary.with_suffix(".partial")
    run_step(
        f"nhc-{PINNED[:12]}",
        ["go", "build", "-o", str(partial), "./cmd/"],
        log=log,
        cwd=source,
        env=env,
    )
    partial.replace(binary)
    return binary


def _self_signed(directory: Path) -> None:
    """The certificate controller-runtime's webhook server reads from its default directory."""
    certs = directory / "k8s-webhook-server" / "serving-certs"
    if (certs / "tls.crt").is_file():
        return
    certs.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "30",
            "-subj",
            "/CN=localhost",
            "-keyout",
            str(certs / "tls.key"),
            "-out",
            str(certs / "tls.crt"),
        ],
        capture_output=True,
        check=True,
    )


@dataclass
class NodeHealthCheckController:
    """A running controller; :meth:`stop` ends it."""

    process: subprocess.Popen[bytes]
    log_path: Path

    @classmethod
    def start(cls, kubeconfig: Path, *, log: Log = stderr_log) -> NodeHealthCheckController:
        binary = build(log=log)
        run = cache_dir() / "nhc" / "run"
        _self_signed(run)
        env = {
            **os.environ,
            "KUBECONFIG": str(kubeconfig),
            "DEPLOYMENT_NAMESPACE": NAMESPACE,
            "TMPDIR": str(run),
        }
        log_path = run / "nhc.log"
        with log_path.open("wb") as out:
            process = subprocess.Popen(
                [
                    str(binary),
                    "--leader-elect=false",
                    "--metrics-bind-address=0",
                    "--health-probe-bind-address=0",
                ],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        log(f"nhc: started (log: {log_path})")
        return cls(process, log_path)

    def stop(self) -> None:
        stop_process(self.process)


def main() -> int:
    """Builds (or finds cached) and prints the binary: ``python -m gpuval_devtools.nhc``."""
    try:
        print(build())
    except BuildError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
