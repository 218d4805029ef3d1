"""The memory test's GPU kernels (Triton; imported only where GPUs are, by
backends/torch/memtest.py).

Two kernels per step kind (gpuval_agent.memtest.StepKind, a compile-time constant): `fill`
writes every word of one block, `check` reads every word back, regenerates what was written and
counts the differences into the (step, block) slot of an int64 counters array: differing words,
first and last differing word, OR of the flipped bits (the semantics and their numpy reference:
gpuval_agent.memtest). Each kernel is one streaming pass over the block, 8 bytes a word moved
once, so both run at the memory's bandwidth; the random words are computed in registers with
32-bit multiplies and shifts, never stored a second time.

A program walks the block in tiles of TILE words, NPROG programs striding over it; a block is a
whole number of tiles (gpuval_agent.memtest.BLOCK_ALIGN), so no tile needs a mask and loads and
stores are 16-byte vectors. The step's value and the block's address and first word come from
small device tables, so the integer arguments that change between launches (step, block, slot)
are never specialised on and one compiled kernel serves every launch of its kind.
"""

from __future__ import annotations

import triton  # type: ignore[import-not-found,unused-ignore]
import triton.language as tl  # type: ignore[import-not-found,unused-ignore]

from gpuval_agent.memtest import MIX

TILE = 4096
# Globals a Triton kernel reads must be constexpr.
_K0, _K1, _K2, _K3 = (tl.constexpr(k) for k in MIX)


@triton.jit  # type: ignore[untyped-decorator,unused-ignore]
def _word(offs, value, address, first_word, KIND: tl.constexpr, TILE: tl.constexpr):  # type: ignore[no-untyped-def]  # noqa: N803, PLR0917 - Triton's constexpr spelling; positional tiles
    if KIND == 0:
        word = tl.zeros([TILE], dtype=tl.int64) + value
    elif KIND == 1:
        word = (address + offs.to(tl.int64) * 8) ^ value
    else:
        index = first_word + offs.to(tl.int64)
        x = index.to(tl.uint32) ^ value.to(tl.uint32) ^ ((index >> 32).to(tl.uint32) * _K0)
        x = x * _K1
        x = x ^ (x >> 13)
        x = x * _K2
        x = x ^ (x >> 16)
        y = x * _K3
        y = y ^ (y >> 15)
        word = ((y.to(tl.uint64) << 32) | x.to(tl.uint64)).to(tl.int64, bitcast=True)
    return word


@triton.jit  # type: ignore[untyped-decorator,unused-ignore]
def _step_and_block(values_ptr, step, blocks_ptr, block):  # type: ignore[no-untyped-def]
    """The step's value, and the block's device address and global index of its first word."""
    value = tl.load(values_ptr + step)
    return value, tl.load(blocks_ptr + 2 * block), tl.load(blocks_ptr + 2 * block + 1)


@triton.jit(do_not_specialize=["step", "block"])  # type: ignore[untyped-decorator,unused-ignore]
def fill(  # type: ignore[no-untyped-def]  # noqa: PLR0917 - Triton kernels take positional pointers
    ptr,
    n,
    values_ptr,
    step,
    blocks_ptr,
    block,
    KIND: tl.constexpr,  # noqa: N803
    TILE: tl.constexpr,  # noqa: N803
    NPROG: tl.constexpr,  # noqa: N803
):
    value, address, first_word = _step_and_block(values_ptr, step, blocks_ptr, block)
    for start in range(tl.program_id(0) * TILE, n, NPROG * TILE):
        offs = start + tl.arange(0, TILE)
        tl.store(ptr + offs, _word(offs, value, address, first_word, KIND, TILE))


@triton.jit  # type: ignore[untyped-decorator,unused-ignore]
def _or(a, b):  # type: ignore[no-untyped-def]
    return a | b


@triton.jit(do_not_specialize=["step", "block", "slot"])  # type: ignore[untyped-decorator,unused-ignore]
def check(  # type: ignore[no-untyped-def]  # noqa: PLR0917 - Triton kernels take positional pointers
    ptr,
    n,
    values_ptr,
    step,
    blocks_ptr,
    block,
    counters_ptr,
    slot,
    KIND: tl.constexpr,  # noqa: N803
    TILE: tl.constexpr,  # noqa: N803
    NPROG: tl.constexpr,  # noqa: N803
):
    value, address, first_word = _step_and_block(values_ptr, step, blocks_ptr, block)
    count = tl.zeros([TILE], dtype=tl.int32)
    first = tl.zeros([TILE], dtype=tl.int32) + n
    last = tl.zeros([TILE], dtype=tl.int32) - 1
    flipped = tl.zeros([TILE], dtype=tl.int64)
    for start in range(tl.program_id(0) * TILE, n, NPROG * TILE):
        offs = start + tl.arange(0, TILE)
        diff = tl.load(ptr + offs) ^ _word(offs, value, address, first_word, KIND, TILE)
        bad = diff != 0
        count += bad.to(tl.int32)
        first = tl.minimum(first, tl.where(bad, offs, n))
        last = tl.where(bad, offs, last)
        flipped = flipped | diff
    total = tl.sum(count, axis=0)
    if total > 0:
        out = counters_ptr + slot * 4
        tl.atomic_add(out, total.to(tl.int64))
        tl.atomic_min(out + 1, tl.min(first, axis=0).to(tl.int64))
        tl.atomic_max(out + 2, tl.max(last, axis=0).to(tl.int64))
        tl.atomic_or(out + 3, tl.reduce(flipped, 0, _or))
