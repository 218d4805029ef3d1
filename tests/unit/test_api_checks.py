"""ChecksConfig: the contract between spec.checks, GPUVAL_CHECKS and the agent's CLI."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gpuval_api.checks import CheckName, ChecksConfig, Precision, Threshold, parse_checks


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
