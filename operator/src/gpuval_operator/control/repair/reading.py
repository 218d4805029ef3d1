"""Pure: what the repair loop reads of the nodes and of the run, for `control.repair.keeper`.
Nothing here calls the API: the keeper passes the node watch's facts and the run in.

- `candidates`: the nodes the loop may act on (failed, or with a record);
- `repair_facts`: one node as `remediation.machine.decide` takes it, busy while the run still
  tests it;
- `records`: every node's repair record, for the status and the metrics;
- `needs_repair_text`: what NeedsRepair says, naming the label and the release that end it;
- `LOAD_CHECKS`: the checks that load a GPU, the burn first, from which a re-validation's
  checks are taken.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpuval_api import Verdict, keys
from gpuval_api.checks import CheckName
from gpuval_api.remediation import repairs_text
from gpuval_operator.nodes.facts import NodeFacts
from gpuval_operator.remediation.machine import RepairFacts, Settings
from gpuval_operator.remediation.record import RepairRecord
from gpuval_operator.run.state import RunState

# The load checks, the burn first: a re-validation whose failed checks load no GPU gets the burn.
LOAD_CHECKS = tuple(
    c.value
    for c in (
        CheckName.BURN,
        CheckName.MEMORY,
        CheckName.BANDWIDTH,
        CheckName.NCCL,
        CheckName.TRAIN,
        CheckName.DCGM,
    )
)


def candidates(nodes: Mapping[str, NodeFacts]) -> dict[str, NodeFacts]:
    """The nodes the loop may act on: failed, or with a record."""
    return {
        name: facts
        for name, facts in nodes.items()
        if facts.entry is not None
        and (facts.entry.repair is not None or facts.entry.tested == Verdict.FAILED)
    }


def repair_facts(facts: NodeFacts, run: RunState | None) -> RepairFacts | None:
    """The node as the repair loop decides on it; None without this validation's entry."""
    entry = facts.entry
    if entry is None:
        return None
    record = run.nodes.get(facts.name) if run is not None else None
    busy = run is not None and (
        (record is not None and not record.settled) or facts.name in run.finished
    )
    return RepairFacts(
        name=facts.name,
        tested=entry.tested,
        reason=entry.reason,
        at=entry.at,
        in_force=entry.in_force,
        repair=entry.repair,
        boot_id=facts.boot_id,
        ready=facts.ready,
        needs_repair_label=facts.needs_repair_label,
        busy=busy,
    )


def records(nodes: Mapping[str, NodeFacts]) -> dict[str, RepairRecord]:
    """Every node's repair record in this validation's entry."""
    return {
        name: facts.entry.repair
        for name, facts in nodes.items()
        if facts.entry is not None and facts.entry.repair is not None
    }


def needs_repair_text(record: RepairRecord, settings: Settings, validation: str) -> str:
    """NeedsRepair's message: the repairs that did not help, and what a person does next."""
    return (
        f"failed again ({record.reason}) after {repairs_text(len(record.history))} within "
        f"{settings.window}s (spec.remediation.maxRepairs {settings.max_repairs}): no further "
        "repair is asked; a person or a hardware ticket takes over; remove the label "
        f"{keys.NODE_LABEL_NEEDS_REPAIR} once repaired to validate it again, or `kubectl "
        f"gpuval release {validation}` to let its breaker slot go"
    )
