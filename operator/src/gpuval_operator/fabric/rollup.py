"""Pure: the fabric part of the GpuValidation status (gpuval_api.fabric.summary), bounded: counts,
the few worst groups, the slow groups, the groups forming now (the gang wait), one display line.
Before the run-wide comparison the figures are the agents' own; after it, the settled verdicts.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

from gpuval_api import Verdict
from gpuval_api.fabric import FabricConfig
from gpuval_api.fabric.summary import MAX_LISTED_GROUPS
from gpuval_api.report import rfc3339
from gpuval_operator.fabric.lifecycle import formed, gang_broken
from gpuval_operator.fabric.paths import PathFinding
from gpuval_operator.fabric.plan import gang_deadline
from gpuval_operator.fabric.state import FabricState, Member
from gpuval_operator.fabric.trainverdicts import TrainClassification, mismatch_message
from gpuval_operator.fabric.verdicts import GroupOutcome

_RANK = {Verdict.FAILED: 2, Verdict.NOT_RUN: 1, Verdict.PASSED: 0}


def _stamp(epoch: float | None) -> str | None:
    return None if epoch is None else rfc3339(datetime.fromtimestamp(epoch, UTC))


def node_counts(run: FabricState) -> dict[str, int]:
    """Nodes by fabric verdict: the settled one, else the worst of their groups' results so far
    (pending until every group of theirs is in)."""
    counts = {"total": len(run.groups_of), "pending": 0, "passed": 0, "failed": 0, "notRun": 0}
    key = {Verdict.PASSED: "passed", Verdict.FAILED: "failed", Verdict.NOT_RUN: "notRun"}
    settled = run.classification.nodes if run.classification is not None else None
    for node, groups in run.groups_of.items():
        verdict: Verdict | None = None
        if settled is not None:
            final = settled.get(node)
            # In no group compared: alone in its domain with no cross-domain group (untested).
            verdict = final.verdict if final is not None else Verdict.NOT_RUN
        else:
            for name in groups:
                group = run.groups[name]
                results = run.group_results(group)
                if results is None:
                    verdict = None
                    break
                mine = results[group.plan.nodes.index(node)].verdict
                verdict = mine if verdict is None or _RANK[mine] > _RANK[verdict] else verdict
        counts[key[verdict] if verdict is not None else "pending"] += 1
    return counts


def _clean(entry: dict[str, Any]) -> dict[str, Any]:
    """A list entry without its empty fields: a merge patch stores a list as given, nulls and
    all, and the schema refuses a null where it expects a string."""
    return {k: v for k, v in entry.items() if v is not None}


def _train_figure(run: FabricState, group: str) -> float | None:
    facts = run.train.get(group)
    return None if facts is None or facts.figure is None else round(facts.figure, 1)


def _entry(
    outcome: GroupOutcome, message: str | None = None, train: float | None = None
) -> dict[str, Any]:
    worst = outcome.worst
    failing = worst.verdict is not Verdict.PASSED
    reason = str(worst.reason) if failing and worst.reason else None
    said = worst.message if failing else ""
    if not failing and outcome.paths:
        reason, said = str(outcome.paths[0].reason), outcome.paths[0].message
    return {
        "group": outcome.name,
        "domain": outcome.domain or None,
        "nodes": len(outcome.nodes),
        "busbwGBps": outcome.busbw,
        "floorGBps": None if outcome.floor is None else round(outcome.floor, 3),
        "reason": reason,
        "message": (message if message is not None else said)[:1024],
        "trainTokensPerSecondPerGpu": train,
    }


def _path_entry(found: PathFinding) -> dict[str, Any]:
    return {
        "group": found.group,
        "domains": [d[:63] for d in found.domains],
        "nodes": list(found.nodes),
        "reason": str(found.reason),
        "busbwGBps": found.busbw,
        "floorGBps": round(found.floor, 3),
        "message": found.message[:1024],
    }


def _provisional(run: FabricState) -> list[dict[str, Any]]:
    """The groups with results so far, their busbw as the agents measured it."""
    entries = []
    for group in run.groups.values():
        results = run.group_results(group) if group.size > 1 else None
        if results is None:
            continue
        worst = max(results, key=lambda r: _RANK[r.verdict])
        failing = worst.verdict is not Verdict.PASSED
        entries.append(
            {
                "group": group.name,
                "domain": group.plan.domain or None,
                "nodes": group.size,
                "busbwGBps": run.busbw.get(group.name),
                "floorGBps": None,
                "reason": str(worst.reason) if failing and worst.reason else None,
                "message": worst.message[:1024] if failing else "",
                "trainTokensPerSecondPerGpu": _train_figure(run, group.name),
            }
        )
    return entries


def _order(entry: dict[str, Any]) -> tuple[int, float]:
    busbw = entry["busbwGBps"]
    return (0 if entry["reason"] else 1, busbw if busbw is not None else math.inf)


# A pending pod the scheduler has not yet said anything about (then its words replace this).
NOT_SCHEDULED_YET = "not scheduled yet"


def _rank_state(run: FabricState, member: Member) -> str:
    """Where a member's fabric pod is, in a few words."""
    if run.started(member):
        return "started"
    if member.refused is not None:
        return f"refused: {member.refused}"[:256]
    pod = run.pods.get(member.pod)
    if pod is None:
        return "pod not made yet"
    if not pod.pod.scheduled:
        return f"pending: {pod.pod.unschedulable or NOT_SCHEDULED_YET}"[:256]
    waiting = f" ({pod.pod.waiting_reason})" if pod.pod.waiting_reason else ""
    return f"scheduled, its container not started{waiting}"[:256]


def group_waits(run: FabricState, config: FabricConfig) -> list[dict[str, Any]]:
    """The groups forming now (opened, not all their pods started, not given up), as
    `status.fabric.waiting` lists them: who joined, who is awaited and why, the gang deadline;
    the nearest deadline first."""
    found: list[tuple[float, dict[str, Any]]] = []
    for group in run.groups.values():
        if group.opened_at is None or run.done(group) or formed(run, group):
            continue
        if gang_broken(run, group):
            continue
        deadline = gang_deadline(config, group.opened_at, run.pod_started_at(group.members[0]))
        ranks = [
            {"rank": m.rank, "node": m.node, "state": _rank_state(run, m)} for m in group.members
        ]
        found.append(
            (
                deadline,
                {
                    "group": group.name,
                    "nodes": group.size,
                    "joined": [r for r in ranks if r["state"] == "started"],
                    "waitingFor": [r for r in ranks if r["state"] != "started"],
                    "gangDeadline": _stamp(deadline),
                },
            )
        )
    return [entry for _, entry in sorted(found, key=lambda f: (f[0], f[1]["group"]))]


def summary_line(run: FabricState, counts: dict[str, int] | None = None) -> str:
    """One line for the printer column and the Events (`counts`: node_counts, when known)."""
    if not run.planned:
        return "waiting for the local checks"
    counts = counts or node_counts(run)
    groups = [g for g in run.groups.values() if g.size > 1]
    done = sum(1 for g in groups if run.done(g))
    figures = [run.busbw[g.name] for g in groups if g.name in run.busbw]
    worst = f"; worst {min(figures):.1f} GB/s" if figures else ""
    if run.classification is None:
        return f"{done}/{len(groups)} groups done{worst}"
    parts = [f"{counts['passed']}/{counts['total']} passed"]
    if counts["failed"]:
        parts.append(f"{counts['failed']} failed")
    if counts["notRun"]:
        parts.append(f"{counts['notRun']} not run")
    slow = sum(1 for g in run.classification.groups if g.slow)
    if slow:
        parts.append(f"{slow} slow groups")
    paths = len(run.classification.paths)
    if paths:
        parts.append(f"{paths} slow {'path' if paths == 1 else 'paths'} between domains")
    train = run.classification.train
    if train is not None and train.slow:
        parts.append(f"{len(train.slow)} slow training groups")
    if train is not None and train.mismatched:
        count = len(train.mismatched)
        parts.append(f"training losses differ in {count} {'group' if count == 1 else 'groups'}")
    return ", ".join(parts) + worst


def _rounded(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


def train_status(found: TrainClassification) -> dict[str, Any]:
    """`status.fabric.train`: the training phase's comparison, bounded."""
    slow = sorted(found.slow, key=lambda g: g.figure or 0.0)
    mismatched = sorted(found.mismatched, key=lambda g: g.name)
    return {
        "medianPairTokensPerSecondPerGpu": _rounded(found.median_pair),
        "crossMedianPairTokensPerSecondPerGpu": _rounded(found.cross_median_pair),
        "slowGroups": [
            _clean(
                {
                    "group": g.name,
                    "domain": g.domain or None,
                    "nodes": len(g.nodes),
                    "tokensPerSecondPerGpu": _rounded(g.figure),
                    "stepSeconds": _rounded(g.step_seconds, 5),
                    "floor": _rounded(g.floor),
                    "message": (
                        f"training below its floor {g.floor or 0:,.0f} tokens/s per GPU (groups "
                        f"of {len(g.nodes)} nodes across the run); no node stands out, none is "
                        "named"
                    ),
                }
            )
            for g in slow[:MAX_LISTED_GROUPS]
        ],
        "slowGroupsOmitted": max(0, len(slow) - MAX_LISTED_GROUPS),
        "mismatchedGroups": [
            {
                "group": g.name,
                "nodes": list(g.nodes),
                "step": g.mismatch.step,
                "message": mismatch_message(g.mismatch)[:1024],
            }
            for g in mismatched[:MAX_LISTED_GROUPS]
            if g.mismatch is not None
        ],
        "mismatchedGroupsOmitted": max(0, len(mismatched) - MAX_LISTED_GROUPS),
    }


def build_fabric_run_status(run: FabricState) -> dict[str, Any]:
    """`status.fabric` of the GpuValidation for the run's fabric phase."""
    found = run.classification
    if found is not None:
        listed = sorted(
            (_entry(g, train=_train_figure(run, g.name)) for g in found.groups), key=_order
        )
        slow = [g for g in found.groups if g.slow]
        slow_entries = [
            _entry(
                g,
                f"below its floor {g.floor or 0:.1f} GB/s (groups of {len(g.nodes)} nodes "
                "across the run); no node stands out, none is named",
            )
            for g in sorted(slow, key=lambda g: g.busbw or 0.0)
        ]
        median, cross = found.median_pair, found.cross_median_pair
        paths = [_path_entry(p) for p in found.paths]
    else:
        listed, slow_entries = sorted(_provisional(run), key=_order), []
        median, cross, paths = None, None, []
    groups = [g for g in run.groups.values() if g.size > 1]
    counts = node_counts(run)
    return {
        "summary": summary_line(run, counts)[:256],
        "startedAt": _stamp(run.started_at),
        "completedAt": _stamp(run.completed_at),
        "groups": len(groups),
        "groupsDone": sum(1 for g in groups if run.done(g)),
        "nodes": counts,
        "medianPairGBps": None if median is None else round(median, 3),
        "crossMedianPairGBps": None if cross is None else round(cross, 3),
        "worstGroups": [_clean(e) for e in listed[:MAX_LISTED_GROUPS]],
        "slowGroups": [_clean(e) for e in slow_entries[:MAX_LISTED_GROUPS]],
        "slowGroupsOmitted": max(0, len(slow_entries) - MAX_LISTED_GROUPS),
        "waiting": run.waits[:MAX_LISTED_GROUPS],
        "waitingOmitted": max(0, len(run.waits) - MAX_LISTED_GROUPS),
        "slowPaths": [_clean(e) for e in paths[:MAX_LISTED_GROUPS]],
        "slowPathsOmitted": max(0, len(paths) - MAX_LISTED_GROUPS),
        "train": train_status(found.train) if found is not None and found.train else None,
    }
