"""Pure planning: node selection, concurrency, names, and the objects a run creates."""

from __future__ import annotations

from typing import Any

import pytest

from gpuval_api import keys
from gpuval_api.crd import GpuValidationSpec
from gpuval_api.env import OperatorEnv
from gpuval_api.gfd import GpuSharing
from gpuval_api.labels import label_value
from gpuval_operator import names, planning
from gpuval_operator.config import ConfigError, OperatorConfig


def node(
    name: str,
    gpus: int | None = 8,
    ready: bool = True,
    unschedulable: bool = False,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    allocatable = {"cpu": "64"} if gpus is None else {"cpu": "64", "nvidia.com/gpu": str(gpus)}
    return {
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {"unschedulable": True} if unschedulable else {},
        "status": {
            "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


@pytest.mark.parametrize(
    ("limit", "total", "expected"),
    [(4, 100, 4), ("25%", 10, 3), ("10%", 5, 1), ("100%", 7, 7), ("1%", 10000, 100), (1, 0, 1)],
)
def test_concurrency_is_a_count_or_a_rounded_up_percentage_of_at_least_one(
    limit: int | str, total: int, expected: int
) -> None:
    assert planning.concurrency_limit(limit, total) == expected


def test_selection_keeps_ready_schedulable_gpu_nodes_in_name_order() -> None:
    chosen = planning.select_nodes(
        [
            node("b", 4),
            node("a", 8),
            node("cpu-only", None),
            node("zero", 0),
            node("not-ready", ready=False),
            node("admin-cordoned", unschedulable=True),
            node(
                "cordoned-by-gpuval",
                unschedulable=True,
                annotations={keys.NODE_ANNOTATION_CORDONED_BY: "v"},
            ),
        ]
    )
    assert chosen == [
        planning.Candidate("a", 8),
        planning.Candidate("b", 4),
        planning.Candidate("cordoned-by-gpuval", 8),
    ]


def test_names_stay_within_kubernetes_limits_and_apart_when_truncated() -> None:
    long_node = "n" * 240 + ".example.com"
    other = "n" * 240 + ".example.org"
    a = names.report_name("fleet", "1-abcd", long_node)
    b = names.report_name("fleet", "1-abcd", other)
    assert len(a) <= 253 and len(b) <= 253 and a != b
    assert names.report_name("fleet", "1-abcd", "gpu-1") == "fleet-1-abcd-gpu-1"
    pod = names.pod_name("fleet", "1-abcd", long_node)
    assert len(pod) <= 63 and pod != names.pod_name("fleet", "1-abcd", other)
    assert not pod.endswith(("-", "."))


def test_label_values_are_kept_when_valid_and_hashed_when_not() -> None:
    assert label_value("gpu-node-1.example") == "gpu-node-1.example"
    hashed = label_value("x" * 64)
    assert hashed.startswith("h-") and len(hashed) <= 63
    assert label_value("x" * 64) == hashed


def test_agent_pod_asks_for_all_gpus_is_tied_to_its_node_and_never_restarts() -> None:
    spec = GpuValidationSpec.model_validate(
        {
            "agent": {
                "image": "registry/agent:1",
                "env": [{"name": "NCCL_DEBUG", "value": "INFO"}],
            },
            "checks": {"burn": {"durationSeconds": 5}},
        }
    )
    pod = planning.build_pod(
        validation="fleet",
        uid="uid-1",
        run="2-ab12",
        node="gpu-7",
        gpus=4,
        spec=spec,
        config=OperatorConfig(agent_namespace="gpuval", agent_service_account="agent-sa"),
    )
    container = pod["spec"]["containers"][0]
    assert pod["metadata"]["namespace"] == "gpuval"
    assert pod["spec"]["restartPolicy"] == "Never"
    # No service-link variables: a Service named gpuval-metrics would set GPUVAL_METRICS_PORT.
    assert pod["spec"]["enableServiceLinks"] is False
    assert pod["spec"]["serviceAccountName"] == "agent-sa"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "4"
    assert container["command"] == ["gpuval-agent", "cluster"]
    terms = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert terms["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["gpu-7"]
    env = {e["name"]: e for e in container["env"]}
    assert env["GPUVAL_REPORT_NAME"]["value"] == names.report_name("fleet", "2-ab12", "gpu-7")
    assert env["GPUVAL_NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert '"durationSeconds":5.0' in env["GPUVAL_CHECKS"]["value"]
    assert env["NCCL_DEBUG"]["value"] == "INFO"
    tolerated = {t.get("key") for t in pod["spec"]["tolerations"]}
    assert {"nvidia.com/gpu", keys.TAINT_KEY, keys.UNSCHEDULABLE_TAINT_KEY} <= tolerated
    labels = pod["metadata"]["labels"]
    assert labels[keys.LABEL_RUN] == "2-ab12" and labels[keys.LABEL_VALIDATION] == "fleet"
    assert pod["metadata"]["ownerReferences"][0]["uid"] == "uid-1"


def test_report_carries_node_run_and_gpu_count_for_a_restarted_operator() -> None:
    report = planning.build_report("fleet", "uid-1", "3-ffff", planning.Candidate("gpu-1", 8))
    assert report["spec"] == {"validation": "fleet", "run": "3-ffff", "node": "gpu-1"}
    assert report["metadata"]["annotations"]["gpuval.dev/gpus"] == "8"
    assert report["metadata"]["labels"][keys.LABEL_NODE] == "gpu-1"


def _pod(spec: dict[str, Any], config: OperatorConfig | None = None, **kw: Any) -> dict[str, Any]:
    built: dict[str, Any] = planning.build_pod(
        validation="fleet",
        uid="uid-1",
        run="2-ab12",
        node="gpu-7",
        gpus=kw.pop("gpus", 8),
        spec=GpuValidationSpec.model_validate(spec),
        config=config or OperatorConfig(),
        **kw,
    )
    return built


def test_agent_pods_share_the_hosts_pid_namespace_unless_the_spec_says_not_to() -> None:
    assert _pod({})["spec"]["hostPID"] is True
    assert _pod({"agent": {"hostPID": False}})["spec"]["hostPID"] is False


def test_the_specs_priority_class_wins_over_the_operators_default_and_none_is_none() -> None:
    assert "priorityClassName" not in _pod({})["spec"]
    default = OperatorConfig(agent_priority_class="gpuval-agent")
    assert _pod({}, default)["spec"]["priorityClassName"] == "gpuval-agent"
    mine = {"agent": {"priorityClassName": "batch-low"}}
    assert _pod(mine, default)["spec"]["priorityClassName"] == "batch-low"


def test_a_shared_nodes_agent_pod_holds_every_replica_and_tells_the_agent_the_physical_count() -> (
    None
):
    sharing = GpuSharing("time-slicing", 4, 8)
    pod = _pod({}, gpus=32, sharing=sharing)
    container = pod["spec"]["containers"][0]
    assert container["resources"]["requests"]["nvidia.com/gpu"] == "32"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "32"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["GPUVAL_EXPECTED_GPUS"] == "8" and env["GPUVAL_GPU_REPLICAS"] == "4"
    assert pod["metadata"]["annotations"][keys.ANNOTATION_GPU_SHARING] == "time-slicing/4"
    plain = {e["name"] for e in _pod({})["spec"]["containers"][0]["env"]}
    assert "GPUVAL_GPU_REPLICAS" not in plain


def test_the_operator_wide_node_actions_limit_comes_from_its_variable() -> None:
    assert OperatorConfig.from_env({}).max_nodes_out_of_service == 10
    env = {OperatorEnv.MAX_NODES_OUT_OF_SERVICE: "3"}
    assert OperatorConfig.from_env(env).max_nodes_out_of_service == 3
    with pytest.raises(ConfigError, match="GPUVAL_MAX_NODES_OUT_OF_SERVICE='many'"):
        OperatorConfig.from_env({OperatorEnv.MAX_NODES_OUT_OF_SERVICE: "many"})


def test_an_agent_pod_carries_its_baselines_before_the_specs_own_variables() -> None:
    spec = GpuValidationSpec.model_validate(
        {"agent": {"env": [{"name": "GPUVAL_BASELINE_FRACTION", "value": "0.05"}]}}
    )
    given = [
        {"name": "GPUVAL_BASELINE", "value": "kind: GpuBaseline"},
        {"name": "GPUVAL_BASELINE_FRACTION", "value": "0.1"},
    ]
    pod = planning.build_pod(
        validation="fleet",
        uid="uid-1",
        run="2-ab12",
        node="gpu-7",
        gpus=4,
        spec=spec,
        config=OperatorConfig(),
        baseline=given,
    )

    env = [(e["name"], e.get("value")) for e in pod["spec"]["containers"][0]["env"]]
    assert env[-3:] == [
        ("GPUVAL_BASELINE", "kind: GpuBaseline"),
        ("GPUVAL_BASELINE_FRACTION", "0.1"),
        # The spec's own variables come last: the later of two wins in a container.
        ("GPUVAL_BASELINE_FRACTION", "0.05"),
    ]
