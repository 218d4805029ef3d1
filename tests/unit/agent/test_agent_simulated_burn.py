"""backends.simulated.burn: one simulated GPU's burn, split out of SimulatedBackend (the backend's
faults end to end are pinned by test_agent_checks.py). Its numpy iterations are really verified."""

from __future__ import annotations

from gpuval_agent.backends.base import BurnMeasurement, BurnProgress
from gpuval_agent.backends.simulated.burn import BurnFaults, burn_gpu
from gpuval_agent.backends.simulated.config import Fault, FaultKind
from gpuval_api.checks import Precision


def burn(faults: BurnFaults, seconds: float = 10.0) -> tuple[BurnMeasurement, list[BurnProgress]]:
    seen: list[BurnProgress] = []
    measurement = burn_gpu(
        0,
        Precision.BF16,
        seconds,
        tflops=776.0,
        faults=faults,
        product="NVIDIA H200",
        on_progress=seen.append,
    )
    return measurement, seen


def test_a_healthy_gpu_burns_clean_at_its_tflops() -> None:
    measurement, seen = burn(BurnFaults())
    assert measurement.error is None and measurement.iterations == 10
    assert measurement.bad == []
    assert seen == [BurnProgress(gpu=0, iterations=10, tflops=776.0)]


def test_a_miscompare_is_caught_by_the_real_verification_once() -> None:
    fault = Fault(kind=FaultKind.MISCOMPARE, gpu=0, iteration=3)
    measurement, _ = burn(BurnFaults(miscompare=fault))
    assert [(b.iteration, b.mismatches) for b in measurement.bad] == [(3, 1)]


def test_a_wrong_reference_differs_from_a_healthy_gpus_and_still_matches_itself() -> None:
    healthy, _ = burn(BurnFaults())
    wrong, _ = burn(BurnFaults(wrong_reference=True))
    assert wrong.fingerprint != healthy.fingerprint
    assert wrong.bad == []


def test_memory_held_by_another_process_or_an_invisible_gpu_is_an_error() -> None:
    held, seen = burn(BurnFaults(foreign_memory_pid=4242))
    assert held.error is not None and "4242" in held.error and not seen
    invisible, _ = burn(BurnFaults(cuda_invisible=True))
    assert invisible.error is not None and "invalid device ordinal" in invisible.error
