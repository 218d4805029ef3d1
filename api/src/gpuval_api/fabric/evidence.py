"""The evidence bundle of a node the fabric failed. Pure.

The operator settles fabric verdicts run-wide (it may fail a node its agent passed, against the
other groups of the run), so it builds the bundle when it fails a node, from what the node's fabric
agent left in its report (`status.fabric.result`: its group's figures, the NCCL log excerpt, the
rank processes' last words) and what only the run shows (the median pair, the floors, each of the
node's groups). Same encoding and bounds as every bundle (gpuval_api.evidence: at most 64 KiB
encoded, cut section by section, lowest priority first).

Sections: `fabric` (the agent's verdict, transport and NCCL's own transport lines, NCCL variables,
the group's sweep; the run's median pair and floors, each of the node's groups), `pairs` (every pair
of the node's groups, its own first), `ncclLog` (the excerpt: warnings and errors with their
context, the set-up lines), `logTail` (the rank processes' last words, when a phase failed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpuval_api.evidence import EvidenceStatus, Section, encode_evidence
from gpuval_api.fabric import FABRIC_CHECK, FabricKey, FabricPair
from gpuval_api.reasons import Reason
from gpuval_api.report import StatusKey, rfc3339
from gpuval_api.result import Verdict

FABRIC_SECTION, PAIRS_SECTION, NCCL_LOG_SECTION, LOG_TAIL_SECTION = (
    "fabric",
    "pairs",
    "ncclLog",
    "logTail",
)
# The agent's result keys the fabric section leaves to the other sections (or the header).
_ELSEWHERE = {"pairs", "ncclLog", "logTail", "schemaVersion", "agentVersion", "backend"}


@dataclass(frozen=True, slots=True)
class GroupFigures:
    """One of the node's fabric groups as the run-wide comparison saw it."""

    name: str
    nodes: tuple[str, ...]
    busbw_gbps: float | None
    floor_gbps: float | None
    slow: bool
    pairs: tuple[FabricPair, ...]


def _pairs(node: str, groups: Sequence[GroupFigures]) -> list[dict[str, Any]]:
    """Every pair of the node's groups, the node's own first (a bundle cut to fit keeps them)."""
    found = [
        {"group": g.name, "withThisNode": node in (p.a, p.b)}
        | p.model_dump(mode="json", by_alias=True)
        for g in groups
        for p in g.pairs
    ]
    return sorted(found, key=lambda p: not p["withThisNode"])


def fabric_sections(
    node: str,
    result: Mapping[str, Any] | None,
    groups: Sequence[GroupFigures],
    median_pair_gbps: float | None,
    pair_floor_gbps: float,
) -> list[Section]:
    document = dict(result) if isinstance(result, Mapping) else {}
    agent = {k: v for k, v in document.items() if k not in _ELSEWHERE}
    run = {
        "medianPairGBps": median_pair_gbps,
        "pairFloorGBps": round(pair_floor_gbps, 3),
        "groups": [
            {
                "name": g.name,
                "nodes": list(g.nodes),
                "busbwGBps": g.busbw_gbps,
                "floorGBps": None if g.floor_gbps is None else round(g.floor_gbps, 3),
                "slowAsAGroup": g.slow,
            }
            for g in groups
        ],
    }
    return [
        Section(FABRIC_SECTION, {"agent": agent or None, "run": run}, priority=70),
        Section(PAIRS_SECTION, _pairs(node, groups), priority=60),
        Section(NCCL_LOG_SECTION, document.get("ncclLog"), priority=50),
        Section(LOG_TAIL_SECTION, document.get("logTail"), priority=40),
    ]


def fabric_evidence(
    node: str,
    reason: Reason,
    message: str,
    result: Mapping[str, Any] | None,
    groups: Sequence[GroupFigures],
    *,
    median_pair_gbps: float | None,
    pair_floor_gbps: float,
    now: datetime,
) -> EvidenceStatus:
    """The bounded, encoded bundle of a node the fabric failed (`reason`, `message`: the
    operator's settled verdict; `result`: its agent's `status.fabric.result`, None when no agent
    wrote one)."""
    header = {
        "node": node,
        "check": FABRIC_CHECK,
        StatusKey.VERDICT.value: str(Verdict.FAILED),
        StatusKey.REASON.value: str(reason),
        StatusKey.MESSAGE.value: message,
        "agentVersion": (result or {}).get("agentVersion"),
        "backend": (result or {}).get("backend"),
        "createdAt": rfc3339(now),
    }
    sections = fabric_sections(node, result, groups, median_pair_gbps, pair_floor_gbps)
    return encode_evidence(header, sections)


def read_result(fabric: object) -> dict[str, Any] | None:
    """A report's `status.fabric.result`, the fabric agent's own document (None: no agent wrote
    one, e.g. its pod never started)."""
    result = fabric.get(FabricKey.RESULT) if isinstance(fabric, Mapping) else None
    return dict(result) if isinstance(result, Mapping) else None
