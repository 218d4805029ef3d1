"""Pure: what a cross-domain group's pairs say about the network between topology domains.

A representative is chosen because it passed inside its domain, so in a cross-domain group the
pairs speak of the paths between domains, not of the nodes: a representative slow with every
other domain's is the path out of its domain (FabricSlowDomain: a slow uplink), a slow pair of
two representatives is the path between their domains (FabricSlowPath). Neither representative
is blamed; each finding is listed in the validation's status.fabric.slowPaths. A representative
alone in its domain was never tested inside it: slow with every partner, it is the node that is
named (FabricSlowNode), as in any group, and a slow pair with it stays a slow pair.

Nothing here calls the API (tests/unit/operator/test_operator_fabric_verdicts.py, the cross-domain
cases).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpuval_api import Reason
from gpuval_api.fabric import FabricPair
from gpuval_api.fabric.isolation import Blame


@dataclass(frozen=True, slots=True)
class PathFinding:
    """A slow path between topology domains, and the representatives it was tested through."""

    group: str
    domains: tuple[str, ...]  # one: the path out of it; two: the path between them
    nodes: tuple[str, ...]
    reason: Reason
    message: str
    busbw: float | None
    floor: float


@dataclass(frozen=True, slots=True)
class CrossReading:
    kept: tuple[Blame, ...]  # what still stands against nodes
    findings: tuple[PathFinding, ...]
    notes: dict[str, str] = field(default_factory=dict)  # representative -> its finding's words


def _shown(domain: str) -> str:
    return domain or "(unlabelled)"


def _slow_domain(
    group: str, blamed: Blame, pairs: Sequence[FabricPair], domains: Mapping[str, str], floor: float
) -> PathFinding:
    node, home = blamed.node, domains.get(blamed.node, "")
    mine = [p for p in pairs if node in (p.a, p.b)]
    figures = "; ".join(
        f"{other} of {_shown(domains.get(other, ''))}: "
        + (f"{p.busbw_gbps:.1f} GB/s" if p.busbw_gbps is not None else "failed")
        for p in mine
        for other in [p.b if p.a == node else p.a]
    )
    message = (
        f"the network path out of domain {_shown(home)} is slow: its representative {node}, fine "
        f"inside {_shown(home)}, was slow with every other domain's ({figures}; floor "
        f"{floor:.1f} GB/s)"
    )
    worst = min((p.busbw_gbps for p in mine if p.busbw_gbps is not None), default=None)
    return PathFinding(group, (home,), (node,), Reason.FABRIC_SLOW_DOMAIN, message, worst, floor)


def _slow_path(
    group: str, pair: FabricPair, domains: Mapping[str, str], floor: float, elsewhere: bool
) -> PathFinding:
    first, second = _shown(domains.get(pair.a, "")), _shown(domains.get(pair.b, ""))
    shown = f"{pair.busbw_gbps:.1f} GB/s" if pair.busbw_gbps is not None else "failed"
    fine = "inside their domains and with other domains" if elsewhere else "inside their domains"
    message = (
        f"the network path between domains {first} and {second} is slow ({shown}, floor "
        f"{floor:.1f} GB/s): their representatives {pair.a} and {pair.b} were fine {fine}"
    )
    return PathFinding(
        group,
        (domains.get(pair.a, ""), domains.get(pair.b, "")),
        (pair.a, pair.b),
        Reason.FABRIC_SLOW_PATH,
        message,
        pair.busbw_gbps,
        floor,
    )


def cross_findings(
    group: str,
    blames: Sequence[Blame],
    pairs: Sequence[FabricPair],
    *,
    domains: Mapping[str, str],
    lone: frozenset[str],
    floor: float,
) -> CrossReading:
    """`blames` of a cross-domain group read as paths between domains (the module docstring);
    `domains`: each representative's domain; `lone`: those alone in their domain."""
    kept: list[Blame] = []
    findings: list[PathFinding] = []
    seen: set[frozenset[str]] = set()
    for found in blames:
        if found.reason is Reason.FABRIC_SLOW_NODE and found.node not in lone:
            findings.append(_slow_domain(group, found, pairs, domains, floor))
            continue
        if found.reason not in (Reason.FABRIC_SLOW_LINK, Reason.FABRIC_SLOW_PAIR):
            kept.append(found)
            continue
        ends = frozenset((found.node, *found.partners))
        if found.reason is Reason.FABRIC_SLOW_PAIR and ends & lone:
            kept.append(found)  # a lone representative's pair: the node or the path, untold
            continue
        if ends in seen:
            continue
        seen.add(ends)
        pair = next(p for p in pairs if p.round >= 1 and {p.a, p.b} == ends)
        elsewhere = found.reason is Reason.FABRIC_SLOW_LINK
        findings.append(_slow_path(group, pair, domains, floor, elsewhere))
    notes: dict[str, str] = {}
    for finding in findings:
        for node in finding.nodes:
            notes[node] = "; ".join(filter(None, (notes.get(node), finding.message)))
    return CrossReading(tuple(kept), tuple(findings), notes)
