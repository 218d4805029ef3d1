"""The simulated backend's memory test: a TEST DOUBLE of backends/torch/memtest.

It pretends to allocate the plan's share of a simulated GPU's memory (blocks of the real sizes at
made-up addresses) but computes and compares, with the numpy reference of the GPU kernels
(gpuval_agent.memtest), only a window of WINDOW words at the start of every block and around
every injected flip. So the `memory-flip` fault really corrupts a word that the real comparison
has to find, and the counters go through the same decoding as the GPU's; `memory-held` makes
allocations fail part way, as another process taking memory does.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from gpuval_agent.memtest import (
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
    size_text,
    words_at,
)

if TYPE_CHECKING:
    import numpy.typing as npt

WINDOW = 64  # words really computed and compared per block and per flip
BASE_ADDRESS = 0x7F2A00000000  # where the simulated blocks start (made up)
CONTEXT_BYTES = 400 << 20  # what a simulated CUDA context takes


class SimulatedMemory:
    """One simulated GPU's memory as the memory test sees it."""

    def __init__(
        self, gpu: int, total_bytes: int, held_fraction: float, flips: Sequence[MemoryFlip]
    ) -> None:
        self.gpu, self.total_bytes, self.flips = gpu, total_bytes, list(flips)
        self.free_bytes = max(total_bytes - CONTEXT_BYTES, 0)
        # Another process takes its share while the test allocates: what is left is allocatable.
        self._allocatable = max(self.free_bytes - int(total_bytes * held_fraction), 0)
        self._held = held_fraction

    def allocate(self, target_bytes: int) -> tuple[list[Block], str | None]:
        sizes: list[int] = []

        def one(size: int) -> str | None:
            if sum(sizes) + size > self._allocatable:
                return (
                    f"CUDA out of memory (simulated memory-held fault: another process holds "
                    f"{size_text(int(self.total_bytes * self._held))})"
                )
            sizes.append(size)
            return None

        shortfall = allocate(target_bytes, one)
        addresses, next_address = [], BASE_ADDRESS
        for size in sizes:
            addresses.append((next_address, size))
            next_address += size
        return layout(addresses), shortfall


class _Windows:
    """The words of a layout that the double really computes: every block's first WINDOW words
    and the WINDOW words around each flip."""

    def __init__(self, blocks: Sequence[Block], flips: Sequence[MemoryFlip]) -> None:
        starts: set[tuple[int, int]] = {(b, 0) for b in range(len(blocks))}
        for flip in flips:
            block, word = locate(blocks, flip.offset)
            starts.add((block, word // WINDOW * WINDOW))
        owner: list[int] = []
        words: list[int] = []
        for block, start in sorted(starts):
            count = min(WINDOW, blocks[block].words - start)
            owner += [block] * count
            words += range(start, start + count)
        self.owner = np.array(owner, dtype=np.int64)
        self.word = np.array(words, dtype=np.uint64)
        self.addresses = np.array([blocks[b].address for b in owner], dtype=np.uint64) + (
            self.word * np.uint64(WORD)
        )
        self.indices = np.array([blocks[b].first_word for b in owner], dtype=np.uint64) + self.word
        self.position = {(b, int(w)): i for i, (b, w) in enumerate(zip(owner, words, strict=True))}

    def counters(
        self, step: Step, flips: Sequence[tuple[int, int, int]], blocks: int
    ) -> list[list[int]]:
        """One row per block: the step's words written, `flips` (block, word, bit) applied, read
        back and compared."""
        written = words_at(step, self.addresses, self.indices)
        read = written.copy()
        for block, word, bit in flips:
            read[self.position[(block, word)]] ^= np.uint64(1 << bit)
        rows = [[0, FIRST_NONE, LAST_NONE, 0] for _ in range(blocks)]
        diff: npt.NDArray[np.uint64] = read ^ written
        for i in np.flatnonzero(diff):
            row, word = rows[int(self.owner[i])], int(self.word[i])
            row[0] += 1
            row[1], row[2] = min(row[1], word), max(row[2], word)
            row[3] = signed64(row[3] | int(diff[i]))
        return rows


def simulated_memtest(
    memory: SimulatedMemory,
    plan: MemoryPlan,
    gbps: float,
    *,
    on_progress: MemoryProgressCallback,
    stop: threading.Event,
    sleep: Callable[[float, threading.Event], None],
) -> MemoryMeasurement:
    """The memory test on one simulated GPU; each step takes the time it would at `gbps`."""
    measurement = MemoryMeasurement(
        gpu=memory.gpu, total_bytes=memory.total_bytes, free_bytes=memory.free_bytes
    )
    blocks, measurement.shortfall = memory.allocate(plan.target_bytes(memory.free_bytes))
    if not blocks:
        return measurement
    measurement.tested_bytes = sum(b.nbytes for b in blocks)
    measurement.blocks = len(blocks)
    measurement.steps_planned = len(plan.steps)
    windows = _Windows(blocks, memory.flips)
    step_seconds = measurement.tested_bytes / (gbps * 1e9)
    for pass_index in range(plan.passes):
        steps = [s for p in plan.patterns for s in pattern_steps(p, pass_index)]
        rows: list[list[int]] = []
        for position, step in enumerate(steps):
            if stop.is_set():
                break
            here = [
                (*locate(blocks, f.offset), f.bit)
                for f in memory.flips
                if pass_index == 0 and f.step_position(steps) == position
            ]
            rows += windows.counters(step, here, len(blocks))
            sleep(step_seconds, stop)
            measurement.add_step(step, step_seconds)
            on_progress(
                MemoryProgress(
                    memory.gpu, measurement.steps_done, measurement.steps_planned, step.label, gbps
                )
            )
        measurement.miscompares += miscompares(rows, steps, blocks)
    return measurement
