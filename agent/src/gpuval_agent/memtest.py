"""Pure: the memory test's plan, the tested memory's layout, and what its counters say.

Nothing here touches a GPU. Every backend implements the same semantics:
- The tested memory is a list of blocks, each a run of 64-bit words at a device address; a
  word's global index counts from the first block's first word.
- A pattern is a list of steps. Each step writes every word of every block, then reads every
  word back and compares it with the same value regenerated (no second copy is kept):
  CONSTANT: the step's value (walking ones and zeros); ADDRESS: the word's own byte address
  XOR the step's value (0, then all ones: the complement); RANDOM: `mix` of the word's global
  index and the step's seed, a counter-based generator that needs no state.
- A verification leaves four int64 counters per step and block: words that differ, the first
  and last differing word (index in the block), and the OR of (read XOR expected) over them.
The numpy functions here are the CPU reference of the GPU kernels
(backends/torch/memtestkernels.py), used by the simulated backend and the tests; `miscompares`
turns counters into named findings for every backend.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpuval_api.checks import MemoryCheck, MemoryPattern, camel

if TYPE_CHECKING:  # numpy is imported where it is used: it is 0.3 s of every agent's start
    import numpy as np
    import numpy.typing as npt

WORD = 8  # bytes per tested word
# Blocks are whole multiples of this (the GPU kernels' tile is 4096 words = 32 KiB; CUDA maps
# memory in 2 MiB pages).
BLOCK_ALIGN = 2 << 20
MAX_BLOCK = 2 << 30  # keeps every byte offset inside a block below 2^31
MIN_BLOCK = 64 << 20  # below this an allocation that fails is not retried smaller
# Counters per (step, block): differing words, first and last differing word, OR of flipped bits.
COUNTERS = 4
FIRST_NONE = 1 << 62
LAST_NONE = -1
_MASK64 = (1 << 64) - 1
_MASK32 = (1 << 32) - 1
# The random pattern's mixer: odd multipliers (each >= 2^31, so the GPU kernel reads every one
# as an unsigned 32-bit constant) and xor-shifts, each step a bijection of 32-bit words.
MIX = (0x9E3779B9, 0x85EBCA6B, 0xC2B2AE35, 0x846CA68B)
_SEED_BASE = 0x5EED6A1D


class StepKind(IntEnum):
    """How a step's words are computed (the GPU kernels' KIND)."""

    CONSTANT = 0
    ADDRESS = 1
    RANDOM = 2


def signed64(value: int) -> int:
    """A 64-bit word as the signed int64 that torch and Triton carry."""
    value &= _MASK64
    return value - (1 << 64) if value >= 1 << 63 else value


@dataclass(frozen=True, slots=True)
class Step:
    """One write-then-verify sweep over the whole tested memory."""

    pattern: MemoryPattern
    index: int  # within the pattern: the walking bit, 0/1 for address/complement, 0 for random
    kind: StepKind
    value: int  # signed int64: the constant, the address XOR mask, or the seed
    pass_index: int = 0

    @property
    def label(self) -> str:
        if self.pattern in (MemoryPattern.WALKING_ONES, MemoryPattern.WALKING_ZEROS):
            return f"{self.pattern} bit {self.index}"
        if self.pattern is MemoryPattern.ADDRESS:
            return "address complement" if self.index else "address"
        return f"{self.pattern} seed 0x{self.value & _MASK32:08x}"


def pattern_steps(pattern: MemoryPattern, pass_index: int = 0) -> list[Step]:
    """The steps of one pattern in one pass."""
    if pattern is MemoryPattern.WALKING_ONES:
        values = [(bit, 1 << bit) for bit in range(64)]
    elif pattern is MemoryPattern.WALKING_ZEROS:
        values = [(bit, ~(1 << bit)) for bit in range(64)]
    elif pattern is MemoryPattern.ADDRESS:
        return [
            Step(pattern, index, StepKind.ADDRESS, signed64(mask), pass_index)
            for index, mask in ((0, 0), (1, _MASK64))
        ]
    else:
        seed = (_SEED_BASE + pass_index * MIX[0]) & _MASK32
        return [Step(pattern, 0, StepKind.RANDOM, seed, pass_index)]
    return [Step(pattern, i, StepKind.CONSTANT, signed64(v), pass_index) for i, v in values]


def plan_steps(patterns: Sequence[MemoryPattern], passes: int) -> list[Step]:
    """Every step of every pass, in the order they run."""
    return [s for p in range(passes) for pattern in patterns for s in pattern_steps(pattern, p)]


@dataclass(frozen=True, slots=True)
class MemoryPlan:
    """What the memory check asks a backend for (from ChecksConfig.memory)."""

    patterns: tuple[MemoryPattern, ...]
    passes: int = 1
    coverage_fraction: float = 0.98
    reserve_bytes: int = 512 << 20

    @classmethod
    def from_config(cls, config: MemoryCheck) -> MemoryPlan:
        return cls(
            patterns=tuple(config.patterns),
            passes=config.passes,
            coverage_fraction=config.coverage_fraction,
            reserve_bytes=config.reserve_mib << 20,
        )

    @property
    def steps(self) -> list[Step]:
        return plan_steps(self.patterns, self.passes)

    def target_bytes(self, free_bytes: int) -> int:
        """Bytes to test on a GPU with `free_bytes` free: the stricter of the fraction and the
        reserve, in whole aligned blocks."""
        wanted = min(int(free_bytes * self.coverage_fraction), free_bytes - self.reserve_bytes)
        return max(wanted, 0) // BLOCK_ALIGN * BLOCK_ALIGN


def allocate(target_bytes: int, try_allocate: Callable[[int], str | None]) -> str | None:
    """Allocate `target_bytes` as blocks of at most MAX_BLOCK through `try_allocate(size)`, which
    returns None when it got the block and otherwise why not. A refused block is retried at half
    its size down to MIN_BLOCK; below that the rest is left untested. Returns why it was (None
    when everything was allocated)."""
    left, largest = target_bytes // BLOCK_ALIGN * BLOCK_ALIGN, MAX_BLOCK
    while left > 0:
        size = max(min(left, largest) // BLOCK_ALIGN, 1) * BLOCK_ALIGN
        refused = try_allocate(size)
        if refused is None:
            left -= size
        elif largest > MIN_BLOCK:
            largest = max(largest // 2, MIN_BLOCK)
        else:
            return f"{size_text(left)} could not be allocated ({refused})"
    return None


@dataclass(frozen=True, slots=True)
class Block:
    """One contiguous allocation of the tested memory."""

    address: int  # device (virtual) address of its first byte
    nbytes: int
    first_word: int  # global index of its first word

    @property
    def words(self) -> int:
        return self.nbytes // WORD


def layout(allocations: Sequence[tuple[int, int]]) -> list[Block]:
    """Blocks from (address, bytes) allocations, in order, with their global word indices."""
    blocks, first = [], 0
    for address, nbytes in allocations:
        blocks.append(Block(address, nbytes, first))
        first += nbytes // WORD
    return blocks


def locate(blocks: Sequence[Block], offset: int) -> tuple[int, int]:
    """(block, word in block) of a byte offset into the tested memory, taken modulo its size and
    rounded down to a word."""
    total = sum(b.nbytes for b in blocks)
    if total == 0:
        raise ValueError("no memory was tested")
    word = offset % total // WORD
    for position, block in enumerate(blocks):
        if word < block.first_word + block.words:
            return position, word - block.first_word
    raise AssertionError("unreachable: the offset was reduced modulo the total")


@dataclass(frozen=True, slots=True)
class Miscompare:
    """Words of one step that read back differently from what was written."""

    step: Step
    words: int
    first_address: int
    last_address: int
    first_offset: int  # bytes into the tested memory
    flipped_bits: int  # OR over the differing words of (read XOR written), unsigned
    blocks: int  # blocks with a differing word

    def describe(self, unit: str, tested_bytes: int) -> str:
        """`unit`: how the message names the unit ('GPU 3', a MIG instance by profile)."""
        where = (
            f"at 0x{self.first_address:x}"
            if self.words == 1
            else f"between 0x{self.first_address:x} and 0x{self.last_address:x}"
            + (f" (in {self.blocks} blocks)" if self.blocks > 1 else "")
        )
        return (
            f"{unit}: pattern {self.step.label} (pass {self.step.pass_index + 1}): "
            f"{self.words} word{'s' if self.words != 1 else ''} read back wrong {where}, "
            f"{size_text(self.first_offset)} into the {size_text(tested_bytes)} tested; "
            f"bits flipped 0x{self.flipped_bits:016x}"
        )


def size_text(nbytes: int) -> str:
    """'137.20 GiB', '64.00 MiB', '512 B'."""
    for shift, unit in ((30, "GiB"), (20, "MiB"), (10, "KiB")):
        if nbytes >= 1 << shift:
            return f"{nbytes / (1 << shift):.2f} {unit}"
    return f"{nbytes} B"


def miscompares(
    counters: Sequence[Sequence[int]], steps: Sequence[Step], blocks: Sequence[Block]
) -> list[Miscompare]:
    """The steps whose counters show differing words. `counters` holds one row of COUNTERS per
    (step, block), step-major; rows past the last step run may be absent."""
    found = []
    for position, step in enumerate(steps):
        rows = counters[position * len(blocks) : (position + 1) * len(blocks)]
        bad = [(blocks[i], row) for i, row in enumerate(rows) if row[0] > 0]
        if not bad:
            continue
        first_block, first_row = bad[0]
        last_block, last_row = bad[-1]
        flipped = 0
        for _, row in bad:
            flipped |= row[3] & _MASK64
        found.append(
            Miscompare(
                step=step,
                words=sum(row[0] for _, row in bad),
                first_address=first_block.address + first_row[1] * WORD,
                last_address=last_block.address + last_row[2] * WORD,
                first_offset=(first_block.first_word + first_row[1]) * WORD,
                flipped_bits=flipped,
                blocks=len(bad),
            )
        )
    return found


class MemoryFlip(BaseModel):
    """Test hook: flip one bit of the tested memory between a step's write and its verification
    (the first pass only). From the simulated backend's `memory-flip` fault, or on the real
    backend from GPUVAL_MEMORY_INJECT."""

    model_config = ConfigDict(alias_generator=camel, populate_by_name=True, extra="forbid")

    gpu: int = Field(default=0, ge=0, description="The GPU whose memory is flipped.")
    offset: int = Field(
        default=0, ge=0, description="Byte offset into the tested memory (modulo its size)."
    )
    bit: int = Field(default=0, ge=0, le=63, description="The bit of the 64-bit word flipped.")
    pattern: MemoryPattern = Field(
        default=MemoryPattern.RANDOM, description="The pattern during which it is flipped."
    )
    step: int = Field(
        default=0, ge=0, le=63, description="Which step of the pattern (walking: the bit)."
    )

    def step_position(self, steps: Sequence[Step]) -> int | None:
        """Where in `steps` (first pass) the flip happens; None when the plan lacks that step."""
        return next(
            (
                i
                for i, s in enumerate(steps)
                if s.pass_index == 0 and s.pattern is self.pattern and s.index == self.step
            ),
            None,
        )


def parse_flips(text: str, source: str) -> list[MemoryFlip]:
    """One flip or a list of them from JSON; a bad document raises ValueError naming `source`,
    the field and the value."""
    example = '{"gpu": 0, "offset": 4096, "bit": 3, "pattern": "random"}'
    try:
        document = json.loads(text)
    except ValueError as error:
        raise ValueError(f"{source} is not JSON ({error}); give e.g. {example}") from None
    items = document if isinstance(document, list) else [document]
    flips = []
    for position, item in enumerate(items):
        try:
            flips.append(MemoryFlip.model_validate(item))
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "(document)"
            if isinstance(document, list):
                where = f"[{position}].{where}"
            raise ValueError(
                f"{source} is invalid: {where}: {first['msg']} (got {first.get('input')!r}); "
                f"give e.g. {example}"
            ) from None
    return flips


@dataclass(frozen=True, slots=True)
class MemoryProgress:
    """Reported after each step per GPU."""

    gpu: int
    steps_done: int
    steps_total: int
    label: str
    gbps: float


MemoryProgressCallback = Callable[[MemoryProgress], None]


@dataclass(slots=True)
class MemoryMeasurement:
    """One GPU's memory test."""

    gpu: int
    total_bytes: int = 0
    free_bytes: int = 0  # free when the test started
    tested_bytes: int = 0
    blocks: int = 0
    steps_done: int = 0
    steps_planned: int = 0
    seconds: float = 0.0  # GPU time of the steps run (writes and verifications)
    seconds_by_pattern: dict[str, float] = field(default_factory=dict)
    steps_by_pattern: dict[str, int] = field(default_factory=dict)
    miscompares: list[Miscompare] = field(default_factory=list)
    # Why less than the plan's share was tested (an allocation refused): never a memory fault.
    shortfall: str | None = None
    error: str | None = None

    def add_step(self, step: Step, seconds: float) -> None:
        """Count one step run (its GPU time)."""
        name = str(step.pattern)
        self.steps_done += 1
        self.seconds += seconds
        self.seconds_by_pattern[name] = self.seconds_by_pattern.get(name, 0.0) + seconds
        self.steps_by_pattern[name] = self.steps_by_pattern.get(name, 0) + 1

    @property
    def gbps(self) -> float:
        """Memory tested per second: every tested byte written once and read once per step."""
        if self.seconds <= 0:
            return 0.0
        return self.steps_done * self.tested_bytes / self.seconds / 1e9

    def pattern_gbps(self, pattern: str) -> float | None:
        seconds = self.seconds_by_pattern.get(pattern, 0.0)
        if seconds <= 0:
            return None
        return self.steps_by_pattern.get(pattern, 0) * self.tested_bytes / seconds / 1e9


def flip_json(flips: Sequence[MemoryFlip]) -> str:
    """The GPUVAL_MEMORY_INJECT document for `flips`."""
    return json.dumps([f.model_dump(by_alias=True, mode="json") for f in flips])


# The CPU reference of the GPU kernels (numpy; used by the simulated backend and the tests).


def reference_words(step: Step, block: Block) -> npt.NDArray[np.uint64]:
    """The words `step` writes into `block`, as the GPU kernels compute them."""
    import numpy as np  # noqa: PLC0415 - see the TYPE_CHECKING import

    offsets = np.arange(block.words, dtype=np.uint64)
    return words_at(
        step,
        np.uint64(block.address) + offsets * np.uint64(WORD),
        np.uint64(block.first_word) + offsets,
    )


def words_at(
    step: Step, addresses: npt.NDArray[np.uint64], indices: npt.NDArray[np.uint64]
) -> npt.NDArray[np.uint64]:
    """The words `step` writes at these device addresses, whose global word indices these are."""
    import numpy as np  # noqa: PLC0415 - see the TYPE_CHECKING import

    if step.kind is StepKind.CONSTANT:
        return np.full(addresses.shape, step.value & _MASK64, dtype=np.uint64)
    if step.kind is StepKind.ADDRESS:
        return addresses ^ np.uint64(step.value & _MASK64)
    return mix(indices, step.value & _MASK32)


def mix(index: npt.NDArray[np.uint64], seed: int) -> npt.NDArray[np.uint64]:
    """The random pattern's word for each global word index (uint32 arithmetic, wrapping)."""
    import numpy as np  # noqa: PLC0415 - see the TYPE_CHECKING import

    low = (index & np.uint64(_MASK32)).astype(np.uint32)
    high = (index >> np.uint64(32)).astype(np.uint32)
    k0, k1, k2, k3 = (np.uint32(k) for k in MIX)
    x = low ^ np.uint32(seed) ^ (high * k0)
    x = x * k1
    x ^= x >> np.uint32(13)
    x = x * k2
    x ^= x >> np.uint32(16)
    y = x * k3
    y ^= y >> np.uint32(15)
    return (y.astype(np.uint64) << np.uint64(32)) | x.astype(np.uint64)


def compare_words(
    read: npt.NDArray[np.uint64], expected: npt.NDArray[np.uint64]
) -> tuple[int, int, int, int]:
    """The verification kernel's counters for one block: (differing words, first, last, OR of
    flipped bits as signed int64)."""
    import numpy as np  # noqa: PLC0415 - see the TYPE_CHECKING import

    flipped = read ^ expected
    bad = np.flatnonzero(flipped)
    if bad.size == 0:
        return 0, FIRST_NONE, LAST_NONE, 0
    ored = int(np.bitwise_or.reduce(flipped[bad]))
    return int(bad.size), int(bad[0]), int(bad[-1]), signed64(ored)
