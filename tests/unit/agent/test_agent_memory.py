"""The memory check: its plan, layout and counters (pure), the numpy reference of the GPU kernels,
and the check's verdicts against the simulated backend (flipped words, memory held elsewhere)."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

from gpuval_agent.backends.cuda import _memory_flips
from gpuval_agent.backends.simulated.backend import SimulatedBackend, SimulationConfig
from gpuval_agent.cli import build_parser, config_from_args
from gpuval_agent.errors import AgentError
from gpuval_agent.memtest import (
    BLOCK_ALIGN,
    FIRST_NONE,
    LAST_NONE,
    MAX_BLOCK,
    MIN_BLOCK,
    Block,
    MemoryFlip,
    MemoryPlan,
    StepKind,
    allocate,
    compare_words,
    layout,
    locate,
    miscompares,
    mix,
    parse_flips,
    pattern_steps,
    plan_steps,
    reference_words,
)
from gpuval_agent.runner import run_checks
from gpuval_api.checks import CheckName, ChecksConfig, MemoryPattern, parse_checks
from gpuval_api.env import AgentEnv
from gpuval_api.reasons import Reason, Severity
from gpuval_api.result import AgentResult, CheckResult, Verdict
from tests.unit.agent.test_agent_checks import Recorder

GIB = 1 << 30
ALL = list(MemoryPattern)


# The plan ------------------------------------------------------------------------------------


def test_a_pass_of_every_pattern_is_131_steps_in_the_configured_order() -> None:
    steps = plan_steps(ALL, passes=1)
    assert len(steps) == 64 + 64 + 2 + 1
    assert [s.label for s in steps[:2]] == ["walking-ones bit 0", "walking-ones bit 1"]
    assert steps[64].label == "walking-zeros bit 0"
    assert [s.label for s in steps[128:130]] == ["address", "address complement"]
    assert steps[130].label.startswith("random seed 0x")
    assert [s.pass_index for s in plan_steps(ALL, passes=2)].count(1) == 131


def test_walking_patterns_hold_one_bit_set_or_one_bit_clear_as_signed_int64() -> None:
    ones = pattern_steps(MemoryPattern.WALKING_ONES)
    zeros = pattern_steps(MemoryPattern.WALKING_ZEROS)
    assert [s.value & (2**64 - 1) for s in ones] == [1 << b for b in range(64)]
    assert [s.value & (2**64 - 1) for s in zeros] == [(2**64 - 1) ^ (1 << b) for b in range(64)]
    assert ones[63].value == -(2**63)  # what torch and Triton carry for the top bit
    assert all(s.kind is StepKind.CONSTANT for s in ones + zeros)


def test_each_pass_draws_new_random_words() -> None:
    seeds = {pattern_steps(MemoryPattern.RANDOM, p)[0].value for p in range(5)}
    assert len(seeds) == 5


@pytest.mark.parametrize(
    ("free", "fraction", "reserve", "expected"),
    [
        (140 * GIB, 0.98, 512 << 20, int(140 * GIB * 0.98) // BLOCK_ALIGN * BLOCK_ALIGN),
        (140 * GIB, 1.0, 512 << 20, 140 * GIB - (512 << 20)),
        (10 << 20, 0.98, 512 << 20, 0),
    ],
)
def test_the_tested_share_is_the_stricter_of_fraction_and_reserve_in_whole_blocks(
    free: int, fraction: float, reserve: int, expected: int
) -> None:
    plan = MemoryPlan(tuple(ALL), coverage_fraction=fraction, reserve_bytes=reserve)
    assert plan.target_bytes(free) == expected
    assert expected % BLOCK_ALIGN == 0


# Allocation and layout -------------------------------------------------------------------------


def test_allocation_takes_the_target_in_blocks_of_at_most_2_gib() -> None:
    sizes: list[int] = []

    def one(size: int) -> str | None:
        sizes.append(size)
        return None

    shortfall = allocate(5 * GIB, one)
    assert shortfall is None
    assert sizes == [MAX_BLOCK, MAX_BLOCK, GIB]


def test_a_refused_allocation_is_retried_smaller_then_the_rest_is_named_untested() -> None:
    room = [3 * GIB + (100 << 20)]  # what the GPU still gives

    def one(size: int) -> str | None:
        if size > room[0]:
            return "CUDA out of memory"
        room[0] -= size
        return None

    shortfall = allocate(8 * GIB, one)
    assert shortfall is not None and "CUDA out of memory" in shortfall
    assert "could not be allocated" in shortfall
    assert room[0] < MIN_BLOCK  # every smaller block that fitted was taken


def test_locate_maps_a_byte_offset_to_its_block_and_word_modulo_the_tested_size() -> None:
    blocks = layout([(0x1000_0000, 4 << 20), (0x9000_0000, 2 << 20)])
    assert blocks[1].first_word == (4 << 20) // 8
    assert locate(blocks, 0) == (0, 0)
    assert locate(blocks, (4 << 20) - 1) == (0, (4 << 20) // 8 - 1)
    assert locate(blocks, 4 << 20) == (1, 0)
    assert locate(blocks, (6 << 20) + 16) == (0, 2)


# Counters -> findings ----------------------------------------------------------------------


def _rows(steps: int, blocks: int) -> list[list[int]]:
    return [[0, FIRST_NONE, LAST_NONE, 0] for _ in range(steps * blocks)]


def test_counters_name_the_step_the_address_range_and_the_flipped_bits() -> None:
    blocks = layout([(0x7F00_0000_0000, 2 << 20), (0x7F00_0040_0000, 2 << 20)])
    steps = plan_steps([MemoryPattern.ADDRESS], 1)
    rows = _rows(len(steps), len(blocks))
    rows[1 * 2 + 0] = [1, 5, 5, 1 << 3]  # step 1 (complement), block 0, word 5
    rows[1 * 2 + 1] = [2, 0, 9, -(2**63)]  # and block 1, words 0..9, the top bit
    (found,) = miscompares(rows, steps, blocks)
    assert found.step.label == "address complement"
    assert found.words == 3 and found.blocks == 2
    assert found.first_address == 0x7F00_0000_0000 + 5 * 8
    assert found.last_address == 0x7F00_0040_0000 + 9 * 8
    assert found.flipped_bits == (1 << 63) | (1 << 3)
    text = found.describe("GPU 3", tested_bytes=4 << 20)
    assert "GPU 3: pattern address complement (pass 1): 3 words read back wrong between" in text
    assert "0x7f0000000028 and 0x7f0000400048 (in 2 blocks)" in text
    assert "bits flipped 0x8000000000000008" in text


def test_clean_counters_and_steps_never_run_give_no_finding() -> None:
    blocks = layout([(0x1000, 2 << 20)])
    steps = plan_steps(ALL, 1)
    assert miscompares(_rows(len(steps), 1), steps, blocks) == []
    assert miscompares(_rows(3, 1), steps, blocks) == []  # stopped after 3 steps


# The numpy reference of the GPU kernels -------------------------------------------------------


def _mix_by_hand(index: int, seed: int) -> int:
    """The random pattern's definition in plain Python integers (independent of numpy)."""
    m = 0xFFFFFFFF
    low, high = index & m, index >> 32
    x = low ^ seed ^ (high * 0x9E3779B9 & m)
    x = x * 0x85EBCA6B & m
    x ^= x >> 13
    x = x * 0xC2B2AE35 & m
    x ^= x >> 16
    y = x * 0x846CA68B & m
    y ^= y >> 15
    return y << 32 | x


def test_random_words_follow_their_definition_across_the_32_bit_index_boundary() -> None:
    indices = [0, 1, 2**31, 2**32 - 1, 2**32, 2**32 + 7, 17 * 2**30 + 12345]
    got = mix(np.array(indices, dtype=np.uint64), 0x5EED6A1D)
    assert [int(v) for v in got] == [_mix_by_hand(i, 0x5EED6A1D) for i in indices]


def test_random_words_differ_word_to_word_and_seed_to_seed() -> None:
    index = np.arange(1 << 16, dtype=np.uint64)
    first, second = mix(index, 1), mix(index, 2)
    assert len(np.unique(first)) == 1 << 16
    assert not np.any(first == second)
    ones = np.unpackbits(first.view(np.uint8)).mean()
    assert 0.49 < ones < 0.51  # half the bits set: both states of every cell are exercised


def test_address_words_hold_their_own_address_then_its_complement() -> None:
    block = Block(address=0x7F12_3456_0000, nbytes=BLOCK_ALIGN, first_word=0)
    plain, complement = pattern_steps(MemoryPattern.ADDRESS)
    words = reference_words(plain, block)
    assert int(words[0]) == block.address and int(words[10]) == block.address + 80
    assert np.array_equal(reference_words(complement, block), ~words)


def test_the_comparison_counts_first_last_and_every_flipped_bit() -> None:
    block = Block(address=0x1000, nbytes=BLOCK_ALIGN, first_word=1 << 33)
    expected = reference_words(pattern_steps(MemoryPattern.RANDOM)[0], block)
    assert compare_words(expected.copy(), expected) == (0, FIRST_NONE, LAST_NONE, 0)
    read = expected.copy()
    read[7] ^= np.uint64(1 << 63)
    read[70000] ^= np.uint64(0b101)
    assert compare_words(read, expected) == (2, 7, 70000, -(2**63) | 0b101)


# The test hook --------------------------------------------------------------------------------


def test_flips_parse_from_one_object_or_a_list_and_bad_input_names_the_field() -> None:
    (one,) = parse_flips('{"gpu": 1, "offset": 4096, "bit": 63, "pattern": "address"}', "X")
    assert (one.gpu, one.offset, one.bit, one.pattern) == (1, 4096, 63, MemoryPattern.ADDRESS)
    assert len(parse_flips('[{"bit": 1}, {"bit": 2}]', "X")) == 2
    with pytest.raises(ValueError, match=r"GPUVAL_MEMORY_INJECT is invalid: bit: .*64"):
        parse_flips('{"bit": 64}', "GPUVAL_MEMORY_INJECT")


def test_the_cuda_backend_reads_its_flips_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(AgentEnv.MEMORY_INJECT, raising=False)
    assert _memory_flips() == []
    monkeypatch.setenv(AgentEnv.MEMORY_INJECT, '{"pattern": "walking-ones", "step": 9}')
    assert _memory_flips() == [MemoryFlip(pattern=MemoryPattern.WALKING_ONES, step=9)]
    monkeypatch.setenv(AgentEnv.MEMORY_INJECT, '{"pattern": "stripes"}')
    with pytest.raises(AgentError, match="GPUVAL_MEMORY_INJECT is invalid: pattern"):
        _memory_flips()


# Configuration --------------------------------------------------------------------------------


def test_the_memory_check_is_not_in_the_default_run_and_checks_memory_runs_it_alone() -> None:
    assert CheckName.MEMORY not in ChecksConfig().enabled()
    args = build_parser().parse_args(["run", "--checks", "memory"])
    assert config_from_args(args).enabled() == [CheckName.MEMORY]


def test_a_pattern_named_twice_is_refused_with_its_name() -> None:
    with pytest.raises(ValueError, match="names address more than once"):
        parse_checks('{"memory": {"patterns": ["address", "random", "address"]}}')


# The check on the simulated backend -----------------------------------------------------------


def _run(simulation: dict[str, object], memory: str = "{}", **kwargs: object) -> AgentResult:
    document = {"timeScale": 0.0, "gpus": 2} | simulation
    backend = SimulatedBackend(SimulationConfig.parse(json.dumps(document)))
    config = parse_checks(f'{{"memory": {memory}}}').only([CheckName.MEMORY])
    return run_checks(config, backend, Recorder(), sample_interval=0.01, **kwargs)  # type: ignore[arg-type]


def _memory(result: AgentResult) -> CheckResult:
    check = result.check(CheckName.MEMORY)
    assert check is not None
    return check


def test_a_healthy_simulated_gpu_passes_with_nearly_all_its_memory_covered() -> None:
    result = _run({})
    memory = _memory(result)
    assert result.verdict is Verdict.PASSED and memory.verdict is Verdict.PASSED
    assert memory.findings == []
    assert "every word verified, none differed" in memory.message
    for gpu in memory.gpus:
        assert gpu.metrics["memoryCoveredFraction"] > 0.95
        assert gpu.metrics["memorySteps"] == 131
        assert gpu.metrics["memoryBadWords"] == 0
        assert gpu.metrics["memoryTestGBps"] > 1000
    assert memory.metrics["stepsPerPass"] == 131


@pytest.mark.parametrize(
    ("pattern", "step", "offset", "bit", "label"),
    [
        ("walking-ones", 0, 0, 0, "walking-ones bit 0"),
        ("walking-ones", 63, 8 * GIB + 8, 63, "walking-ones bit 63"),
        ("walking-zeros", 17, 100 * GIB + 4096, 17, "walking-zeros bit 17"),
        ("address", 0, 2 * GIB, 31, "address"),
        ("address", 1, 2 * GIB - 8, 40, "address complement"),
        ("random", 0, 123_456_789_000, 5, "random seed 0x"),
    ],
)
def test_a_flipped_bit_fails_its_gpu_naming_the_pattern_the_address_and_the_bit(
    pattern: str, step: int, offset: int, bit: int, label: str
) -> None:
    fault = {"kind": "memory-flip", "gpu": 1, "pattern": pattern, "step": step}
    result = _run({"faults": [fault | {"offset": offset, "bit": bit}]})
    memory = _memory(result)
    assert result.verdict is Verdict.FAILED and memory.reason is Reason.MEMORY_MISCOMPARE
    (finding,) = memory.findings
    assert finding.gpu == 1 and finding.severity is Severity.ERROR
    assert f"GPU 1: pattern {label}" in finding.message
    assert "1 word read back wrong at 0x" in finding.message
    assert f"bits flipped 0x{1 << bit:016x}" in finding.message
    address = int(finding.message.split("wrong at ")[1].split(",")[0], 16)
    # The simulated blocks are contiguous from their base: the address is base + offset.
    assert address == 0x7F2A00000000 + offset
    verdicts = {g.index: g.verdict for g in memory.gpus}
    assert verdicts == {0: Verdict.PASSED, 1: Verdict.FAILED}
    assert next(g for g in memory.gpus if g.index == 1).metrics["memoryBadWords"] == 1


def test_a_flip_in_a_pattern_the_plan_leaves_out_is_not_seen() -> None:
    fault = {"kind": "memory-flip", "pattern": "random"}
    result = _run({"faults": [fault]}, '{"patterns": ["walking-ones"]}')
    assert result.verdict is Verdict.PASSED


def test_memory_held_elsewhere_is_a_warning_naming_what_was_covered_never_a_failure() -> None:
    result = _run({"faults": [{"kind": "memory-held", "gpu": 0, "factor": 0.5}]})
    memory = _memory(result)
    assert result.verdict is Verdict.PASSED and memory.verdict is Verdict.PASSED
    (finding,) = memory.findings
    assert finding.reason is Reason.MEMORY_PARTLY_COVERED
    assert finding.severity is Severity.WARNING and finding.gpu == 0
    assert "GPU 0: tested " in finding.message and "of 140.40 GiB" in finding.message
    assert "could not be allocated (CUDA out of memory" in finding.message
    coverage = next(g for g in memory.gpus if g.index == 0).metrics["memoryCoveredFraction"]
    assert 0.4 < coverage < 0.5


def test_a_gpu_whose_memory_is_all_held_elsewhere_is_skipped_not_failed() -> None:
    faults = [{"kind": "memory-held", "gpu": g, "factor": 1.0} for g in (0, 1)]
    result = _run({"faults": faults})
    memory = _memory(result)
    assert memory.verdict is Verdict.SKIPPED
    assert result.verdict is Verdict.PASSED
    assert {f.reason for f in memory.findings} == {Reason.MEMORY_PARTLY_COVERED}
    assert "nothing was tested" in memory.message


def test_two_passes_run_every_step_twice_and_find_a_flip_of_the_first() -> None:
    fault = {"kind": "memory-flip", "gpu": 0, "pattern": "walking-zeros", "step": 3}
    result = _run({"faults": [fault]}, '{"passes": 2}')
    memory = _memory(result)
    assert next(g for g in memory.gpus if g.index == 0).metrics["memorySteps"] == 262
    assert "pattern walking-zeros bit 3 (pass 1)" in memory.message


def test_a_stopped_memory_test_is_never_passed() -> None:
    stop = threading.Event()
    stop.set()
    result = _run({}, stop=stop)
    assert result.verdict is Verdict.FAILED and result.reason is Reason.AGENT_STOPPED


def test_progress_reaches_the_reporter_with_the_step_and_its_speed() -> None:
    seen: list[tuple[str, float | None, str]] = []

    class Progress(Recorder):
        def check_progress(self, name: str, fraction: float | None, detail: str) -> None:
            seen.append((name, fraction, detail))

    backend = SimulatedBackend(SimulationConfig.parse('{"gpus": 1, "timeScale": 0}'))
    run_checks(ChecksConfig().only([CheckName.MEMORY]), backend, Progress(), sample_interval=0.01)
    assert seen[-1][0] == "memory" and seen[-1][1] == 1.0
    assert "random seed" in seen[-1][2] and "step 131/131" in seen[-1][2]
    assert "GB/s" in seen[-1][2]
