"""The memory test on torch and Triton (imported only where GPUs are).

Design (measured against a plain fill-and-compare loop by benchmarks/memtest_bench.py):
- The plan's share of the GPU's free memory is allocated as blocks of at most 2 GiB (torch's
  allocator, so plain cudaMalloc; its cache emptied first). An allocation the GPU refuses is
  retried at half the size down to 64 MiB, then the test runs on what it got and says so: a
  GPU whose memory is held elsewhere is tested less, never failed for it.
- Each step launches the fill kernel on every block, then the check kernel on every block
  (backends/torch/memtestkernels.py): every word is written once and read once, and the check
  regenerates what was written, so no reference copy takes memory or bandwidth. The differences
  go into a per-pass counters array on the GPU; the host never reads per step, it waits on the
  event of the step before last (so two steps are always queued) to report progress and to see
  a stop, and reads the counters once per pass.
- A flip (the test hook, gpuval_agent.memtest.MemoryFlip) is an XOR of one word on the same
  stream between the step's fills and its checks.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

import torch  # type: ignore[import-not-found,unused-ignore]

from gpuval_agent.backends.torch import memtestkernels as kernels
from gpuval_agent.memtest import (
    COUNTERS,
    FIRST_NONE,
    LAST_NONE,
    WORD,
    Block,
    MemoryFlip,
    MemoryMeasurement,
    MemoryPlan,
    MemoryProgress,
    MemoryProgressCallback,
    Step,
    allocate,
    layout,
    locate,
    miscompares,
    pattern_steps,
    signed64,
)
from gpuval_api.checks import MemoryPattern


@dataclass(frozen=True, slots=True)
class Launch:
    """How the kernels are launched: words per tile, warps per program, programs per SM."""

    tile: int = kernels.TILE
    warps: int = 8
    programs_per_sm: int = 4


_compile_lock = threading.Lock()
WALKING_ONES, ADDRESS, RANDOM = (
    MemoryPattern.WALKING_ONES,
    MemoryPattern.ADDRESS,
    MemoryPattern.RANDOM,
)


class Region:
    """The tested memory of one GPU: blocks allocated until the plan's share is reached or the GPU
    refuses more."""

    def __init__(self, device: torch.device, tensors: list[torch.Tensor], shortfall: str | None):
        self.device = device
        self.tensors = tensors
        self.shortfall = shortfall
        self.blocks: list[Block] = layout([(t.data_ptr(), t.numel() * WORD) for t in tensors])

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes for b in self.blocks)

    @classmethod
    def allocate(cls, device: torch.device, target_bytes: int) -> Region:
        tensors: list[torch.Tensor] = []

        def one(size: int) -> str | None:
            try:
                tensors.append(torch.empty(size // WORD, dtype=torch.int64, device=device))
            except torch.cuda.OutOfMemoryError as error:
                return str(error).splitlines()[0] if str(error) else type(error).__name__
            return None

        shortfall = allocate(target_bytes, one)
        return cls(device, tensors, shortfall)

    def release(self) -> None:
        self.tensors.clear()
        self.blocks = []

    def flip(self, flip: MemoryFlip) -> None:
        block, word = locate(self.blocks, flip.offset)
        self.tensors[block][word : word + 1].bitwise_xor_(signed64(1 << flip.bit))


def programs(device: torch.device, launch: Launch) -> int:
    """Programs per launch (a compile-time constant of the kernels)."""
    sms: int = torch.cuda.get_device_properties(device).multi_processor_count
    return sms * launch.programs_per_sm


def warm_up(device: torch.device, launch: Launch) -> None:
    """Compile every kernel before the memory is taken (Triton's first compile is not safe from
    several threads), and see each kind verify what it wrote on one tile."""
    with _compile_lock, torch.cuda.device(device):
        region = Region(device, [torch.zeros(launch.tile, dtype=torch.int64, device=device)], None)
        steps = [pattern_steps(p)[0] for p in (WALKING_ONES, ADDRESS, RANDOM)]
        work = _Pass(region, steps, launch)
        for position in range(len(steps)):
            work.launch_step(position, [])
        rows = work.counters.reshape(-1, COUNTERS).tolist()
    if bad := miscompares(rows, steps, region.blocks):
        raise RuntimeError(
            f"the memory test's kernels read back other words than they wrote on a healthy "
            f"one-tile buffer ({bad[0].describe(f'GPU {device.index or 0}', launch.tile * WORD)})"
        )


class _Pass:
    """One pass of steps over a region, its counters and its timing events."""

    def __init__(self, region: Region, steps: Sequence[Step], launch: Launch) -> None:
        device = region.device
        self.region, self.steps, self.launch = region, list(steps), launch
        self.programs = programs(device, launch)
        self.table = torch.tensor(
            [[b.address, b.first_word] for b in region.blocks], dtype=torch.int64, device=device
        ).reshape(-1)
        self.values = torch.tensor([s.value for s in steps], dtype=torch.int64, device=device)
        rows = torch.zeros(len(steps) * len(region.blocks), COUNTERS, dtype=torch.int64)
        rows[:, 1], rows[:, 2] = FIRST_NONE, LAST_NONE
        self.counters = rows.to(device).reshape(-1)
        self.events = [torch.cuda.Event(enable_timing=True) for _ in range(len(steps) + 1)]

    def launch_step(self, position: int, flips: Sequence[MemoryFlip]) -> None:
        kind, region = int(self.steps[position].kind), self.region
        constants = {"KIND": kind, "TILE": self.launch.tile, "NPROG": self.programs}
        if position == 0:
            self.events[0].record()
        for block, tensor in enumerate(region.tensors):
            kernels.fill[(self.programs,)](
                tensor,
                tensor.numel(),
                self.values,
                position,
                self.table,
                block,
                **constants,
                num_warps=self.launch.warps,
            )
        for flip in flips:
            region.flip(flip)
        for block, tensor in enumerate(region.tensors):
            slot = position * len(region.blocks) + block
            kernels.check[(self.programs,)](
                tensor,
                tensor.numel(),
                self.values,
                position,
                self.table,
                block,
                self.counters,
                slot,
                **constants,
                num_warps=self.launch.warps,
            )
        self.events[position + 1].record()

    def seconds(self, upto: int) -> float:
        """GPU seconds from the first step's start to the end of step `upto - 1`."""
        seconds: float = self.events[0].elapsed_time(self.events[upto]) / 1000
        return seconds

    def step_seconds(self, position: int) -> float:
        seconds: float = self.events[position].elapsed_time(self.events[position + 1]) / 1000
        return seconds


def run_steps(
    region: Region,
    steps: Sequence[Step],
    measurement: MemoryMeasurement,
    *,
    flips: Sequence[MemoryFlip] = (),
    on_progress: MemoryProgressCallback | None = None,
    stop: threading.Event | None = None,
    launch: Launch = Launch(),
) -> None:
    """Write and verify `steps` (one pass) over `region`, adding to `measurement`. `flips` apply
    at their step of the first pass (the test hook)."""
    if not region.blocks or not steps:
        return
    work = _Pass(region, steps, launch)
    done = 0
    with torch.cuda.device(region.device):
        for position, step in enumerate(steps):
            here = [f for f in flips if step.pass_index == 0 and f.step_position(steps) == position]
            work.launch_step(position, here)
            done = position + 1
            if position >= 1:
                # Wait for the step before this one: this one stays queued, so the GPU never
                # waits for the host, which sees progress and a stop one step late.
                work.events[position].synchronize()
                _report(work, measurement, position - 1, on_progress)
            if stop is not None and stop.is_set():
                break
        work.events[done].synchronize()
        _report(work, measurement, done - 1, on_progress)
        rows = work.counters.reshape(-1, COUNTERS)[: done * len(region.blocks)].tolist()
    measurement.miscompares += miscompares(rows, steps[:done], region.blocks)
    measurement.steps_done += done
    measurement.seconds += work.seconds(done)
    for position in range(done):
        name = str(steps[position].pattern)
        measurement.seconds_by_pattern[name] = measurement.seconds_by_pattern.get(
            name, 0.0
        ) + work.step_seconds(position)
        measurement.steps_by_pattern[name] = measurement.steps_by_pattern.get(name, 0) + 1


def _report(
    work: _Pass,
    measurement: MemoryMeasurement,
    position: int,
    on_progress: MemoryProgressCallback | None,
) -> None:
    if on_progress is None or position < 0:
        return
    seconds = work.seconds(position + 1)
    tested = work.region.nbytes
    gbps = (position + 1) * tested / seconds / 1e9 if seconds > 0 else 0.0
    on_progress(
        MemoryProgress(
            gpu=measurement.gpu,
            steps_done=measurement.steps_done + position + 1,
            steps_total=measurement.steps_planned,
            label=work.steps[position].label,
            gbps=gbps,
        )
    )


def memtest_gpu(
    gpu: int,
    plan: MemoryPlan,
    *,
    flips: Sequence[MemoryFlip] = (),
    on_progress: MemoryProgressCallback | None = None,
    stop: threading.Event | None = None,
    launch: Launch = Launch(),
) -> MemoryMeasurement:
    """The whole memory test of one GPU (CUDA ordinal `gpu`): allocate, every pass, release."""
    device = torch.device("cuda", gpu)
    measurement = MemoryMeasurement(gpu=gpu)
    warm_up(device, launch)
    with torch.cuda.device(device):
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()  # what torch holds cached counts as free for the test
        free, total = torch.cuda.mem_get_info(device)
        measurement.free_bytes, measurement.total_bytes = int(free), int(total)
        region = Region.allocate(device, plan.target_bytes(int(free)))
        try:
            measurement.tested_bytes, measurement.shortfall = region.nbytes, region.shortfall
            measurement.blocks = len(region.blocks)
            if region.blocks:
                measurement.steps_planned = len(plan.steps)
            with torch.cuda.stream(torch.cuda.Stream(device)):
                for pass_index in range(plan.passes):
                    if stop is not None and stop.is_set():
                        break
                    steps = [s for p in plan.patterns for s in pattern_steps(p, pass_index)]
                    run_steps(
                        region,
                        steps,
                        measurement,
                        flips=flips,
                        on_progress=on_progress,
                        stop=stop,
                        launch=launch,
                    )
        finally:
            region.release()
            del region
            torch.cuda.empty_cache()
    return measurement


def memtest(
    gpus: list[int],
    plan: MemoryPlan,
    *,
    flips: dict[int, list[MemoryFlip]] | None = None,
    on_progress: MemoryProgressCallback | None = None,
    stop: threading.Event | None = None,
) -> list[MemoryMeasurement]:
    """Test every GPU in `gpus` (CUDA ordinals) at once, one thread each. `flips` by ordinal."""
    results: dict[int, MemoryMeasurement] = {}

    def work(gpu: int) -> None:
        try:
            results[gpu] = memtest_gpu(
                gpu, plan, flips=(flips or {}).get(gpu, []), on_progress=on_progress, stop=stop
            )
        except Exception as error:  # reported per GPU, the others go on
            results[gpu] = MemoryMeasurement(gpu=gpu, error=f"{type(error).__name__}: {error}")

    threads = [threading.Thread(target=work, args=(g,), name=f"memtest-{g}") for g in gpus]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [results[gpu] for gpu in gpus]
