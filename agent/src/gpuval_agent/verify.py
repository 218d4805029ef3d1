"""Burn result verification: the semantics every backend implements, and the host-side scan.

Every burn iteration computes C = A @ B from fixed inputs; the GEMM is deterministic on one GPU
(as gpu-burn relies on), so a healthy GPU gives bit-identical C every time. Each iteration's C is
compared bit for bit with a reference C, counting differing elements and non-finite elements
(NaN/Inf) into that iteration's slot of a counts array. The GPU backend does this in one fused
pass on the device and reads the counts about once a second, never syncing per iteration; the
numpy functions here are the CPU reference of the same comparison (used by the simulated backend
and the unit tests) and `scan_counts` turns counts into named bad iterations for every backend.
The GPUs of one node burn the same inputs on the same part, so their reference results must agree:
`differing_references` names the GPU whose reference differs from every other's, for every backend.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy is imported where it is used: it is 0.3 s of every agent's start
    import numpy as np
    import numpy.typing as npt

# Exponent-all-ones masks: an element whose magnitude bits reach this is Inf or NaN.
_EXPONENT = {2: 0x7C00, 4: 0x7F800000, 8: 0x7FF0000000000000}
_BF16_EXPONENT = 0x7F80


@dataclass(frozen=True, slots=True)
class BadIteration:
    """One burn iteration whose result was wrong."""

    iteration: int
    mismatches: int
    non_finite: int

    @property
    def is_nan(self) -> bool:
        return self.non_finite > 0


def count_bad_elements(
    result: npt.NDArray[np.generic], reference: npt.NDArray[np.generic], *, bf16: bool = False
) -> tuple[int, int]:
    """(elements whose bits differ from the reference, elements that are NaN or Inf).

    `bf16=True` reads 2-byte elements as bfloat16 (numpy has no bf16; the caller passes uint16
    bits) instead of IEEE half.
    """
    if result.shape != reference.shape or result.dtype != reference.dtype:
        raise ValueError(
            f"result {result.shape}/{result.dtype} and reference "
            f"{reference.shape}/{reference.dtype} differ in shape or dtype"
        )
    import numpy as np  # noqa: PLC0415 - see the module's imports

    width = result.dtype.itemsize
    bits_type = {2: np.uint16, 4: np.uint32, 8: np.uint64}[width]
    bits = result.view(bits_type)
    mismatches = int(np.count_nonzero(bits != reference.view(bits_type)))
    magnitude_mask = bits_type((1 << (8 * width - 1)) - 1)
    exponent = bits_type(_BF16_EXPONENT if bf16 and width == 2 else _EXPONENT[width])
    non_finite = int(np.count_nonzero((bits & magnitude_mask) >= exponent))
    return mismatches, non_finite


def scan_counts(counts: Sequence[tuple[int, int]], first_iteration: int) -> list[BadIteration]:
    """Bad iterations among per-iteration (mismatches, non_finite) counts; iteration numbers start
    at `first_iteration` for counts[0]."""
    return [
        BadIteration(first_iteration + offset, mismatches, non_finite)
        for offset, (mismatches, non_finite) in enumerate(counts)
        if mismatches or non_finite
    ]


def differing_references(fingerprints: Mapping[int, str]) -> set[int]:
    """The GPUs (of `fingerprints`, GPU -> digest of its reference result, one precision) whose
    reference differs from every other GPU's. A GPU alone has no other to differ from; of two that
    differ, both are named (neither has a majority)."""
    return {
        gpu
        for gpu, mine in fingerprints.items()
        if len(fingerprints) > 1
        and all(other != mine for peer, other in fingerprints.items() if peer != gpu)
    }
