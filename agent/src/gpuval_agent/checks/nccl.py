"""NCCL all-reduce between the node's GPUs over a size sweep (nccl-tests' algbw/busbw)."""

from __future__ import annotations

from gpuval_agent.allreduce import bus_bandwidth
from gpuval_agent.checks.common import CheckBuilder, CheckContext
from gpuval_api import Reason, Verdict
from gpuval_api.result import CheckResult, NcclSize

_LOG_TAIL_CHARS = 8000
# The size from which the part's expected busbw (shared/targets.md: 1 GiB and 4 GiB) applies.
EXPECTED_AT_BYTES = 1 << 30


def sweep_sizes(min_bytes: int, max_bytes: int) -> list[int]:
    """Doubling sizes from min to max, always ending at max; each a multiple of 4 (float32)."""
    sizes: list[int] = []
    size = min_bytes
    while size < max_bytes:
        sizes.append(size - size % 4)
        size *= 2
    sizes.append(max_bytes - max_bytes % 4)
    return sorted({s for s in sizes if s >= 4})


def run_nccl(context: CheckContext) -> CheckResult:
    builder = CheckBuilder("nccl", context)
    config = context.config.nccl
    gpus = context.usable_gpus
    context.note_excluded(builder)
    if len(gpus) < 2:
        return builder.finish(
            message=f"skipped: all-reduce needs 2 or more usable GPUs, this node has {len(gpus)}",
            verdict=Verdict.SKIPPED,
        )
    sizes = sweep_sizes(config.min_bytes, config.max_bytes)
    context.reporter.check_progress(
        "nccl", None, f"all-reduce on {len(gpus)} GPUs, {len(sizes)} sizes"
    )
    outcome = context.backend.all_reduce(gpus, sizes, config.iterations, config.timeout_seconds)
    if outcome.log_tail:
        builder.log_tail = outcome.log_tail[-_LOG_TAIL_CHARS:]
    if outcome.timed_out:
        builder.add(
            Reason.NCCL_TIMEOUT,
            f"all-reduce on {len(gpus)} GPUs did not finish within {config.timeout_seconds:.0f} s "
            f"(nccl.timeoutSeconds); NCCL_DEBUG=INFO output kept in logTail",
        )
    elif outcome.error is not None:
        builder.add(Reason.NCCL_ERROR, f"all-reduce on {len(gpus)} GPUs failed: {outcome.error}")
    for measured in outcome.sizes:
        algbw = measured.bytes / measured.seconds / 1e9 if measured.seconds > 0 else 0.0
        builder.nccl_sizes.append(
            NcclSize(
                bytes=measured.bytes,
                time_seconds=measured.seconds,
                algbw_gbps=round(algbw, 3),
                busbw_gbps=round(bus_bandwidth(algbw, len(gpus)), 3),
            )
        )
    if builder.nccl_sizes and not outcome.timed_out and outcome.error is None:
        largest = max(builder.nccl_sizes, key=lambda s: s.bytes)
        builder.metrics["busbwGBps"] = largest.busbw_gbps
        builder.metrics["bytes"] = largest.bytes
        # The part's expected figure is a large-message one: below 1 GiB, latency keeps busbw
        # under it on a healthy node, so only an absolute minimum applies there.
        expected = context.part.nccl_busbw_gbps if largest.bytes >= EXPECTED_AT_BYTES else None
        minimum = config.min_busbw_gbps.minimum(expected)
        if minimum is not None and largest.busbw_gbps < minimum:
            builder.add(
                Reason.NCCL_LOW_BUSBW,
                f"all-reduce busbw {largest.busbw_gbps:.1f} GB/s at {largest.bytes} bytes on "
                f"{len(gpus)} GPUs, below the minimum {minimum:.1f} (nccl.minBusbwGBps)",
            )
        if not builder.failed:
            builder.log_tail = None
            return builder.finish(
                message=f"busbw {largest.busbw_gbps:.1f} GB/s at {largest.bytes >> 20} MiB"
            )
    return builder.finish()
