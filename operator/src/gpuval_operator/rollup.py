"""Roll-up of a run's nodes into the GpuValidation status: counts, conditions, bounded lists.

Pure functions. The status stays a bounded summary whatever the node count (50 failing nodes and 50
outliers at most, the rest counted), so a validation of 10,000 nodes stays far below etcd's object
size limit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gpuval_operator.state import RunState
from gpuval_operator.uniformity import Outlier

MAX_LISTED = 50

SUCCEEDED = "Succeeded"
NODES_HEALTHY = "NodesHealthy"
UNIFORM = "Uniform"
INVALID = "Invalid"
CONDITION_TYPES = (SUCCEEDED, NODES_HEALTHY, UNIFORM, INVALID)


def rfc3339(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True, slots=True)
class Cond:
    type: str
    status: str
    reason: str
    message: str


def merge_conditions(
    previous: Sequence[dict[str, Any]], new: Sequence[Cond], generation: int, now: float
) -> list[dict[str, Any]]:
    """`new` as status conditions; lastTransitionTime kept from `previous` where the status did
    not change.
    """
    before = {c.get("type"): c for c in previous}
    out = []
    for cond in new:
        old = before.get(cond.type)
        since = (
            old["lastTransitionTime"]
            if old and old.get("status") == cond.status and old.get("lastTransitionTime")
            else rfc3339(now)
        )
        out.append(
            {
                "type": cond.type,
                "status": cond.status,
                "reason": cond.reason,
                "message": cond.message[:1024],
                "observedGeneration": generation,
                "lastTransitionTime": since,
            }
        )
    return out


def _names(nodes: Sequence[str], limit: int = 5) -> str:
    shown = ", ".join(nodes[:limit])
    return shown + (f" and {len(nodes) - limit} more" if len(nodes) > limit else "")


def run_conditions(run: RunState, outliers: Sequence[Outlier] | None) -> list[Cond]:
    """Succeeded, NodesHealthy, Uniform and Invalid (False) for a valid spec's run.

    `outliers` is None while the run goes on or when no node reported an environment: uniformity is
    then Unknown rather than a premature True.
    """
    counts = run.counts()
    failed = [r.node for r in run.failed()]
    done = counts["passed"] + counts["failed"]
    complete = run.completed_at is not None
    if complete and counts["total"] == 0:
        # An empty selection is almost always a wrong nodeSelector, not a healthy fleet.
        message = "no Ready, schedulable node with nvidia.com/gpu matched spec.nodeSelector"
        return [
            Cond(SUCCEEDED, "False", "NoNodesSelected", message),
            Cond(NODES_HEALTHY, "Unknown", "NoNodesSelected", message),
            Cond(UNIFORM, "Unknown", "NoNodesSelected", message),
            Cond(INVALID, "False", "Valid", "the spec is valid"),
        ]
    if not complete:
        succeeded = Cond(
            SUCCEEDED, "Unknown", "Running", f"{done} of {counts['total']} nodes have a verdict"
        )
    elif failed:
        succeeded = Cond(
            SUCCEEDED,
            "False",
            "NodesFailed",
            f"{len(failed)} of {counts['total']} nodes failed: {_names(failed)}",
        )
    else:
        succeeded = Cond(SUCCEEDED, "True", "AllNodesPassed", f"all {counts['total']} nodes passed")
    if failed:
        first = run.nodes[failed[0]]
        healthy = Cond(
            NODES_HEALTHY,
            "False",
            "NodesFailed",
            f"{len(failed)} failed: {_names(failed)} (first: {first.reason}: {first.message})",
        )
    elif complete:
        healthy = Cond(
            NODES_HEALTHY, "True", "AllNodesPassed", f"all {counts['total']} nodes passed"
        )
    else:
        healthy = Cond(NODES_HEALTHY, "Unknown", "Running", "no node has failed so far")
    if outliers is None:
        uniform = Cond(UNIFORM, "Unknown", "NotCompared", "compared when the run completes")
    elif outliers:
        nodes = sorted({o.node for o in outliers})
        first_outlier = outliers[0]
        uniform = Cond(
            UNIFORM,
            "False",
            "NotUniform",
            f"{len(nodes)} nodes differ: {_names(nodes)} (first: {first_outlier.field} "
            f"{first_outlier.value} on {first_outlier.node}, expected {first_outlier.expected})",
        )
    else:
        uniform = Cond(UNIFORM, "True", "Uniform", "every node's environment agrees")
    return [succeeded, healthy, uniform, Cond(INVALID, "False", "Valid", "the spec is valid")]


def invalid_conditions(errors: Sequence[str]) -> list[Cond]:
    message = "; ".join(errors)
    return [
        Cond(SUCCEEDED, "False", "InvalidSpec", "nothing was scheduled: the spec is invalid"),
        Cond(NODES_HEALTHY, "Unknown", "InvalidSpec", "nothing was validated"),
        Cond(UNIFORM, "Unknown", "InvalidSpec", "nothing was validated"),
        Cond(INVALID, "True", "InvalidSpec", message),
    ]


def run_info(run: RunState) -> dict[str, Any]:
    return {
        "id": run.run_id,
        "number": run.number,
        "generation": run.generation,
        "trigger": run.trigger,
        "startedAt": rfc3339(run.started_at),
        "completedAt": rfc3339(run.completed_at) if run.completed_at else None,
    }


def phase_of(run: RunState) -> str:
    if run.completed_at is None:
        return "Running" if run.nodes else "Pending"
    return "Failed" if run.failed() or not run.nodes else "Succeeded"


def build_run_status(
    run: RunState,
    *,
    generation: int,
    previous_conditions: Sequence[dict[str, Any]],
    outliers: Sequence[Outlier] | None,
    now: float,
    next_run_at: float | None = None,
) -> dict[str, Any]:
    """The GpuValidation status body (for a JSON merge patch on /status) of a run."""
    failed = run.failed()
    listed = outliers or []
    status: dict[str, Any] = {
        "observedGeneration": generation,
        "phase": phase_of(run),
        "run": run_info(run),
        "nodes": run.counts(),
        "failingNodes": [
            {"node": r.node, "reason": r.reason or "", "message": r.message}
            for r in failed[:MAX_LISTED]
        ],
        "failingNodesOmitted": max(0, len(failed) - MAX_LISTED),
        "outliers": [o.as_status() for o in listed[:MAX_LISTED]],
        "outliersOmitted": max(0, len(listed) - MAX_LISTED),
        "conditions": merge_conditions(
            previous_conditions, run_conditions(run, outliers), generation, now
        ),
        "nextRunAt": rfc3339(next_run_at) if next_run_at else None,
    }
    if run.completed_at is not None:
        status["lastCompletedRun"] = run_info(run)
    return status


def build_invalid_status(
    errors: Sequence[str],
    *,
    generation: int,
    previous_conditions: Sequence[dict[str, Any]],
    now: float,
) -> dict[str, Any]:
    return {
        "observedGeneration": generation,
        "phase": "Invalid",
        "nextRunAt": None,
        "conditions": merge_conditions(
            previous_conditions, invalid_conditions(errors), generation, now
        ),
    }
