"""The GPU burn and copy measurements on torch (imported only where GPUs are).

Burn design (measured against a plain matmul by benchmarks/agent_bench.py):
- Fixed inputs A, B; every iteration computes C = A @ B with cuBLAS and compares C bit for bit with
  a reference C in one fused pass (a Triton kernel: two loads per element, two atomics per
  program), adding each iteration's (differing, non-finite) element counts into its own slot of a
  device counts array. A healthy GPU's GEMM is deterministic, so any difference is a fault.
- K iterations (about half a second of work) are captured into a CUDA graph, so the host launches
  once per K iterations and never syncs per iteration. Two graphs with two counts arrays
  alternate: the host reads one graph's counts while the other runs, so the GPU is never idle
  waiting for the host and every iteration's counts are read.
- The reference is computed by a captured GEMM too (same cuBLAS algorithm as the burn's), twice,
  and must be reproducible and finite; the GPUs of one node (same part, same inputs) must produce
  the same reference (fingerprints compared after the burn).
"""

from __future__ import annotations

import importlib.metadata
import threading
import time
from dataclasses import dataclass

import torch  # type: ignore[import-not-found,unused-ignore]

from gpuval_agent.backends.base import BurnMeasurement, BurnProgress, ProgressCallback
from gpuval_agent.verify import BadIteration, differing_references, scan_counts
from gpuval_api.checks import Precision

REPLAY_SECONDS = 0.5
_MAX_GRAPH_ITERATIONS = 4096
_SEED = 20261130

_DTYPES: dict[Precision, torch.dtype] = {
    Precision.BF16: torch.bfloat16,
    Precision.FP16: torch.float16,
    Precision.TF32: torch.float32,
    Precision.FP32: torch.float32,
    Precision.FP64: torch.float64,
}
_INT_VIEW = {2: torch.int16, 4: torch.int32, 8: torch.int64}
# (magnitude mask, smallest non-finite magnitude) per element width; bf16 has its own exponent.
_NONFINITE = {
    torch.bfloat16: (0x7FFF, 0x7F80),
    torch.float16: (0x7FFF, 0x7C00),
    torch.float32: (0x7FFFFFFF, 0x7F800000),
    torch.float64: (0x7FFFFFFFFFFFFFFF, 0x7FF0000000000000),
}

try:
    import triton  # type: ignore[import-not-found,unused-ignore]
    import triton.language as tl  # type: ignore[import-not-found,unused-ignore]

    @triton.jit  # type: ignore[untyped-decorator,unused-ignore]
    def _verify_kernel(  # type: ignore[no-untyped-def]  # noqa: PLR0917 - Triton kernels take positional pointers
        c_ptr,
        ref_ptr,
        counts_ptr,
        n,
        mag: tl.constexpr,
        exp: tl.constexpr,
        block: tl.constexpr,
        nprog: tl.constexpr,
    ):
        pid = tl.program_id(0)
        mismatches = tl.zeros([block], dtype=tl.int32)
        non_finite = tl.zeros([block], dtype=tl.int32)
        for start in range(pid * block, n, nprog * block):
            offsets = start + tl.arange(0, block)
            mask = offsets < n
            c = tl.load(c_ptr + offsets, mask=mask, other=0)
            r = tl.load(ref_ptr + offsets, mask=mask, other=0)
            mismatches += (c != r).to(tl.int32)
            non_finite += ((c & mag) >= exp).to(tl.int32)
        tl.atomic_add(counts_ptr, tl.sum(mismatches, axis=0))
        tl.atomic_add(counts_ptr + 1, tl.sum(non_finite, axis=0))

    HAVE_TRITON = True
except ImportError:  # pragma: no cover - torch without Triton: the slower torch-op comparison
    HAVE_TRITON = False

_compile_lock = threading.Lock()


def verify_into(c: torch.Tensor, ref: torch.Tensor, slot: torch.Tensor, use_triton: bool) -> None:
    """Add (elements of c whose bits differ from ref, non-finite elements of c) into slot[0:2]."""
    int_type = _INT_VIEW[c.element_size()]
    c_bits = c.view(int_type).reshape(-1)
    ref_bits = ref.view(int_type).reshape(-1)
    mag, exp = _NONFINITE[c.dtype]
    if use_triton and HAVE_TRITON:
        programs = torch.cuda.get_device_properties(c.device).multi_processor_count * 4
        _verify_kernel[(programs,)](
            c_bits,
            ref_bits,
            slot,
            c_bits.numel(),
            mag=mag,
            exp=exp,
            block=4096,
            nprog=programs,
            num_warps=8,
        )
        return
    slot[0] += (c_bits != ref_bits).sum(dtype=torch.int32)
    slot[1] += (~torch.isfinite(c)).sum(dtype=torch.int32)


def set_matmul_precision(precision: Precision) -> None:
    """tf32 lets fp32 matmuls use the tensor cores; fp32 forbids it (IEEE fp32 FMA)."""
    tf32 = precision is Precision.TF32
    torch.backends.cuda.matmul.allow_tf32 = tf32


@dataclass(frozen=True)
class Injection:
    """Deliberate corruption for the GPU tests: after the GEMM of each of these positions within a
    graph (so once per replay each), flip the lowest bit of one element of C, or make it NaN."""

    positions: frozenset[int]
    nan: bool = False


@dataclass
class _GpuBurn:
    gpu: int
    precision: Precision
    n: int
    use_triton: bool
    inject: Injection | None = None
    # GPUVAL_BURN_SLOWDOWN: the share of full throughput this GPU is held to (None: full).
    slowdown: float | None = None
    spin_cycles: int = 0

    def setup(self) -> None:
        device = torch.device("cuda", self.gpu)
        self.device = device
        dtype = _DTYPES[self.precision]
        generator = torch.Generator(device=device).manual_seed(_SEED)
        self.flops = 2.0 * self.n**3
        with torch.cuda.device(device):
            self.stream = torch.cuda.Stream(device)
            self.side = torch.cuda.Stream(device)
            with torch.cuda.stream(self.stream):
                # Uniform [0, 1) inputs, as gpu-burn uses: the peer figures are measured on them.
                self.a = torch.rand(self.n, self.n, device=device, dtype=dtype, generator=generator)
                self.b = torch.rand(self.n, self.n, device=device, dtype=dtype, generator=generator)
                self.c = torch.empty_like(self.a)
                self.ref = torch.empty_like(self.a)
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                torch.matmul(self.a, self.b, out=self.c)
                start.record()
                for _ in range(3):
                    torch.matmul(self.a, self.b, out=self.c)
                end.record()
                with _compile_lock:  # Triton's first compile is not safe from several threads
                    verify_into(
                        self.c,
                        self.c,
                        torch.zeros(2, dtype=torch.int32, device=device),
                        self.use_triton,
                    )
                    self.stream.synchronize()
            iteration_seconds = start.elapsed_time(end) / 3000
            self.k = max(1, min(_MAX_GRAPH_ITERATIONS, round(REPLAY_SECONDS / iteration_seconds)))
            if self.slowdown is not None:
                extra = self.k * iteration_seconds * (1 / self.slowdown - 1)
                self.spin_cycles = round(extra / _seconds_per_spin_cycle())
            # The reference comes from a captured GEMM too: a captured GEMM may run another cuBLAS
            # algorithm than an eager one (other workspace), and it must be reproducible.
            reference_graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(
                reference_graph, stream=self.stream, capture_error_mode="thread_local"
            ):
                torch.matmul(self.a, self.b, out=self.ref)
            # A graph replays on the current stream: every use of its output stays on that stream.
            with torch.cuda.stream(self.stream):
                reference_graph.replay()
                first = self.ref.clone()
                reference_graph.replay()
                int_type = _INT_VIEW[self.ref.element_size()]
                self.reproducible = bool(torch.equal(first.view(int_type), self.ref.view(int_type)))
                self.finite = bool(torch.isfinite(self.ref).all())
                digest = int(self.ref.view(int_type).sum(dtype=torch.int64)) & (1 << 64) - 1
                self.fingerprint = f"{digest:016x}"
            del first, reference_graph
            self.counts = [
                torch.zeros(self.k, 2, dtype=torch.int32, device=device) for _ in range(2)
            ]
            self.host = [torch.zeros(self.k, 2, dtype=torch.int32).pin_memory() for _ in range(2)]
            self.graphs = [self._capture(counts) for counts in self.counts]
            self.stream.synchronize()

    def _capture(self, counts: torch.Tensor) -> torch.cuda.CUDAGraph:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=self.stream, capture_error_mode="thread_local"):
            counts.zero_()
            for j in range(self.k):
                torch.matmul(self.a, self.b, out=self.c)
                if self.inject is not None and j in self.inject.positions:
                    self._corrupt()
                verify_into(self.c, self.ref, counts[j], self.use_triton)
            if self.spin_cycles:
                torch.cuda._sleep(self.spin_cycles)  # the slowdown test hook: no GEMM meanwhile
        return graph

    def _corrupt(self) -> None:
        element = self.c.view(-1)[12345 % self.c.numel() : 12345 % self.c.numel() + 1]
        if self.inject is not None and self.inject.nan:
            element.fill_(float("nan"))
        else:
            element.view(_INT_VIEW[self.c.element_size()]).bitwise_xor_(1)

    def run(
        self, deadline: float, on_progress: ProgressCallback, stop: threading.Event
    ) -> BurnMeasurement:
        measurement = BurnMeasurement(
            gpu=self.gpu, flops_per_iteration=self.flops, iterations_per_read=self.k
        )
        bad: list[BadIteration] = []
        if not self.finite:
            measurement.error = "the reference result itself holds NaN/Inf"
        elif not self.reproducible:
            measurement.error = "the reference GEMM gave two different results from the same inputs"
        with torch.cuda.device(self.device), torch.cuda.stream(self.stream):
            start = torch.cuda.Event(enable_timing=True)
            done = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
            start.record()
            for slot in range(2):
                self.graphs[slot].replay()
                done[slot].record()
            replay = 0
            last_report = time.monotonic()
            while True:
                slot = replay % 2
                done[slot].synchronize()
                bad += self._read(slot, first_iteration=replay * self.k)
                measurement.iterations += self.k
                finished = time.monotonic() >= deadline or stop.is_set()
                if finished:
                    other = 1 - slot
                    done[other].synchronize()
                    bad += self._read(other, first_iteration=(replay + 1) * self.k)
                    measurement.iterations += self.k
                    measurement.seconds = start.elapsed_time(done[other]) / 1000
                    break
                now = time.monotonic()
                if now - last_report >= 1.0:
                    last_report = now
                    elapsed = start.elapsed_time(done[slot]) / 1000
                    tflops = measurement.iterations * self.flops / elapsed / 1e12
                    on_progress(BurnProgress(self.gpu, measurement.iterations, tflops))
                self.graphs[slot].replay()
                done[slot].record()
                replay += 1
        measurement.bad = bad
        return measurement

    def _read(self, slot: int, first_iteration: int) -> list[BadIteration]:
        # The graph that wrote these counts has finished (its event was waited on), and the other
        # graph runs on self.stream meanwhile: copying on a side stream does not wait for it.
        with torch.cuda.stream(self.side):
            self.host[slot].copy_(self.counts[slot], non_blocking=True)
        self.side.synchronize()
        return scan_counts([(m, f) for m, f in self.host[slot].tolist()], first_iteration)

    def release(self) -> None:
        for name in ("a", "b", "c", "ref", "graphs", "counts", "host"):
            if hasattr(self, name):
                delattr(self, name)


def _seconds_per_spin_cycle() -> float:
    """What one cycle of torch.cuda._sleep (a spin kernel) lasts on the current device."""
    cycles = 50_000_000
    torch.cuda._sleep(cycles // 10)  # warm: the first launch pays for loading the kernel
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    end.synchronize()
    return float(start.elapsed_time(end)) / 1000 / cycles


def _blas_version() -> str:
    """cuBLAS's version from its wheel (what the pip-installed torch loads), else torch's CUDA."""
    for dist in ("nvidia-cublas", "nvidia-cublas-cu13", "nvidia-cublas-cu12"):
        try:
            return f"cublas {importlib.metadata.version(dist)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return f"cublas of CUDA {torch.version.cuda}"


def determinants(gpu: int, precision: Precision, n: int) -> str:
    """What fixes a reference result besides the seeded inputs (cuBLAS picks its kernels by GPU
    model, SM count and version); nodes equal in these must compute bit-identical references."""
    props = torch.cuda.get_device_properties(gpu)
    return "|".join(
        [
            props.name,
            f"sm{props.multi_processor_count}",
            f"n{n}",
            str(precision),
            f"torch {torch.__version__}",
            _blas_version(),
        ]
    )


def burn(
    gpus: list[int],
    precision: Precision,
    matrix_size: int,
    seconds: float,
    *,
    on_progress: ProgressCallback,
    stop: threading.Event,
    use_triton: bool = True,
    inject: dict[int, Injection] | None = None,
    slowdown: float | None = None,
) -> list[BurnMeasurement]:
    """Burn every GPU in `gpus` at once; see the module docstring. `inject` is for the GPU tests,
    `slowdown` (GPUVAL_BURN_SLOWDOWN) holds each GPU to about that share of its throughput."""
    # The burn's duration is its wall time, set-up (allocation, reference, capture) included.
    deadline = time.monotonic() + seconds
    set_matmul_precision(precision)
    inject = inject or {}
    burns = [
        _GpuBurn(gpu, precision, matrix_size, use_triton, inject.get(gpu), slowdown) for gpu in gpus
    ]
    results: dict[int, BurnMeasurement] = {}
    errors: dict[int, str] = {}
    ready = threading.Barrier(len(burns))

    def work(one: _GpuBurn) -> None:
        try:
            one.setup()
        except Exception as error:  # reported per GPU, the others go on
            errors[one.gpu] = f"setup failed: {type(error).__name__}: {error}"
        ready.wait()
        if one.gpu in errors:
            return
        try:
            results[one.gpu] = one.run(deadline, on_progress, stop)
        except Exception as error:
            errors[one.gpu] = f"{type(error).__name__}: {error}"
        finally:
            one.release()

    threads = [threading.Thread(target=work, args=(one,), name=f"burn-{one.gpu}") for one in burns]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    torch.cuda.empty_cache()
    measurements = []
    fingerprints = {b.gpu: b.fingerprint for b in burns if hasattr(b, "fingerprint")}
    differing = differing_references(fingerprints)
    for one in burns:
        if one.gpu in errors:
            measurements.append(BurnMeasurement(gpu=one.gpu, error=errors[one.gpu]))
            continue
        measurement = results[one.gpu]
        measurement.fingerprint = fingerprints.get(one.gpu)
        measurement.determinants = determinants(one.gpu, precision, matrix_size)
        measurement.reference_differs = one.gpu in differing
        measurements.append(measurement)
    return measurements
