"""The simulated backend's burn of one GPU: a TEST DOUBLE's part, but not all pretence. Each
simulated iteration multiplies two small matrices with numpy and checks the result against a
reference with the same bit-exact comparison the GPU burn uses (gpuval_agent.verify), so the
`miscompare` and `nan` faults corrupt a real result that the real verification has to catch, and
`wrong-reference` gives a GPU a reference that differs from the node's other GPUs'. Which faults a
GPU plays and its TFLOP/s are the backend's (`BurnFaults`); nothing here reads the config.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from gpuval_agent.backends.base import BurnMeasurement, BurnProgress, ProgressCallback
from gpuval_agent.backends.simulated.config import Fault
from gpuval_agent.backends.simulated.foreign import out_of_memory
from gpuval_agent.verify import count_bad_elements, scan_counts
from gpuval_api.checks import Precision

_SMALL = 16  # side of the small matrices each simulated iteration really multiplies
_MAX_ITERATIONS = 200  # simulated iterations per GPU and precision, whatever the duration
_NUMPY_DTYPES = {
    Precision.BF16: np.float16,  # numpy has no bf16; half exercises the same 2-byte comparison
    Precision.FP16: np.float16,
    Precision.TF32: np.float32,
    Precision.FP32: np.float32,
    Precision.FP64: np.float64,
}


@dataclass(frozen=True)
class BurnFaults:
    """The faults one GPU's burn plays."""

    wrong_reference: bool = False
    miscompare: Fault | None = None
    nan: Fault | None = None
    cuda_invisible: bool = False
    # Another process holds the GPU's memory: its pid, named in the out-of-memory error.
    foreign_memory_pid: int | None = None


def burn_gpu(
    gpu: int,
    precision: Precision,
    seconds: float,
    *,
    tflops: float,
    faults: BurnFaults,
    product: str,
    on_progress: ProgressCallback,
) -> BurnMeasurement:
    """One GPU's burn measurement at `tflops`, its iterations really multiplied and verified."""
    dtype = _NUMPY_DTYPES[precision]
    generator = np.random.default_rng(1234)
    a = generator.standard_normal((_SMALL, _SMALL)).astype(dtype)
    b = generator.standard_normal((_SMALL, _SMALL)).astype(dtype)
    reference = a @ b
    wrong = faults.wrong_reference
    if wrong:
        # Consistently wrong: the reference and every result carry the same flipped bit, so
        # every iteration matches its reference; the GPU's reference differs from the node's
        # other GPUs' (BurnMismatch), and on a node of one GPU only a comparison across nodes
        # can tell.
        reference.view(_bits(reference))[7, 7] ^= 1 << 3
    if faults.foreign_memory_pid is not None:
        return BurnMeasurement(gpu=gpu, error=out_of_memory(gpu, faults.foreign_memory_pid))
    if faults.cuda_invisible:
        return BurnMeasurement(
            gpu=gpu,
            error="RuntimeError: CUDA error: invalid device ordinal\nCUDA kernel errors "
            "might be asynchronously reported at some other API call, so the stacktrace "
            "below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1",
        )
    iterations = max(1, min(int(seconds), _MAX_ITERATIONS))
    counts: list[tuple[int, int]] = []
    for iteration in range(iterations):
        result = a @ b
        if wrong:
            result.view(_bits(result))[7, 7] ^= 1 << 3
        for fault, value in ((faults.miscompare, None), (faults.nan, np.nan)):
            target = (
                iterations // 2 if fault is None or fault.iteration is None else fault.iteration
            )
            if fault is not None and iteration == target:
                if value is None:
                    result.view(_bits(result))[3, 5] ^= 1  # one flipped low mantissa bit
                else:
                    result[3, 5] = value
        counts.append(count_bad_elements(result, reference))
    on_progress(BurnProgress(gpu=gpu, iterations=iterations, tflops=tflops))
    duration = max(seconds, 1e-9)
    digest = int(reference.view(_bits(reference)).astype(np.uint64).sum()) & (1 << 64) - 1
    return BurnMeasurement(
        gpu=gpu,
        iterations=iterations,
        seconds=duration,
        flops_per_iteration=tflops * 1e12 * duration / iterations,
        bad=scan_counts(counts, first_iteration=0),
        fingerprint=f"{digest:016x}",
        determinants="|".join([product, f"n{_SMALL}", str(precision), f"numpy {np.__version__}"]),
    )


def _bits(array: npt.NDArray[np.generic]) -> type[np.unsignedinteger[Any]]:
    widths: dict[int, type[np.unsignedinteger[Any]]] = {2: np.uint16, 4: np.uint32, 8: np.uint64}
    return widths[array.dtype.itemsize]
