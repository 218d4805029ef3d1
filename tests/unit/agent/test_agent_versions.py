"""Reading torch's versions from its files, so the driver check need not wait for its import."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gpuval_agent.backends.cuda import cuda_from_local_tag, torch_versions_from_files


@pytest.mark.parametrize(
    ("version", "cuda"),
    [
        ("2.11.0+cu130", "13.0"),
        ("2.4.1+cu121", "12.1"),
        ("2.6.0+cu118", "11.8"),
        ("2.5.0", None),
        ("2.5.0+cpu", None),
        ("2.5.0+rocm6.2", None),
    ],
)
def test_cuda_version_comes_from_the_local_version_tag(version: str, cuda: str | None) -> None:
    assert cuda_from_local_tag(version) == cuda


def _fake_torch(root: Path, version_py: str) -> None:
    package = root / "torch"
    package.mkdir()
    # Importing it would fail the test: the versions must be read, not imported.
    (package / "__init__.py").write_text("raise RuntimeError('torch was imported')\n")
    (package / "version.py").write_text(version_py)


def test_versions_come_from_version_py_without_importing_torch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What PyPI's CUDA wheel ships: the metadata says '2.11.0', torch/version.py the build.
    _fake_torch(
        tmp_path,
        "from typing import Optional\n__all__ = ['__version__']\n"
        "__version__ = '2.11.0+cu130'\ndebug = False\ncuda: Optional[str] = '13.0'\n"
        "git_version = 'abc'\nhip: Optional[str] = None\n",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert torch_versions_from_files() == ("2.11.0+cu130", "13.0")
    assert "torch" not in sys.modules


def test_a_cpu_build_has_a_version_and_no_cuda(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_torch(tmp_path, "__version__ = '2.11.0+cpu'\ncuda = None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert torch_versions_from_files() == ("2.11.0+cpu", None)
