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
from typing import Any

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


PACKAGE_SOURCES = {
    "gpuval_api": REPO_ROOT / "api" / "src" / "gpuval_api",
    "gpuval_credentials": REPO_ROOT / "credentials" / "src" / "gpuval_credentials",
    "gpuval_operator": REPO_ROOT / "operator" / "src" / "gpuval_operator",
    "gpuval_agent": REPO_ROOT / "agent" / "src" / "gpuval_agent",
    "gpuval_devtools": REPO_ROOT / "devtools" / "src" / "gpuval_devtools",
    "gpuval_report": REPO_ROOT / "report" / "src" / "gpuval_report",
    "gpuval_kubectl": REPO_ROOT / "kubectl-gpuval" / "src" / "gpuval_kubectl",
}


def layered(config: dict[str, Any], package: str) -> tuple[bool, set[str]]:
    """Whether the package's layers contract is exhaustive, and the modules its layers name."""
    found = [
        c for c in config["contracts"] if c["type"] == "layers" and c.get("containers") == [package]
    ]
    assert len(found) == 1, f"package {package!r} has {len(found)} layers contracts, not one"
    names = {
        name.strip().strip("()")
        for layer in found[0]["layers"]
        for name in layer.replace("|", ":").split(":")
    }
    return bool(found[0].get("exhaustive")), names


def modules_of(source: Path) -> set[str]:
    """A package's own modules and subpackages, as a layer names them."""
    files = {p.stem for p in source.glob("*.py") if p.stem not in {"__init__", "__main__"}}
    folders = {p.name for p in source.iterdir() if (p / "__init__.py").is_file()}
    return files | folders


@pytest.mark.parametrize("package", sorted(PACKAGE_SOURCES))
def test_every_module_of_a_package_stands_in_a_layer(package: str) -> None:
    config = tomllib.loads(CONFIG.read_text())["tool"]["importlinter"]
    assert package in config["root_packages"]
    exhaustive, named = layered(config, package)
    assert exhaustive, f"the layers contract of {package!r} is not exhaustive"
    modules = modules_of(PACKAGE_SOURCES[package])
    assert not modules - named, f"modules of {package!r} in no layer: {sorted(modules - named)}"
    assert not named - modules, f"layers of {package!r} name no module: {sorted(named - modules)}"
