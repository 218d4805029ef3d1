"""Reading the real control plane in tests: poll until something holds, get an object as JSON,
run `kubectl gpuval` as a person would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpuval_devtools.controlplane import Cluster


def wait_for(
    what: str, predicate: Callable[[], Any], timeout: float = 60, interval: float = 0.25
) -> Any:
    """Polls ``predicate`` until it returns a truthy value; fails naming ``what`` on timeout."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout:.0f}s waiting for {what} (last value: {last!r})")


def get_json(cluster: Cluster, *args: str) -> Any:
    proc = cluster.kubectl("get", *args, "-o", "json", check=False)
    if proc.returncode != 0:
        return None
    return json.loads(proc.stdout)


VENV_BIN = Path(sys.executable).parent


def kubectl_gpuval(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    """`kubectl gpuval ARGS`: kubectl finds the plugin (kubectl-gpuval) on PATH and hands it
    KUBECONFIG through the environment, as it does for every plugin."""
    env = {
        **os.environ,
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
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
