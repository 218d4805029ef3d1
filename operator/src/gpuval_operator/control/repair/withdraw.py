"""A repair withdrawn (spec.remediation): the node passed by another path (a person overruled its
verdict, a scheduled run, a gating re-validation) while its repair was still asked of the engine.

The node actions (`NodeActor.act`) call `before_pass` before they write the pass that returns the
node to service: the request's object is deleted first, so an engine never reboots a node that
runs work again (in mode Condition the same write that lifts the taint clears GpuRepairRequested).
The record moves to Withdrawn in that write (`remediation.machine.after_verdict`); the keeper sees
the move (`RepairKeeper._observe`) and `announce` says what happened, once, deleting an object a
restart left (the metrics count the request as withdrawn, not as a repair).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from gpuval_api import EventReason, keys
from gpuval_api.crd import GpuValidationSpec
from gpuval_operator.control.repair.objects import RepairObjects
from gpuval_operator.remediation.record import RepairRecord

log = logging.getLogger(__name__)

# Posts an Event on the validation and the node (node, record, what, reason, message).
Say = Callable[[str, RepairRecord, str, EventReason, str], Awaitable[None]]


class RepairWithdrawals:
    def __init__(self, objects: RepairObjects, validation: str, say: Say) -> None:
        self.objects, self.validation, self.say = objects, validation, say
        # Objects deleted by a withdrawal: (node, request number).
        self.deleted: set[tuple[str, str]] = set()
        # Withdrawals seen in the records, to say (node, the record as withdrawn, its run).
        self.pending: list[tuple[str, RepairRecord, str]] = []

    async def before_pass(self, node: str, record: RepairRecord, spec: GpuValidationSpec) -> None:
        """The node is about to pass with `record`'s request out: delete its object first."""
        key = (node, record.repair_id)
        if not record.obj or key in self.deleted:
            return
        log.info(
            "%s: %s passed while repair %s was asked: deleting %s before it returns to service",
            self.validation,
            node,
            record.count,
            record.obj,
        )
        await self.objects.delete(spec, record.obj)
        self.deleted.add(key)

    def seen(self, node: str, record: RepairRecord, run: str) -> None:
        """The node's record moved to Withdrawn (`run`: the run whose pass it was)."""
        self.pending.append((node, record, run))

    async def announce(self, spec: GpuValidationSpec) -> None:
        """Say each withdrawal once; an object still there (a restart between the pass and its
        delete) is deleted now."""
        pending, self.pending = self.pending, []
        for node, record, run in pending:
            await self.before_pass(node, record, spec)
            where = (
                f"its {record.obj} deleted"
                if record.obj
                else f"condition {keys.NODE_CONDITION_REPAIR_REQUESTED} cleared"
            )
            passed = f"passed in run {run}" if run else "passed"
            message = (
                f"{node} {passed} before repair {record.count} ({record.action}) ended: the "
                f"request was withdrawn ({where}) and the node is back in service; not counted "
                "as a repair"
            )
            await self.say(node, record, "withdrawn", EventReason.REPAIR_WITHDRAWN, message)
