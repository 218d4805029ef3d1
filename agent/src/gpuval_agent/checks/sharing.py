"""What another process on a GPU does to a load check's result. Pure.

A GPU found busy as the check started was left out of it; one found busy while it ran has its
findings that speak of speed or of a failed run (LowThroughput, LowTrainingThroughput,
LowBandwidth, NCCL's, CheckError: its figures, and an out-of-memory that the other process's
memory caused) set aside. Both get GpuInUse (class NotRun) naming the process, whatever the
figures say. Evidence that another process cannot produce stands: wrong results, temperatures,
XIDs, the PCIe link. The driver check's CUDA initialisation is watched too: a GPU another process
used while it ran is shared, and the run did not have it alone (`mark_shared_init`).
"""

from __future__ import annotations

from collections.abc import Mapping

from gpuval_agent.checks.common import judge_findings
from gpuval_agent.inuse import Busy, describe, is_out_of_memory
from gpuval_api import REASONS, Reason, Verdict
from gpuval_api.result import CheckResult, Finding, GpuCheckResult, GpuOccupant, InUseWhen

# Findings a process sharing the GPU explains: its load slows ours, its memory starves ours.
DISTURBED = frozenset(
    {
        Reason.LOW_THROUGHPUT,
        Reason.LOW_TRAINING_THROUGHPUT,
        Reason.LOW_BANDWIDTH,
        Reason.NCCL_LOW_BUSBW,
        Reason.NCCL_TIMEOUT,
        Reason.NCCL_ERROR,
        Reason.CHECK_ERROR,
    }
)


def occupants(busy: Busy, when: InUseWhen) -> list[GpuOccupant]:
    """The busy GPU's processes as the result document records them."""
    if not busy.processes:
        return [GpuOccupant(gpu=busy.gpu, when=when, exact=busy.exact)]
    return [
        GpuOccupant(
            gpu=busy.gpu,
            when=when,
            pid=p.pid,
            name=p.name,
            used_memory_bytes=p.used_memory_bytes,
            sm_percent=p.sm_percent,
            exact=busy.exact,
        )
        for p in busy.processes
    ]


def _in_use(gpu: int, text: str) -> Finding:
    return Finding(
        reason=Reason.GPU_IN_USE, gpu=gpu, message=text, hint=REASONS[Reason.GPU_IN_USE].hint
    )


def _disturbed(finding: Finding, during: Mapping[int, Busy]) -> bool:
    # CUDA that could not make a context for lack of memory beside another's is its doing too.
    starved = finding.reason is Reason.CUDA_INIT_FAILED and is_out_of_memory(finding.message)
    if (finding.reason not in DISTURBED and not starved) or not during:
        return False
    if finding.gpu is None and finding.peer is None:
        return True  # a node-wide figure (NCCL) with one of its GPUs shared
    return finding.gpu in during or finding.peer in during


def mark_in_use(
    result: CheckResult, before: Mapping[int, Busy], during: Mapping[int, Busy]
) -> CheckResult:
    """`result` with the busy GPUs' GpuInUse (module docstring); unchanged when none was."""
    during = {gpu: busy for gpu, busy in during.items() if gpu not in before}
    if not before and not during:
        return result
    check = result.name
    aside = sorted({str(f.reason) for f in result.findings if _disturbed(f, during)})
    added = [
        _in_use(gpu, f"GPU {gpu} is in use by {describe(busy)}: the {check} check left it out")
        for gpu, busy in sorted(before.items())
    ]
    set_aside = f" (set aside: {', '.join(aside)})" if aside else ""
    added += [
        _in_use(
            gpu,
            f"GPU {gpu} was used by {describe(busy)} while the {check} check ran: its figures "
            f"from it are no evidence{set_aside}",
        )
        for gpu, busy in sorted(during.items())
    ]
    seen = [o for gpu in sorted(before) for o in occupants(before[gpu], InUseWhen.BEFORE)]
    seen += [o for gpu in sorted(during) for o in occupants(during[gpu], InUseWhen.DURING)]
    return _marked(result, added, during, seen)


def mark_shared_init(
    result: CheckResult, baseline: Mapping[int, Busy], seen: Mapping[int, Busy]
) -> CheckResult:
    """The driver check's result with GpuInUse for each GPU another process used while it
    initialised CUDA, beyond those the snapshot before it found (the load checks leave those
    out): such a GPU is shared (two agents started at once, a time-sliced GPU's other tenant),
    so the run did not have it alone, whatever its later figures say. An error such a process
    explains (CUDA out of memory) is set aside as in a load check."""
    shared = {gpu: busy for gpu, busy in seen.items() if gpu not in baseline}
    if not shared:
        return result
    added = [
        _in_use(
            gpu,
            f"GPU {gpu} was used by {describe(busy)} while the driver check initialised CUDA "
            "on it: the GPU is shared, so this run did not have it alone",
        )
        for gpu, busy in sorted(shared.items())
    ]
    found = [o for gpu in sorted(shared) for o in occupants(shared[gpu], InUseWhen.DURING)]
    return _marked(result, added, shared, found)


def _marked(
    result: CheckResult,
    added: list[Finding],
    during: Mapping[int, Busy],
    seen: list[GpuOccupant],
) -> CheckResult:
    """`result` with the GpuInUse findings `added`, the findings the processes `during` explain
    set aside, the per-GPU verdicts judged again and the processes recorded."""
    kept = [f for f in result.findings if not _disturbed(f, during)]
    findings = added + kept
    verdict, first = judge_findings(findings)
    gpus = [_regpu(g, findings) for g in result.gpus]
    known = {g.index for g in gpus}
    untested = sorted({f.gpu for f in added if f.gpu is not None})
    gpus += [
        GpuCheckResult(index=gpu, verdict=Verdict.NOT_RUN, reason=Reason.GPU_IN_USE)
        for gpu in untested
        if gpu not in known
    ]
    marked = result.model_copy(deep=True)
    marked.verdict = verdict
    marked.reason = first.reason if first else None
    marked.hint = first.hint if first else None
    marked.message = first.message if first else result.message
    marked.findings = findings
    marked.gpus = sorted(gpus, key=lambda g: g.index)
    marked.occupants += seen
    return marked


def _regpu(gpu: GpuCheckResult, findings: list[Finding]) -> GpuCheckResult:
    verdict, first = judge_findings([f for f in findings if gpu.index in (f.gpu, f.peer)])
    regpu = gpu.model_copy()
    regpu.verdict, regpu.reason = verdict, first.reason if first else None
    return regpu
