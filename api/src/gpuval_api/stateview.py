"""What the state check found, as a person reads it: every finding (errors and warnings) with its
hint, and what could not be read, per node or per machine. Pure: nothing here calls the API."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpuval_api.checks import CheckName
from gpuval_api.result import AgentResult

# A unit's own lines are bounded: a node with hundreds of findings shows the first ones.
MAX_LINES_PER_UNIT = 32


@dataclass(frozen=True, slots=True)
class StateLine:
    """One state finding of a unit (a node, or a GPU or the host of one machine)."""

    unit: str
    severity: str  # Error or Warning, as the finding says
    reason: str
    message: str
    hint: str


def state_lines(result: AgentResult | None, unit: str) -> tuple[StateLine, ...]:
    """The state check's findings of one result, all on `unit`."""
    check = result.check(CheckName.STATE) if result is not None else None
    if check is None:
        return ()
    return tuple(
        StateLine(unit, str(f.severity), str(f.reason), " ".join(f.message.split()), f.hint)
        for f in check.findings[:MAX_LINES_PER_UNIT]
    )


def not_read(result: AgentResult | None) -> tuple[str, ...]:
    """What the state check could not read or the node does not have."""
    check = result.check(CheckName.STATE) if result is not None else None
    return tuple(check.not_read[:MAX_LINES_PER_UNIT]) if check is not None else ()


def not_read_by_what(
    units: Iterable[tuple[str, tuple[str, ...]]],
) -> list[tuple[str, tuple[str, ...]]]:
    """(what was not read, the units it applies to), commonest first: a fleet of identical
    nodes shows 'no /sys/class/infiniband' once with its node count, not once per node."""
    holders: dict[str, list[str]] = {}
    for unit, lines in units:
        for line in lines:
            holders.setdefault(line, []).append(unit)
    return sorted(
        ((w, tuple(u)) for w, u in holders.items()), key=lambda item: (-len(item[1]), item[0])
    )
