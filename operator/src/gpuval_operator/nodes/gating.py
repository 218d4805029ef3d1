"""Pure: the gating decision (spec.gating), which nodes join the current run because they are new,
rebooted or run another GPU stack than they were tested on, and the Events that say so."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from gpuval_api import OperatorEnv
from gpuval_api.crd import Gating, NodeTrigger
from gpuval_operator.nodes.facts import NodeFacts
from gpuval_operator.run.state import NodeRecord


def gating_trigger(
    node: NodeFacts, gating: Gating, record: NodeRecord | None
) -> NodeTrigger | None:
    """Why `node` should join the current run, or None.

    What the node was last tested on comes from its record in the current run when it has a
    verdict there (a dry run writes no annotation), else from this validation's annotation.
    A node the run is still validating (its fabric included), or one that cannot take the agent
    now, waits.
    """
    if not node.selectable or (record is not None and not record.settled):
        return None
    if record is not None and record.tested_boot is not None:
        boot, stack = record.tested_boot, record.tested_stack
    elif node.entry is not None:
        boot, stack = node.entry.boot, node.entry.stack
    elif record is not None:
        return None  # in the run, finished, and nothing recorded yet: its write is on its way
    else:
        return NodeTrigger.JOINED if gating.join else None
    if gating.reboot and boot and node.boot_id and boot != node.boot_id:
        return NodeTrigger.REBOOTED
    if gating.stack_change and stack and stack != node.stack:
        return NodeTrigger.STACK_CHANGED
    return None


def queued_events(
    joined: Sequence[tuple[str, NodeTrigger]], posted: int, cap: int
) -> tuple[list[str], str | None]:
    """The NodeQueued Events for nodes that joined the run in one batch: one per node while the
    run's `posted` ones stay within `cap` (GPUVAL_EVENTS_PER_RUN), then one summary of the rest
    (how many, by trigger, the first few names), so 200 joining nodes do not post 200 Events."""
    room = max(0, cap - posted)
    each = [f"{name} ({trigger}) joins the run" for name, trigger in joined[:room]]
    rest = joined[room:]
    if not rest:
        return each, None
    triggers = Counter(str(t) for _, t in rest)
    counted = ", ".join(f"{n} {t}" for t, n in sorted(triggers.items()))
    names = ", ".join(n for n, _ in rest[:5]) + (", ..." if len(rest) > 5 else "")
    summary = (
        f"{len(rest)} more nodes join the run ({counted}): {names}; NodeQueued Events are capped "
        f"at {cap} per run ({OperatorEnv.EVENTS_PER_RUN})"
    )
    return each, summary
