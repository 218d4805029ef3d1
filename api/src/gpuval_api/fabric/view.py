"""A node's fabric result as a person looks at it (gpuval_api.views' fleet units carry it): its
group, fabric verdict, transport and the group's pairs; and the floor the run's pairs are judged
by. Pure: nothing here calls the API or draws."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpuval_api.fabric import FabricPair, FabricSpec, FabricStatus, FabricThresholds, read_pairs
from gpuval_api.fabric.isolation import reference_busbw
from gpuval_api.fabric.summary import FabricRunStatus


@dataclass(frozen=True, slots=True)
class FabricLink:
    """One pair all-reduce of a fabric group: round 1, 2 (3) or 0 for a confirmation pair."""

    group: str
    round: int
    a: str
    b: str
    busbw_gbps: float | None  # None: the pair failed (`error` says how)
    error: str | None = None


@dataclass(frozen=True, slots=True)
class FabricFinding:
    """A node's fabric result: its group (its last one, for a node in two), verdict, reason, the
    transport NCCL used and the group's pairs as its agent measured them."""

    group: str
    verdict: str | None
    reason: str | None = None
    message: str = ""
    busbw_gbps: float | None = None
    transport: str | None = None
    links: tuple[FabricLink, ...] = ()


def fabric_links(group: str, result: object) -> tuple[FabricLink, ...]:
    """The pairs of a fabric agent's result document, as links of `group`."""
    return tuple(
        FabricLink(group, p.round, p.a, p.b, p.busbw_gbps, p.error) for p in read_pairs(result)
    )


def fabric_finding(fabric: FabricStatus | None) -> FabricFinding | None:
    """A node's fabric result from its report's `status.fabric`; None when it has none."""
    if fabric is None:
        return None
    return FabricFinding(
        group=fabric.group,
        verdict=str(fabric.verdict) if fabric.verdict is not None else None,
        reason=str(fabric.reason) if fabric.reason is not None else None,
        message=fabric.message,
        busbw_gbps=fabric.busbw_gbps,
        transport=str(fabric.transport) if fabric.transport is not None else None,
        links=fabric_links(fabric.group, fabric.result),
    )


def fabric_bounds(
    status: FabricRunStatus | None, spec: FabricSpec | None, links: Iterable[FabricLink]
) -> tuple[float | None, float | None]:
    """(the run's reference pair busbw, the floor below which a pair is slow), as the operator
    judges pairs: its run-wide reference when the validation's `status.fabric` has one, else the
    same reference (gpuval_api.fabric.isolation.reference_busbw) over the pair rounds among
    `links` (each pair once: the members of a group all report its pairs); the floor from
    `spec.fabric.thresholds` (or their defaults)."""
    median = status.median_pair_gbps if status else None
    if median is None:
        median = reference_busbw(
            FabricPair(round=link.round, a=link.a, b=link.b, bytes=0, busbw_gbps=link.busbw_gbps)
            for link in links
        )
    if median is None:
        return None, None
    return median, (spec.thresholds if spec else FabricThresholds()).floor(median)
