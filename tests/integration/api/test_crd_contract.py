"""The CRDs on the real API server: the defaults it fills in are the agent's own, input is bounded,
and a report's verdict and reason come from the catalogue (issue 9, B1, B2, B4)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from gpuval_api.checks import CheckName, ChecksConfig, Profile, parse_checks
from gpuval_api.env import AgentEnv
from gpuval_devtools.controlplane import Cluster
from gpuval_operator import planning
from gpuval_operator.config import OperatorConfig
from gpuval_operator.spec import parse_spec

pytestmark = pytest.mark.usefixtures("install_crds")


def _dry_run(cluster: Cluster, obj: dict[str, Any]) -> Any:
    proc = cluster.kubectl(
        "create",
        "--dry-run=server",
        "-o",
        "json",
        "-f",
        "-",
        input=yaml.safe_dump(obj),
        check=False,
    )
    return json.loads(proc.stdout) if proc.returncode == 0 else proc.stderr


def _validation(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "gpuval.dev/v1alpha1",
        "kind": "GpuValidation",
        "metadata": {"name": name},
        "spec": spec,
    }


def test_the_api_servers_defaults_reach_the_agent_as_the_agents_own_defaults(
    cluster: Cluster, unique_name: Callable[[str], str]
) -> None:
    stored = _dry_run(cluster, _validation(unique_name("defaults"), {}))
    assert isinstance(stored, dict), stored
    # What the API server stored is what `gpuval-agent run` applies with no flags...
    assert parse_checks(json.dumps(stored["spec"]["checks"])) == ChecksConfig()
    # ...and what the operator hands the agent pod says the same (the 0.8 thresholds included).
    spec, errors = parse_spec(stored["spec"])
    assert spec is not None and errors == []
    pod = planning.build_pod(
        validation="v", uid="u", run="1-a", node="n", gpus=8, spec=spec, config=OperatorConfig()
    )
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    handed = parse_checks(env[AgentEnv.CHECKS])
    # Resolved: the profile's word written out in each section's `enabled`.
    assert handed == ChecksConfig().resolved()
    assert handed.burn.min_tflops.fraction_of_expected == 0.8


def _told(stored: dict[str, Any]) -> ChecksConfig:
    """The checks the operator hands the agent pod for a stored spec (GPUVAL_CHECKS)."""
    spec, errors = parse_spec(stored["spec"])
    assert spec is not None and errors == [], errors
    pod = planning.build_pod(
        validation="v", uid="u", run="1-a", node="n", gpus=8, spec=spec, config=OperatorConfig()
    )
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    return parse_checks(env[AgentEnv.CHECKS])


@pytest.mark.parametrize("profile", list(Profile))
def test_each_profile_in_a_stored_spec_runs_what_it_runs_on_the_command_line(
    cluster: Cluster, unique_name: Callable[[str], str], profile: Profile
) -> None:
    # Issue 42: the API server stored `enabled: false` for the memory test and the training
    # step, which then won over `profile: full`; `gpuval-agent run --profile full` ran them.
    # A profiled section given without `enabled` (memory.passes) still follows the profile.
    given = {"burn": {"durationSeconds": 5}, "memory": {"passes": 2}}
    spec = {"checks": {"profile": profile.value, **given}}
    stored = _dry_run(cluster, _validation(unique_name(f"profile-{profile}"), spec))
    assert isinstance(stored, dict), stored
    assert {"enabled"}.isdisjoint(stored["spec"]["checks"]["memory"]), stored["spec"]["checks"]
    assert {"enabled"}.isdisjoint(stored["spec"]["checks"]["train"]), stored["spec"]["checks"]
    cli = ChecksConfig.model_validate({"profile": profile.value, **given})
    assert parse_checks(json.dumps(stored["spec"]["checks"])).enabled() == cli.enabled()
    assert _told(stored).enabled() == cli.enabled()
    if profile is Profile.FULL:
        assert {CheckName.MEMORY, CheckName.TRAIN} <= set(cli.enabled())


def test_an_enabled_false_beside_the_full_profile_wins_in_the_stored_spec(
    cluster: Cluster, unique_name: Callable[[str], str]
) -> None:
    spec = {"checks": {"profile": "full", "train": {"enabled": False}}}
    stored = _dry_run(cluster, _validation(unique_name("profile-clash"), spec))
    assert isinstance(stored, dict), stored
    told = _told(stored)
    assert CheckName.MEMORY in told.enabled() and CheckName.TRAIN not in told.enabled()
    assert parse_checks(json.dumps(stored["spec"]["checks"])).overridden() == [CheckName.TRAIN]


def test_a_partly_given_threshold_section_keeps_the_defaults_of_the_rest(
    cluster: Cluster, unique_name: Callable[[str], str]
) -> None:
    spec = {"checks": {"burn": {"durationSeconds": 5}, "nccl": {"minBusbwGBps": {"absolute": 300}}}}
    stored = _dry_run(cluster, _validation(unique_name("partial"), spec))
    assert isinstance(stored, dict), stored
    checks = parse_checks(json.dumps(stored["spec"]["checks"]))
    assert checks.burn.duration_seconds == 5
    assert checks.burn.min_tflops.fraction_of_expected == 0.8
    assert checks.nccl.min_busbw_gbps.absolute == 300
    assert checks.nccl.min_busbw_gbps.fraction_of_expected is None


@pytest.mark.parametrize(
    ("spec", "field", "words"),
    [
        ({"expected": {"driverVersion": "5" * 10240}}, "spec.expected.driverVersion", "64"),
        (
            {"checks": {"bandwidth": {"minH2dGBps": {"absolute": 1e30}}}},
            "spec.checks.bandwidth.minH2dGBps.absolute",
            "100000",
        ),
        ({"agent": {"env": [{"name": "X", "value": "v"}] * 65}}, "spec.agent.env", "64"),
        ({"maxConcurrent": 1_000_000}, "spec.maxConcurrent", "100000"),
    ],
    ids=["10 KiB driverVersion", "1e30 GB/s threshold", "65 env vars", "a million nodes"],
)
def test_unbounded_input_is_refused_naming_the_field(
    cluster: Cluster,
    unique_name: Callable[[str], str],
    spec: dict[str, Any],
    field: str,
    words: str,
) -> None:
    answer = _dry_run(cluster, _validation(unique_name("big"), spec))
    assert isinstance(answer, str), "the API server accepted it"
    assert field in answer and words in answer, answer


@pytest.mark.parametrize(
    ("status", "field"),
    [
        ({"phase": "Completed", "verdict": "Maybe"}, "status.verdict"),
        ({"phase": "Completed", "verdict": "Failed", "reason": "Gremlins"}, "status.reason"),
        ({"phase": "Done"}, "status.phase"),
    ],
    ids=["verdict Maybe", "unknown reason", "unknown phase"],
)
def test_a_report_status_outside_the_catalogue_is_refused(
    cluster: Cluster, unique_name: Callable[[str], str], status: dict[str, Any], field: str
) -> None:
    name = unique_name("report")
    report = {
        "apiVersion": "gpuval.dev/v1alpha1",
        "kind": "GpuNodeReport",
        "metadata": {"name": name},
        "spec": {"validation": "v", "run": "1-a", "node": "node-a"},
    }
    cluster.kubectl("create", "-f", "-", input=yaml.safe_dump(report))
    try:
        proc = cluster.kubectl(
            "patch",
            "gpunodereport",
            name,
            "--subresource=status",
            "--type=merge",
            "-p",
            json.dumps({"status": status}),
            check=False,
        )
        assert proc.returncode != 0, "the API server accepted it"
        assert field in proc.stderr and "Unsupported value" in proc.stderr, proc.stderr
    finally:
        cluster.kubectl("delete", "gpunodereport", name, "--wait=false", check=False)


def test_kubectl_get_by_short_name_finds_one_object_and_the_category_lists_both_kinds(
    cluster: Cluster, unique_name: Callable[[str], str]
) -> None:
    name = unique_name("shortname")
    report = unique_name("shortname-report")
    cluster.kubectl("create", "-f", "-", input=yaml.safe_dump(_validation(name, {})))
    cluster.kubectl(
        "create",
        "-f",
        "-",
        input=yaml.safe_dump(
            {
                "apiVersion": "gpuval.dev/v1alpha1",
                "kind": "GpuNodeReport",
                "metadata": {"name": report},
                "spec": {"validation": name, "run": "1-a", "node": "node-a"},
            }
        ),
    )
    try:
        one = cluster.kubectl("get", "gpuval", name, "-o", "name", check=False)
        assert one.returncode == 0, one.stderr
        assert one.stdout.split() == [f"gpuvalidation.gpuval.dev/{name}"]
        by_report = cluster.kubectl("get", "gpureport", report, "-o", "name").stdout.split()
        assert by_report == [f"gpunodereport.gpuval.dev/{report}"]
        listed = cluster.kubectl("get", "gpuval-all", "-o", "name").stdout.split()
        assert f"gpuvalidation.gpuval.dev/{name}" in listed
        assert f"gpunodereport.gpuval.dev/{report}" in listed
    finally:
        cluster.kubectl("delete", "gpunodereport", report, "--wait=false", check=False)
        cluster.kubectl("delete", "gpuvalidation", name, "--wait=false", check=False)
