"""The verified burn on real GPUs: corruption is caught every time, a healthy GPU passes clean."""

from __future__ import annotations

import threading

import pytest

from gpuval_api.checks import Precision

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
GPUS = torch.cuda.device_count()

torch_burn = pytest.importorskip("gpuval_agent.backends.torch.burn")

POSITIONS = frozenset({0, 3, 17})


def _burn(precision: Precision, n: int, seconds: float, inject: dict[int, object] | None = None):  # type: ignore[no-untyped-def]
    return torch_burn.burn(
        list(range(GPUS)),
        precision,
        n,
        seconds,
        on_progress=lambda _: None,
        stop=threading.Event(),
        inject=inject,
    )


@pytest.mark.parametrize(
    ("precision", "n"),
    [
        (Precision.BF16, 4096),
        (Precision.FP16, 4096),
        (Precision.TF32, 4096),
        (Precision.FP32, 2048),
        (Precision.FP64, 2048),
    ],
)
def test_a_flipped_low_bit_in_one_element_is_caught_in_every_replay(
    precision: Precision, n: int
) -> None:
    injection = torch_burn.Injection(positions=POSITIONS)
    measurements = _burn(precision, n, 2.0, {0: injection})
    corrupted = next(m for m in measurements if m.gpu == 0)
    assert corrupted.error is None
    k = corrupted.iterations_per_read
    assert k > max(POSITIONS), f"graph of {k} iterations is too short for positions {POSITIONS}"
    replays = corrupted.iterations // k
    assert replays >= 2
    expected = {replay * k + p for replay in range(replays) for p in POSITIONS}
    assert {bad.iteration for bad in corrupted.bad} == expected
    assert all(bad.mismatches == 1 and bad.non_finite == 0 for bad in corrupted.bad)
    for clean in (m for m in measurements if m.gpu != 0):
        assert clean.bad == [] and clean.error is None


def test_an_injected_nan_is_reported_as_non_finite_every_time() -> None:
    injection = torch_burn.Injection(positions=frozenset({5}), nan=True)
    (corrupted, *_) = _burn(Precision.BF16, 4096, 1.5, {0: injection})
    k = corrupted.iterations_per_read
    assert {bad.iteration for bad in corrupted.bad} == {
        r * k + 5 for r in range(corrupted.iterations // k)
    }
    assert all(bad.is_nan for bad in corrupted.bad)


def test_a_healthy_burn_on_every_gpu_has_no_bad_iterations_and_agreeing_references() -> None:
    measurements = _burn(Precision.BF16, 8192, 3.0)
    assert len(measurements) == GPUS
    for m in measurements:
        assert m.error is None
        assert m.bad == []
        assert not m.reference_differs
        assert m.tflops > 100  # sanity, not a timing target: an H200 does ~800
