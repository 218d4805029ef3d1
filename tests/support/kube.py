"""Reading the real control plane in tests: poll until something holds, get an object as JSON."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
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
