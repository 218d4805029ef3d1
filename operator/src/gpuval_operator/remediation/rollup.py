"""Pure: status.remediation, the nodes in one validation's repair loop with their times, bounded
like the rest of the status (50 nodes, the rest counted)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuval_api.remediation import BACK_STATES, RepairState
from gpuval_operator.remediation.record import RepairRecord
from gpuval_operator.timestamps import rfc3339

MAX_LISTED = 50
# Listed first: what needs a person, then what is in the engine's hands, then the rest.
_ORDER = {
    RepairState.NEEDS_REPAIR: 0,
    RepairState.REQUESTED: 1,
    RepairState.REVALIDATING: 2,
    RepairState.FAILED_AGAIN: 3,
    RepairState.CANCELLED: 4,
    RepairState.REPAIRED: 5,
    RepairState.WITHDRAWN: 6,
}


def _time(epoch: int | None) -> str | None:
    return rfc3339(epoch) if epoch else None


def node_status(node: str, record: RepairRecord, now: float, window: float) -> dict[str, Any]:
    """One node's way through the loop, as status.remediation.nodes[] spells it."""
    row = {
        "node": node,
        "state": record.state,
        "reason": record.reason,
        "action": record.action,
        "repairs": len(record.within(now, window)),
        "failedAt": _time(record.failed),
        "requestedAt": _time(record.asked),
        "object": record.obj or None,
        "endedAt": _time(record.ended),
        "endedBy": record.ended_by,
        "revalidatedAt": _time(record.revalidated),
        "backInServiceAt": _time(record.back),
    }
    return {k: v for k, v in row.items() if v is not None}


def _shown(record: RepairRecord, now: float, window: float) -> bool:
    """Listed: in the loop, or back in service (or cancelled) within the window."""
    if record.state in BACK_STATES:
        return now - (record.back or 0) < window
    if record.state == RepairState.CANCELLED:
        return now - (record.ended or 0) < window
    return True


def remediation_status(
    records: Mapping[str, RepairRecord], now: float, window: float
) -> dict[str, Any]:
    """status.remediation: the nodes in the loop, and those back in service within the window."""
    shown = {node: record for node, record in records.items() if _shown(record, now, window)}
    ordered = sorted(
        shown.items(), key=lambda i: (_ORDER.get(RepairState(i[1].state), 9), -i[1].asked, i[0])
    )
    return {
        "inRepair": sum(1 for r in records.values() if r.active),
        "needsRepair": sum(1 for r in records.values() if r.state == RepairState.NEEDS_REPAIR),
        "nodes": [node_status(n, r, now, window) for n, r in ordered[:MAX_LISTED]],
        "nodesOmitted": max(0, len(ordered) - MAX_LISTED),
    }
