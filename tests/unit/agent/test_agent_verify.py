"""CPU reference of the burn's result verification: every corrupted element is caught."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from gpuval_agent.verify import (
    BadIteration,
    count_bad_elements,
    differing_references,
    scan_counts,
)

FloatType = type[np.floating[Any]]
DTYPES: list[FloatType] = [np.float16, np.float32, np.float64]


def _product(dtype: FloatType) -> npt.NDArray[np.floating[Any]]:
    generator = np.random.default_rng(7)
    a = generator.random((64, 64)).astype(dtype)
    b = generator.random((64, 64)).astype(dtype)
    return a @ b


@pytest.mark.parametrize("dtype", DTYPES)
def test_identical_results_have_no_bad_elements(dtype: FloatType) -> None:
    reference = _product(dtype)
    assert count_bad_elements(reference.copy(), reference) == (0, 0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bit", [0, 1, 7])
def test_every_single_bit_flip_of_any_element_is_caught(dtype: FloatType, bit: int) -> None:
    reference = _product(dtype)
    bits_type = {2: np.uint16, 4: np.uint32, 8: np.uint64}[reference.dtype.itemsize]
    for row, column in [(0, 0), (13, 42), (63, 63)]:
        corrupted = reference.copy()
        corrupted.view(bits_type)[row, column] ^= bits_type(1 << bit)
        assert count_bad_elements(corrupted, reference) == (1, 0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_nan_and_inf_count_as_mismatching_and_non_finite(dtype: FloatType, value: float) -> None:
    reference = _product(dtype)
    corrupted = reference.copy()
    corrupted[5, 6] = value
    corrupted[7, 8] = value
    assert count_bad_elements(corrupted, reference) == (2, 2)


def test_bf16_bits_use_the_bf16_exponent() -> None:
    reference = np.array([0x3F80, 0x4000], dtype=np.uint16)  # 1.0, 2.0 in bf16
    nan = np.array([0x7FC0, 0x4000], dtype=np.uint16)  # bf16 quiet NaN
    assert count_bad_elements(nan, reference, bf16=True) == (1, 1)
    # The same bits read as IEEE half would be a finite number above the half exponent mask too;
    # a large finite bf16 (0x7F00) must not count as non-finite.
    large = np.array([0x7F00, 0x4000], dtype=np.uint16)
    assert count_bad_elements(large, reference, bf16=True) == (1, 0)


def test_shape_or_dtype_mismatch_is_an_error_naming_both() -> None:
    with pytest.raises(ValueError, match=r"\(2, 2\).*\(3, 3\)"):
        count_bad_elements(np.zeros((2, 2)), np.zeros((3, 3)))


def test_scan_counts_names_bad_iterations_from_the_first_iteration_number() -> None:
    counts = [(0, 0), (3, 0), (0, 0), (1, 1)]
    assert scan_counts(counts, first_iteration=100) == [
        BadIteration(101, 3, 0),
        BadIteration(103, 1, 1),
    ]
    assert scan_counts(counts, 100)[1].is_nan


@pytest.mark.parametrize(
    ("fingerprints", "named"),
    [
        ({0: "a"}, set()),  # alone: no other GPU to differ from
        ({0: "a", 1: "a", 2: "a"}, set()),
        ({i: "a" for i in range(8)} | {5: "b"}, {5}),
        ({0: "a", 1: "b"}, {0, 1}),  # two that differ: neither has a peer that agrees
        ({0: "a", 1: "a", 2: "b", 3: "b"}, set()),  # each agrees with one other
        ({0: "a", 1: "b", 2: "c"}, {0, 1, 2}),
    ],
    ids=["one GPU", "all agree", "one of eight", "two differ", "two pairs", "all differ"],
)
def test_a_gpu_whose_reference_differs_from_every_other_gpus_is_named(
    fingerprints: dict[int, str], named: set[int]
) -> None:
    assert differing_references(fingerprints) == named
