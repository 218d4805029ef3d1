"""ChecksConfig: the contract between spec.checks, GPUVAL_CHECKS and the agent's CLI."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gpuval_api.checks import (
    PROFILED,
    CheckName,
    ChecksConfig,
    Precision,
    Profile,
    Threshold,
    parse_checks,
)
from gpuval_api.crd import GpuValidationSpec
from gpuval_api.crdgen import model_schema


def test_defaults_enable_every_check_but_dcgm_in_run_order_state_first() -> None:
    assert ChecksConfig().enabled() == [
        CheckName.STATE,
        CheckName.DRIVER,
        CheckName.HEALTH,
        CheckName.BURN,
        CheckName.BANDWIDTH,
        CheckName.NCCL,
    ]


def test_camel_case_json_round_trips_with_unit_capitals() -> None:
    config = parse_checks(
        '{"burn": {"durationSeconds": 5, "precisions": ["bf16", "fp64"],'
        ' "minTflops": {"absolute": 300}},'
        ' "bandwidth": {"minH2dGBps": {"fractionOfExpected": 0.9}, "transferMiB": 256}}'
    )
    assert config.burn.duration_seconds == 5
    assert config.burn.precisions == [Precision.BF16, Precision.FP64]
    assert config.bandwidth.min_h2d_gbps.fraction_of_expected == 0.9
    assert config.bandwidth.transfer_mib == 256
    dumped = config.model_dump(by_alias=True)
    assert dumped["bandwidth"]["minH2dGBps"]["fractionOfExpected"] == 0.9
    assert parse_checks(config.model_dump_json(by_alias=True)) == config


def test_unknown_field_is_rejected_and_named() -> None:
    with pytest.raises(ValidationError) as caught:
        parse_checks('{"burn": {"durationSecs": 5}}')
    assert "durationSecs" in str(caught.value)


def test_nccl_sizes_out_of_order_name_both_values() -> None:
    with pytest.raises(ValidationError) as caught:
        parse_checks('{"nccl": {"minBytes": 4096, "maxBytes": 1024}}')
    assert "4096" in str(caught.value) and "1024" in str(caught.value)


def test_only_enables_exactly_the_named_checks() -> None:
    config = ChecksConfig().only([CheckName.BURN, CheckName.NCCL])
    assert config.enabled() == [CheckName.BURN, CheckName.NCCL]


@pytest.mark.parametrize(
    ("threshold", "expected", "minimum"),
    [
        (Threshold(absolute=100), 800.0, 100.0),
        (Threshold(fraction_of_expected=0.5), 800.0, 400.0),
        (Threshold(absolute=500, fraction_of_expected=0.5), 800.0, 500.0),
        (Threshold(fraction_of_expected=0.5), None, None),
        (Threshold(absolute=100, fraction_of_expected=0.5), None, 100.0),
        (Threshold(), 800.0, None),
    ],
)
def test_threshold_takes_the_stricter_minimum_and_ignores_fraction_on_unknown_parts(
    threshold: Threshold, expected: float | None, minimum: float | None
) -> None:
    assert threshold.minimum(expected) == minimum


def test_configured_seconds_sums_burn_time_over_precisions() -> None:
    config = parse_checks(
        '{"burn": {"durationSeconds": 10, "precisions": ["bf16", "tf32", "fp64"]}}'
    )
    assert config.configured_seconds() == 30


def test_the_full_profile_adds_the_memory_test_and_the_training_step() -> None:
    full = parse_checks('{"profile": "full"}')
    assert full.enabled() == [
        CheckName.STATE,
        CheckName.DRIVER,
        CheckName.HEALTH,
        CheckName.MEMORY,
        CheckName.BURN,
        CheckName.BANDWIDTH,
        CheckName.NCCL,
        CheckName.TRAIN,
    ]
    # The document it gives the agent pod (GPUVAL_CHECKS) reads back the same.
    assert parse_checks(full.model_dump_json(by_alias=True)) == full
    assert CheckName.TRAIN not in ChecksConfig().enabled()


def test_a_section_that_says_enabled_keeps_its_word_under_the_full_profile() -> None:
    config = parse_checks(
        '{"profile": "full", "memory": {"enabled": false}, "train": {"steps": 5}}'
    )
    assert CheckName.MEMORY not in config.enabled()
    assert CheckName.TRAIN in config.enabled() and config.train.steps == 5
    assert config.overridden() == [CheckName.MEMORY]
    # Under the default profile an explicit true adds a check; nothing is overridden.
    added = parse_checks('{"memory": {"enabled": true}}')
    assert CheckName.MEMORY in added.enabled() and added.overridden() == []
    # A section given without `enabled` leaves it to the profile.
    tuned = parse_checks('{"profile": "full", "memory": {"passes": 2}}')
    assert CheckName.MEMORY in tuned.enabled() and tuned.memory.passes == 2
    assert CheckName.MEMORY not in parse_checks('{"memory": {"passes": 2}}').enabled()


def _defaults_of_enabled(node: object, path: str = "") -> list[str]:
    """Every place in a CRD schema node where a default sets a profiled section's `enabled`."""
    found: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key in {n.value for n in PROFILED} and isinstance(value, dict):
                if "enabled" in value:
                    found.append(f"{path}.{key} (a default object)")
                enabled = (value.get("properties") or {}).get("enabled") or {}
                if "default" in enabled:
                    found.append(f"{path}.{key}.enabled")
            found += _defaults_of_enabled(value, f"{path}.{key}")
    return found


def test_the_crd_stores_no_enabled_for_the_checks_a_profile_decides() -> None:
    # A default there is stored by the API server and reads back as the user's own word, so
    # `profile: full` ran neither the memory test nor the training step (issue 42).
    checks = model_schema(GpuValidationSpec)["properties"]["checks"]
    assert _defaults_of_enabled(checks, "spec.checks") == []


@pytest.mark.parametrize("profile", list(Profile))
def test_a_document_with_every_other_default_filled_in_runs_what_its_profile_names(
    profile: Profile,
) -> None:
    # What the API server stores for `checks: {profile: ...}`: every default but the profiled
    # sections' `enabled`.
    stored = ChecksConfig().model_dump(mode="json", by_alias=True, exclude_none=True)
    config = ChecksConfig.model_validate(stored | {"profile": profile.value})
    assert [n for n in PROFILED if n in config.enabled()] == (
        list(PROFILED) if profile is Profile.FULL else []
    )
    # What the operator hands the agent says it outright, and reads back the same.
    told = parse_checks(config.resolved().model_dump_json(by_alias=True))
    assert told.enabled() == config.enabled()
    assert all(getattr(told, n.value).enabled is not None for n in PROFILED)


@pytest.mark.parametrize(
    ("document", "field", "value"),
    [
        ('{"profile": "fast"}', "profile", "fast"),
        ('{"train": {"steps": 0}}', "train.steps", "0"),
        ('{"train": {"model": "huge"}}', "train.model", "huge"),
        ('{"train": {"attention": "sparse"}}', "train.attention", "sparse"),
        ('{"train": {"lossTolerance": 0}}', "train.lossTolerance", "0"),
        ('{"train": {"minTokensPerSecond": {"absolute": -1}}}', "minTokensPerSecond", "-1"),
    ],
)
def test_a_bad_profile_or_training_setting_names_the_field_and_the_value(
    document: str, field: str, value: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        parse_checks(document)
    text = str(caught.value)
    assert field in text and value in text
