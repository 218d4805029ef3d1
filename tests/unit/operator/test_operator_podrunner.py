"""The pod runner's kubelet duties that need no cluster: env and terminal status; the examples."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from gpuval_api.crd import GpuValidationSpec
from gpuval_devtools.podrunner import (
    agent_argv,
    container_env,
    exit_code,
    terminal_status,
)
from gpuval_operator import planning
from gpuval_operator.config import OperatorConfig
from gpuval_operator.spec import parse_spec

EXAMPLES = sorted((Path(__file__).resolve().parents[3] / "examples").glob("*.yaml"))


def agent_pod() -> dict[str, object]:
    pod = planning.build_pod(
        validation="fleet",
        uid="u",
        run="1-abcd",
        node="gpu-node-0",
        gpus=8,
        spec=GpuValidationSpec(),
        config=OperatorConfig(),
    )
    pod["spec"]["nodeName"] = "gpu-node-0"
    return pod


def test_env_resolves_the_node_name_field_ref_like_a_kubelet() -> None:
    pod = agent_pod()
    env = container_env(pod, pod["spec"]["containers"][0])  # type: ignore[index]
    assert env["GPUVAL_NODE_NAME"] == "gpu-node-0"
    assert env["GPUVAL_REPORT_NAME"] == "fleet-1-abcd-gpu-node-0"
    assert env["GPUVAL_EXPECTED_GPUS"] == "8"


def test_an_unsupported_env_source_is_refused_by_name() -> None:
    container = {"env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}
    with pytest.raises(ValueError, match="env X"):
        container_env({"metadata": {}}, container)


def test_the_agent_command_resolves_to_this_environments_script() -> None:
    argv = agent_argv({"command": ["gpuval-agent", "cluster"]})
    assert argv == [str(Path(sys.executable).parent / "gpuval-agent"), "cluster"]


@pytest.mark.parametrize(
    ("code", "phase", "reason"), [(0, "Succeeded", "Completed"), (1, "Failed", "Error")]
)
def test_exit_code_decides_the_phase(code: int, phase: str, reason: str) -> None:
    status = terminal_status(code, "2026-01-01T00:00:00Z", "agent", "img")
    terminated = status["containerStatuses"][0]["state"]["terminated"]
    assert status["phase"] == phase
    assert (terminated["exitCode"], terminated["reason"]) == (code, reason)


@pytest.mark.parametrize(("returncode", "code"), [(0, 0), (2, 2), (-9, 137), (-15, 143)])
def test_a_death_by_signal_is_reported_as_a_kubelet_does(returncode: int, code: int) -> None:
    assert exit_code(returncode) == code


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_every_example_is_a_valid_gpuvalidation(path: Path) -> None:
    doc = yaml.safe_load(path.read_text())
    assert doc["kind"] == "GpuValidation"
    spec, errors = parse_spec(doc["spec"])
    assert errors == [] and spec is not None
