"""Reading torch's CUDA from its version tag, so the driver check need not wait for its import."""

from __future__ import annotations

import pytest

from gpuval_agent.backends.cuda import cuda_from_local_tag


@pytest.mark.parametrize(
    ("version", "cuda"),
    [("2.11.0+cu130", "13.0"), ("2.4.1+cu121", "12.1"), ("2.6.0+cu118", "11.8"),
     ("2.5.0", None), ("2.5.0+cpu", None), ("2.5.0+rocm6.2", None)],
)  # fmt: skip
def test_cuda_version_comes_from_the_local_version_tag(version: str, cuda: str | None) -> None:
    assert cuda_from_local_tag(version) == cuda
