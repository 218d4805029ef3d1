"""From the group's gathered reports to this node's fabric verdict. Pure: no I/O, no clock.

Every node runs this on the same gathered evidence, so the nodes agree on who is to blame; each
keeps only its own verdict. The group is judged only by the absolute threshold here: comparing
it with the run's other groups of the same size is the operator's part.

Order of the reasons for a node: its transport fell back (FabricTransportFallback); the pairs
name it (slow: FabricSlowNode/FabricSlowLink; its pairs hung: NcclTimeout; crashed or summed
wrong: NcclError; its rank processes never reached their store: FabricUnreachable); the group failed
and no pair named anyone (everyone fails with the group's reason); the group is below the
absolute threshold (NcclLowBusbw); else Passed, even when the pairs name other nodes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from gpuval_agent.allreduce import bus_bandwidth
from gpuval_agent.fabric.steps import SEVERITY, StepReport, StepStatus
from gpuval_agent.fabric.transport import TransportReading, fell_back
from gpuval_api import Reason, Verdict, verdict_of
from gpuval_api.fabric import FabricConfig, FabricPair
from gpuval_api.fabric.isolation import (
    BUSBW,
    Blame,
    Measure,
    Pair,
    blame,
    find_suspects,
    reference_busbw,
)
from gpuval_api.result import NcclSize

_SUMMARY_LIMIT = 600
REASON_OF = {
    StepStatus.TIMEOUT: Reason.NCCL_TIMEOUT,
    StepStatus.ABSENT: Reason.NCCL_TIMEOUT,
    StepStatus.UNREACHABLE: Reason.FABRIC_UNREACHABLE,
    StepStatus.ERROR: Reason.NCCL_ERROR,
    StepStatus.WRONG_SUM: Reason.NCCL_ERROR,
}


@dataclass
class GroupRecord:
    status: StepStatus
    summary: str = ""  # what went wrong, one line naming the nodes
    sizes: list[NcclSize] | None = None

    @property
    def busbw_gbps(self) -> float | None:
        if not self.sizes:
            return None
        return max(self.sizes, key=lambda s: s.bytes).busbw_gbps


class _Measured(Pair, Protocol):
    """A pair of a round with why it failed (FabricPair, FabricTrainPair)."""

    @property
    def error(self) -> str | None: ...


M = TypeVar("M", bound=_Measured)


@dataclass
class PairRecord(Generic[M]):
    pair: M
    status: StepStatus


@dataclass
class Conclusion:
    verdict: Verdict
    reason: Reason | None
    message: str


def worst(statuses: Sequence[StepStatus]) -> StepStatus:
    return next((s for s in SEVERITY if s in statuses), StepStatus.OK)


def nccl_size(nbytes: int, seconds: float, ranks: int) -> NcclSize:
    algbw = nbytes / seconds / 1e9 if seconds > 0 else 0.0
    return NcclSize(
        bytes=nbytes,
        time_seconds=seconds,
        algbw_gbps=round(algbw, 3),
        busbw_gbps=round(bus_bandwidth(algbw, ranks), 3),
    )


def problems(reports: Sequence[StepReport], nodes: Sequence[str]) -> str:
    """'n0, n1: <what they said>; n2: <something else>' for the reports that are not OK."""
    said: dict[str, list[str]] = {}
    for node, report in zip(nodes, reports, strict=True):
        if not report.ok:
            said.setdefault(report.error or str(report.status), []).append(node)
    text = "; ".join(f"{', '.join(names)}: {error}" for error, names in said.items())
    return text if len(text) <= _SUMMARY_LIMIT else text[: _SUMMARY_LIMIT - 1] + "…"


def group_record(reports: Sequence[StepReport], nodes: Sequence[str], ranks: int) -> GroupRecord:
    """The group phase from every node's report: figures when all agree it finished."""
    if all(r.ok for r in reports):
        seconds: dict[int, float] = {}
        for report in reports:
            for nbytes, value in report.sizes:
                seconds[nbytes] = max(seconds.get(nbytes, 0.0), value)
        sizes = [nccl_size(b, s, ranks) for b, s in sorted(seconds.items())]
        return GroupRecord(StepStatus.OK, sizes=sizes)
    status = worst([r.status for r in reports])
    return GroupRecord(status, summary=problems(reports, nodes))


def pair_record(
    round_number: int,
    ranks: tuple[int, int],
    *,
    reports: Sequence[StepReport],
    nodes: Sequence[str],
    gpus: Sequence[int],
    nbytes: int,
) -> PairRecord[FabricPair]:
    """One pair of a round, from its two nodes' reports."""
    a, b = ranks
    ends = [reports[a], reports[b]]
    pair = FabricPair(round=round_number, a=nodes[a], b=nodes[b], bytes=nbytes)
    if all(r.ok for r in ends):
        figures = [f.seconds for r in ends for f in r.pairs if (f.a, f.b) == (a, b)]
        if not figures:
            pair.error = "neither node reported a figure for this pair"
            return PairRecord(pair, StepStatus.ERROR)
        measured = nccl_size(nbytes, max(figures), gpus[a] + gpus[b])
        pair.busbw_gbps = measured.busbw_gbps
        return PairRecord(pair, StepStatus.OK)
    pair.error = problems(ends, [nodes[a], nodes[b]])
    return PairRecord(pair, worst([r.status for r in ends]))


def pair_floor(config: FabricConfig, pairs: Sequence[PairRecord[FabricPair]]) -> float:
    """Below this a pair is slow: the thresholds against the group's reference (the median over
    its nodes of each node's best pair, gpuval_api.fabric.isolation.reference_busbw)."""
    return config.thresholds.floor(reference_busbw(p.pair for p in pairs))


def blamed(
    me: str, mine: Blame, pairs: Sequence[PairRecord[M]], measure: Measure = BUSBW
) -> Conclusion:
    """What the pairs name against this node: slowness by its reason's class; a pair that failed
    (hung, crashed) by how it failed."""
    failed = [p for p in pairs if me in (p.pair.a, p.pair.b) and p.status is not StepStatus.OK]
    if not failed:
        return Conclusion(verdict_of(mine.reason), mine.reason, mine.message)
    status = worst([p.status for p in failed])
    first = next(p for p in failed if p.status is status)
    said = f"{first.pair.a}-{first.pair.b}: {first.pair.error}"
    if mine.reason is measure.slow_node:
        partners = ", ".join(mine.partners)
        text = f"every {measure.pair} this node was in failed (partners {partners}); {said}"
    else:
        text = f"{mine.message}; {said}"
    return Conclusion(Verdict.FAILED, REASON_OF[status], text)


def _described(group: GroupRecord, pairs: Sequence[PairRecord[FabricPair]], floor: float) -> str:
    parts = []
    if group.sizes:
        largest = max(group.sizes, key=lambda s: s.bytes)
        parts.append(f"group busbw {largest.busbw_gbps:.1f} GB/s at {largest.bytes >> 20} MiB")
    figures = [p.pair.busbw_gbps for p in pairs if p.pair.busbw_gbps is not None]
    if figures:
        parts.append(f"pairs {min(figures):.1f}-{max(figures):.1f} GB/s (floor {floor:.1f})")
    return "; ".join(parts)


# Failures that no process sharing a GPU explains: a configuration, a network path.
_NOT_DISTURBED = frozenset(
    {Reason.FABRIC_TRANSPORT_FALLBACK, Reason.FABRIC_UNREACHABLE, Reason.INVALID_CONFIG}
)


def _in_use(me: str, in_use: Mapping[str, str], why: str) -> Conclusion:
    if me in in_use:
        text = f"{me}: {in_use[me]}: the fabric did not test this node ({why})"
    else:
        named = "; ".join(f"{node}: {said}" for node, said in sorted(in_use.items()))
        text = f"another process used a GPU of the group ({named}): {why}"
    return Conclusion(Verdict.NOT_RUN, Reason.GPU_IN_USE, text)


def not_measured(me: str, in_use: Mapping[str, str]) -> Conclusion:
    """Every node's conclusion when a node's GPUs were in use before the group met: nothing was
    measured, no node was tested."""
    return _in_use(me, in_use, "the group measured nothing")


def undisturbed(conclusion: Conclusion, me: str, in_use: Mapping[str, str]) -> Conclusion:
    """This node's conclusion once other processes on the group's GPUs are known (`in_use`:
    node -> who used its GPU): a node whose GPU was shared is not tested (GpuInUse); another
    node's failure that the shared GPU can explain is set aside the same way; a pass stands."""
    if conclusion.verdict is Verdict.FAILED and conclusion.reason in _NOT_DISTURBED:
        return conclusion
    if me in in_use or (in_use and conclusion.verdict is Verdict.FAILED):
        aside = f"{conclusion.reason}: " if conclusion.reason else ""
        why = f"the group's figures are no evidence (set aside: {aside}{conclusion.message})"
        return _in_use(me, in_use, why)
    return conclusion


def conclude(
    me: str,
    config: FabricConfig,
    group: GroupRecord,
    pairs: Sequence[PairRecord[FabricPair]],
    reading: TransportReading,
) -> Conclusion:
    """This node's verdict from the group's evidence (module docstring: the order)."""
    fallback = fell_back(config.expected_transport, reading)
    if fallback is not None:
        return Conclusion(Verdict.FAILED, Reason.FABRIC_TRANSPORT_FALLBACK, fallback)
    floor = pair_floor(config, pairs)
    fabric_pairs = [p.pair for p in pairs]
    suspects = find_suspects(fabric_pairs, floor)
    if suspects.nodes and not suspects.good and all(p.status is StepStatus.OK for p in pairs):
        return Conclusion(
            Verdict.FAILED,
            Reason.NCCL_LOW_BUSBW,
            f"every pair of the group is below the floor {floor:.1f} GB/s "
            f"(fabric.thresholds.absoluteBusbwGBps): no node stands out; "
            f"{_described(group, pairs, floor)}",
        )
    blames = blame(fabric_pairs, floor)
    mine = next((b for b in blames if b.node == me), None)
    if mine is not None:
        return blamed(me, mine, pairs)
    named = ", ".join(sorted({b.node for b in blames}))
    others = f"; the pairs name {named}, not this node" if named else ""
    if group.status is not StepStatus.OK:
        if named:
            return Conclusion(
                Verdict.PASSED, None, f"the group all-reduce failed ({group.summary}){others}"
            )
        return Conclusion(
            Verdict.FAILED,
            REASON_OF[group.status],
            f"the group all-reduce failed and no pair named a node: {group.summary}",
        )
    absolute = config.thresholds.absolute_busbw_gbps
    busbw = group.busbw_gbps
    if absolute is not None and busbw is not None and busbw < absolute and not named:
        return Conclusion(
            Verdict.FAILED,
            Reason.NCCL_LOW_BUSBW,
            f"group busbw {busbw:.1f} GB/s is below fabric.thresholds.absoluteBusbwGBps "
            f"{absolute:.1f}, and every pair is alike: {_described(group, pairs, floor)}",
        )
    return Conclusion(
        Verdict.PASSED, None, f"{_described(group, pairs, floor)} via {reading.transport}{others}"
    )
