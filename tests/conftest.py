"""Fixtures shared by every tier.

Tests marked ``cluster`` run against a real control plane (see gpuval_devtools.controlplane);
tests marked ``gpu`` need a real NVIDIA GPU and are skipped where there is none.
"""

from __future__ import annotations

import itertools
import os
import shutil
import uuid
from collections.abc import Callable

import pytest


def _have_gpu() -> bool:
    if os.environ.get("GPUVAL_FORCE_GPU_TESTS") == "1":
        return True
    return shutil.which("nvidia-smi") is not None


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--real-node",
        action="store_true",
        help="run the tests that need one real node in the test cluster (a kubelet, containerd "
        "and gpuval's images built here; needs root): `make test` passes it",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _have_gpu():
        return
    skip_gpu = pytest.mark.skip(reason="no NVIDIA GPU on this machine (nvidia-smi not found)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


_SESSION_TAG = uuid.uuid4().hex[:5]
_COUNTER = itertools.count()


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """A factory of DNS-1123 names unique to this test, so tests sharing a cluster never collide."""

    def make(prefix: str = "t") -> str:
        return f"{prefix}-{_SESSION_TAG}-{next(_COUNTER)}"[:63].rstrip("-")

    return make
