"""The operator image's build stage, replayed without a Docker engine: its COPY instructions lay out
a context exactly as the Dockerfile and its .dockerignore allow, its `uv sync` RUNs run with its
ENV (the environment path moved into a temporary directory), and the result must be a virtualenv
that runs the operator and holds no GPU stack. A member manifest the Dockerfile forgot to copy, a
path the .dockerignore hides, or a sync that no longer resolves from the lock fails here.

Slow-ish (it installs the operator's locked dependencies from uv's cache or PyPI), hence here with
the integration tests. The agent's image is not replayed: its sync brings torch, several GB.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from gpuval_devtools import images
from gpuval_devtools.imagespecs import OPERATOR as OPERATOR_IMAGE
from tests.unit.chart.test_chart_images import OPERATOR, REPO_ROOT, parse


def _allowed_by_dockerignore(path: str, ignore: Path) -> bool:
    """Docker's rule: the last matching pattern wins; `!` re-includes."""
    allowed = True
    for raw in ignore.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = line[1:] if negate else line
        if fnmatch.fnmatch(path, pattern) or path.startswith(pattern.rstrip("/") + "/"):
            allowed = negate
    return allowed


def _uv() -> str:
    """The uv running this test session (`uv run` exports its own path as $UV), else one on
    PATH."""
    found = os.environ.get("UV") or shutil.which("uv")
    assert found, "no uv: run the tests through `python3 -m uv run` (make test does)"
    return found


def _replay(argv: list[str], context: Path, env: dict[str, str], venv: Path) -> int:
    """One command of a sync RUN: `uv sync ...` (1 is returned) or `rm -r` of a path in the
    environment (what the image leaves out)."""
    if argv[:2] == ["rm", "-r"]:
        shutil.rmtree(argv[2].replace("/opt/gpuval", str(venv), 1))
        return 0
    proc = subprocess.run(
        [_uv(), *argv[argv.index("sync") :]],
        cwd=context,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert proc.returncode == 0, f"RUN {shlex.join(argv)}\n{proc.stderr}"
    return 1


@pytest.fixture(scope="module")
def build_stage_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The virtualenv the operator Dockerfile's build stage makes, made here."""
    tmp_path = tmp_path_factory.mktemp("build-stage")
    build = parse(OPERATOR)[0]
    ignore = OPERATOR.with_name("Dockerfile.dockerignore")
    context = tmp_path / "src"
    context.mkdir()
    venv = tmp_path / "venv"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UV_", "VIRTUAL_ENV"))}
    synced = 0
    for keyword, args in build.instructions:
        if keyword == "ENV":
            for assignment in shlex.split(args):
                key, _, value = assignment.partition("=")
                env[key] = str(venv) if key == "UV_PROJECT_ENVIRONMENT" else value
        elif keyword == "COPY":
            *sources, dest = args.split()
            for source in sources:
                assert _allowed_by_dockerignore(source, ignore), (
                    f"COPY {source}: hidden by {ignore.relative_to(REPO_ROOT)}"
                )
                target = context / (dest if dest not in ("./", ".") else source)
                origin = REPO_ROOT / source
                target.parent.mkdir(parents=True, exist_ok=True)
                if origin.is_dir():
                    shutil.copytree(origin, target, ignore=shutil.ignore_patterns("__pycache__"))
                else:
                    shutil.copy2(origin, target)
        elif keyword == "RUN" and "uv sync" in args:
            for command in args.split("&&"):
                synced += _replay(shlex.split(command), context, env, venv)
    assert synced == 2, "a dependency layer and the workspace layer"
    return venv


def test_operator_build_stage_installs_a_runnable_operator_without_the_gpu_stack(
    build_stage_venv: Path,
) -> None:
    venv = build_stage_venv
    assert (venv / "bin" / "gpuval-operator").is_file()
    probe = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import importlib.util, gpuval_operator.main, gpuval_operator;"
            "print(gpuval_operator.__file__);"
            "print(importlib.util.find_spec('torch') is None);"
            "print(importlib.util.find_spec('gpuval_kubectl') is None);"
            "import kubernetes.config, pathlib;"
            "print(not (pathlib.Path(kubernetes.config.__file__).parents[1] / 'aio').exists())",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert probe.returncode == 0, probe.stderr
    module_file, no_torch, no_plugin, no_asyncio_client = probe.stdout.split()
    # --no-editable: the code is inside the venv, not a link back to the build context.
    assert module_file.startswith(str(venv)), module_file
    assert no_torch == "True"
    # kubectl gpuval is a person's plugin, its own package: not in the operator's image.
    assert no_plugin == "True" and not (venv / "bin" / "kubectl-gpuval").exists()
    # The kubernetes package for credentials, without its asyncio client (imagespecs.unused).
    assert no_asyncio_client == "True"


def test_the_daemonless_operator_image_holds_the_packages_the_dockerfile_installs(
    build_stage_venv: Path, built_images: list[images.BuiltImage]
) -> None:
    """Both build paths install the same Python distributions at the same versions."""
    proc = subprocess.run(
        [
            str(build_stage_venv / "bin" / "python"),
            "-c",
            "import importlib.metadata as m, json;"
            "print(json.dumps(sorted([d.metadata['Name'], d.version] for d in m.distributions())))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    dockerfile = {_normal(name): version for name, version in json.loads(proc.stdout)}
    (operator,) = [i for i in built_images if i.name == OPERATOR_IMAGE.name]
    listing = json.loads(operator.packages.read_text())
    daemonless = {_normal(p["name"]): p["version"] for p in listing["python"]}
    assert daemonless == dockerfile
    assert "kopf" in daemonless and "torch" not in daemonless
    assert "kubectl-gpuval" not in daemonless


def _normal(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def test_building_the_operator_image_again_gives_the_same_digest(
    built_images: list[images.BuiltImage], tmp_path: Path
) -> None:
    """Reproducible: a second build from scratch (no cache) is byte for byte the first."""
    (first,) = [i for i in built_images if i.name == OPERATOR_IMAGE.name]
    again = images.build_image(OPERATOR_IMAGE, tmp_path, log=lambda _message: None)
    earlier = json.loads(first.packages.read_text())
    now = json.loads(again.packages.read_text())
    if now["debian"] != earlier["debian"]:
        pytest.skip("Debian's mirror changed between the two builds: a new input, a new digest")
    assert now["layers"] == earlier["layers"]
    assert again.digest == first.digest
