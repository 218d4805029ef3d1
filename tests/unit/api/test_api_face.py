"""gpuval_api's face (gpuval_api/__init__.py): the names the other packages use most, exported
once, light to import, and imported from there by the operator, the agent, the kubectl plugin and
the report."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import gpuval_api
from gpuval_api import conditions, env, labels, reasons, verdicts

REPO_ROOT = Path(__file__).resolve().parents[3]
CONSUMERS = [
    REPO_ROOT / "operator" / "src",
    REPO_ROOT / "agent" / "src",
    REPO_ROOT / "kubectl-gpuval" / "src",
    REPO_ROOT / "report" / "src",
]
# Where each exported name is defined, and where it was also reachable before the face.
DEFINING = ("verdicts", "reasons", "conditions", "env", "labels", "result")


def test_each_exported_name_is_its_defining_modules_own() -> None:
    for name in gpuval_api.__all__:
        value = getattr(gpuval_api, name)
        homes = [m for m in (conditions, env, labels, reasons, verdicts) if hasattr(m, name)]
        if name == "keys":
            assert value.__name__ == "gpuval_api.keys"
            continue
        assert homes, f"gpuval_api exports {name!r}, which none of its modules defines"
        assert all(getattr(m, name) is value for m in homes), name


def test_the_face_pulls_in_no_typed_documents() -> None:
    # The face is enums and strings: importing it loads neither pydantic nor the result document.
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, gpuval_api; print(sorted(m for m in sys.modules"
            " if m.startswith(('pydantic', 'gpuval_api.result', 'gpuval_api.crd'))))",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert done.stdout.strip() == "[]", done.stdout


def test_the_other_packages_import_the_exported_names_from_the_face() -> None:
    exported = set(gpuval_api.__all__)
    found = []
    for root in CONSUMERS:
        for path in sorted(root.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.ImportFrom) or node.module is None:
                    continue
                if node.module.removeprefix("gpuval_api.") not in DEFINING:
                    continue
                for alias in node.names:
                    if alias.name in exported:
                        found.append(f"{path.relative_to(REPO_ROOT)}:{node.lineno} {alias.name}")
    assert not found, "import these from gpuval_api:\n" + "\n".join(found)
