"""Bad input becomes messages naming field, value and fix; nothing raises."""

from __future__ import annotations

from gpuval_operator.spec import parse_spec


def test_a_valid_spec_has_no_errors() -> None:
    spec, errors = parse_spec({"maxConcurrent": 2, "schedule": "0 3 * * *"})
    assert errors == [] and spec is not None and spec.max_concurrent == 2


def test_bad_cron_names_the_field_and_value() -> None:
    _, errors = parse_spec({"schedule": "every night"})
    assert len(errors) == 1
    assert errors[0].startswith("spec.schedule='every night': not a cron expression")


def test_bad_percentage_names_the_field_and_value() -> None:
    _, errors = parse_spec({"maxConcurrent": "150%"})
    assert errors and "spec.maxConcurrent='150%'" in errors[0]


def test_a_bad_node_actions_limit_names_the_field_and_value() -> None:
    _, errors = parse_spec({"nodeActions": {"maxNodes": "0%"}})
    assert errors == [
        "spec.nodeActions.maxNodes='0%': a string must be a percentage from 1% to 100%; use "
        "e.g. '10%' or a node count like 4"
    ]
    _, errors = parse_spec({"nodeActions": {"maxNodes": 0}})
    assert errors == ["spec.nodeActions.maxNodes=0: must be at least 1 node"]


def test_the_node_actions_limits_default_to_a_tenth_and_a_majority_of_three() -> None:
    spec, _ = parse_spec({})
    assert spec is not None
    actions = spec.node_actions
    assert (actions.max_nodes, actions.systemic_fraction, actions.systemic_min_nodes) == (
        "10%",
        0.5,
        3,
    )


def test_timeout_shorter_than_the_burn_is_invalid_with_the_needed_value() -> None:
    _, errors = parse_spec(
        {
            "nodeTimeoutSeconds": 100,
            "checks": {"burn": {"durationSeconds": 60, "precisions": ["bf16", "fp32"]}},
        }
    )
    assert len(errors) == 1
    assert "spec.nodeTimeoutSeconds=100" in errors[0] and "raise it above 120" in errors[0]


def test_schema_errors_are_reported_with_their_path_not_raised() -> None:
    spec, errors = parse_spec({"checks": {"burn": {"durationSeconds": -1}}, "history": "many"})
    assert spec is None
    assert any(e.startswith("spec.checks.burn.durationSeconds=-1") for e in errors)
    assert any(e.startswith("spec.history='many'") for e in errors)


def test_disagreeing_gpu_counts_are_invalid() -> None:
    _, errors = parse_spec({"expected": {"gpuCount": 8}, "checks": {"driver": {"expectedGpus": 4}}})
    assert errors == [
        "spec.expected.gpuCount=8 disagrees with spec.checks.driver.expectedGpus=4; set one of them"
    ]


def test_a_valid_fabric_spec_has_no_errors() -> None:
    spec, errors = parse_spec(
        {
            "fabric": {
                "groupSize": 4,
                "topologyKey": "topology.kubernetes.io/zone",
                "expectedTransport": "IB",
                "ncclEnv": [{"name": "NCCL_NET", "value": "IB"}],
            }
        }
    )
    assert errors == [] and spec is not None and spec.fabric is not None


def test_fabric_sizes_out_of_order_name_both_fields() -> None:
    spec, errors = parse_spec({"fabric": {"minBytes": 1 << 30, "maxBytes": 1 << 20}})
    assert spec is None and len(errors) == 1
    assert "fabric.minBytes (1073741824) is larger than fabric.maxBytes (1048576)" in errors[0]
    assert "set minBytes <= maxBytes" in errors[0]


def test_a_topology_key_that_is_no_label_key_is_invalid() -> None:
    _, errors = parse_spec({"fabric": {"topologyKey": "Rack Name/x"}})
    assert errors == [
        "spec.fabric.topologyKey='Rack Name/x': not a label key (its prefix is not a DNS "
        "subdomain (lowercase letters, digits, '-' and '.')); use a node label such as "
        "topology.kubernetes.io/zone"
    ]


def test_an_expected_transport_the_nccl_environment_forbids_is_invalid() -> None:
    _, errors = parse_spec(
        {
            "fabric": {
                "expectedTransport": "IB",
                "ncclEnv": [{"name": "NCCL_NET", "value": "Socket"}],
            }
        }
    )
    assert len(errors) == 1
    assert errors[0].startswith("spec.fabric.expectedTransport=IB: contradicts")
    assert "NCCL_NET='Socket'" in errors[0]


def test_a_variable_given_twice_in_the_nccl_environment_is_invalid() -> None:
    env = [{"name": "NCCL_IB_HCA", "value": "mlx5_0"}, {"name": "NCCL_IB_HCA", "value": "mlx5_1"}]
    _, errors = parse_spec({"fabric": {"ncclEnv": env}})
    assert errors == ["spec.fabric.ncclEnv[NCCL_IB_HCA]: given 2 times; give each variable once"]
