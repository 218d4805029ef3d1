"""`make lint`'s import contracts ([tool.importlinter] in pyproject.toml, run by lint-imports) hold
on the tree, and each kind fails on an import that breaks it: a copy of one package, with one
import added, is put ahead of the installed one and linted with the project's own configuration.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]
CONFIG = REPO_ROOT / "pyproject.toml"
SOURCES = {
    "gpuval_api": REPO_ROOT / "api" / "src" / "gpuval_api",
    "gpuval_operator": REPO_ROOT / "operator" / "src" / "gpuval_operator",
    "gpuval_agent": REPO_ROOT / "agent" / "src" / "gpuval_agent",
    "gpuval_devtools": REPO_ROOT / "devtools" / "src" / "gpuval_devtools",
}


def contracts() -> dict[str, str]:
    """Contract id -> name, as the configuration has them."""
    config = tomllib.loads(CONFIG.read_text())["tool"]["importlinter"]
    return {c["id"]: c["name"] for c in config["contracts"]}


def lint_imports(pythonpath: Path | None = None) -> subprocess.CompletedProcess[str]:
    found = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert found, "lint-imports is not installed: it comes with the dev dependency import-linter"
    env = {**os.environ, "COLUMNS": "200"}  # one contract, one line, however long its name
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    return subprocess.run(
        [found, "--config", str(CONFIG), "--no-cache", "--no-logo"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_every_contract_is_kept_on_the_tree() -> None:
    done = lint_imports()
    assert done.returncode == 0, done.stdout + done.stderr
    for name in contracts().values():
        assert f"{name} KEPT" in done.stdout
    assert f"Contracts: {len(contracts())} kept, 0 broken." in done.stdout


# (contract id, package copied, file added or appended to, its text)
BREAKS = [
    pytest.param(
        "operator-wings",
        "gpuval_operator",
        "run/upward.py",
        "from gpuval_operator.control.driver import RunDriver\n",
        id="a-run-module-imports-control",
    ),
    pytest.param(
        "operator-wings",
        "gpuval_operator",
        "newwing.py",
        '"""A wing no layer names."""\n',
        id="a-wing-left-out-of-the-order",
    ),
    pytest.param(
        "agent-layers",
        "gpuval_agent",
        "backends/upward.py",
        "from gpuval_agent.checks.nccl import sweep_sizes\n",
        id="a-backend-imports-a-check",
    ),
    pytest.param(
        "programs-apart",
        "gpuval_agent",
        "upward.py",
        "from gpuval_operator import names\n",
        id="the-agent-imports-the-operator",
    ),
    pytest.param(
        "api-ground",
        "gpuval_api",
        "upward.py",
        "import gpuval_credentials\n",
        id="api-imports-credentials",
    ),
    pytest.param(
        "no-circles",
        "gpuval_devtools",
        "nodeconfig.py",
        "\nif TYPE_CHECKING:\n    from gpuval_devtools.controlplane import Cluster  # noqa: F401\n",
        id="a-type-only-import-closes-a-circle",
    ),
]


@pytest.mark.parametrize(("contract", "package", "path", "text"), BREAKS)
def test_an_import_that_breaks_a_contract_fails_the_lint(
    tmp_path: Path, contract: str, package: str, path: str, text: str
) -> None:
    copy = tmp_path / package
    shutil.copytree(SOURCES[package], copy, ignore=shutil.ignore_patterns("__pycache__"))
    with (copy / path).open("a") as out:
        out.write(text)
    done = lint_imports(pythonpath=tmp_path)
    assert done.returncode != 0, done.stdout
    name = contracts()[contract]
    # An upward import also closes a circle, so more than this one contract may break.
    assert f"{name} BROKEN" in done.stdout
