"""The evidence bundle of a node the fabric failed, written with its settled verdict.

The run-wide comparison may fail a node its agent passed, so the agent cannot keep this bundle
itself: its fabric agent leaves its figures and NCCL log excerpt in `status.fabric.result` on
every run, and here, for each node the fabric fails, the operator reads its report back (the one
API call, a GET: the watch keeps a few hundred bytes per node, not the log) and adds what only the
run shows, the median pair, the floors and each of the node's groups, in one bundle
(gpuval_api.fabric.evidence; at most 64 KiB encoded). A report it cannot read still gets the
run's figures and pairs: the bundle says the agent's part is missing.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from gpuval_api import Reason
from gpuval_api.evidence import evidence_status
from gpuval_api.fabric.evidence import GroupFigures, fabric_evidence, read_result
from gpuval_api.report import StatusKey
from gpuval_operator.fabric.state import FabricState
from gpuval_operator.kube.client import ApiError, q
from gpuval_operator.run.effects import REPORTS_PATH, Effects
from gpuval_operator.run.state import NodeRecord

log = logging.getLogger(__name__)


def group_figures(fabric: FabricState, node: str) -> list[GroupFigures]:
    """The node's groups as the classification saw them (pure)."""
    found = fabric.classification
    outcomes = {o.name: o for o in (found.groups if found is not None else ())}
    figures = []
    for name in fabric.groups_of.get(node, []):
        outcome = outcomes.get(name)
        group = fabric.groups.get(name)
        figures.append(
            GroupFigures(
                name=name,
                nodes=group.plan.nodes if group is not None else (),
                busbw_gbps=fabric.busbw.get(name),
                floor_gbps=outcome.floor if outcome is not None else None,
                slow=outcome.slow if outcome is not None else False,
                pairs=fabric.pairs.get(name, ()),
            )
        )
    return figures


async def fabric_evidence_status(
    effects: Effects,
    record: NodeRecord,
    fabric: FabricState,
    reason: Reason,
    message: str,
) -> dict[str, Any]:
    """`status.evidence` for the node of `record`, which the fabric failed with `reason`."""
    try:
        report = await effects.client.get_or_none(f"{REPORTS_PATH}/{q(record.report)}")
    except ApiError as exc:
        log.warning("%s: could not read report %s: %s", effects.name, record.report, exc)
        report = None
    status = (report or {}).get("status") or {}
    found = fabric.classification
    bundle = fabric_evidence(
        record.node,
        reason,
        message,
        read_result(status.get(StatusKey.FABRIC)),
        group_figures(fabric, record.node),
        median_pair_gbps=found.median_pair if found is not None else None,
        pair_floor_gbps=found.pair_floor if found is not None else 0.0,
        now=datetime.now(UTC),
    )
    return evidence_status(bundle)
