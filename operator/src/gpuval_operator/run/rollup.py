"""Roll-up of a run's nodes into the GpuValidation status: counts, conditions, bounded lists.

Pure functions. The status stays a bounded summary whatever the node count (50 failing nodes and 50
outliers at most, the rest counted), so a validation of 10,000 nodes stays far below etcd's object
size limit.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuval_api import ConditionReason as R
from gpuval_api import ConditionType, ValidationPhase
from gpuval_api.capacity import CapacityState
from gpuval_api.checks import PROFILE_RUNS
from gpuval_api.crd import (
    DEVICE_HEALTHY,
    CapacityCounts,
    CapacityStatus,
    ProofStatus,
    RunTrigger,
)
from gpuval_api.report import StatusKey
from gpuval_operator.capacity import CapacitySummary
from gpuval_operator.fabric.rollup import build_fabric_run_status
from gpuval_operator.names import run_number
from gpuval_operator.proofage import ProofSummary
from gpuval_operator.run.breakerstate import held_condition, systemic_condition
from gpuval_operator.run.refusals import refused_condition
from gpuval_operator.run.state import NodeRecord, Phase, RunState
from gpuval_operator.run.uniformity import Outlier
from gpuval_operator.timestamps import parse_time, rfc3339

MAX_LISTED = 50

SUCCEEDED = ConditionType.SUCCEEDED
NODES_HEALTHY = ConditionType.NODES_HEALTHY
UNIFORM = ConditionType.UNIFORM
INVALID = ConditionType.INVALID
DEVICES_PUBLISHED = ConditionType.DEVICES_PUBLISHED


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


def uniform_condition(
    outliers: Sequence[Outlier] | None, completed: Mapping[str, int] | None = None
) -> Cond:
    """Uniform: Unknown until compared, False naming the nodes that differ, True otherwise.
    `completed` is the run's counts once it completed: a completed run without outliers had no
    environment to compare, and says so and why, instead of promising a comparison."""
    if outliers is None and completed is not None:
        counts = ", ".join(
            f"{completed.get(key, 0)} {said}"
            for key, said in (("passed", "passed"), ("failed", "failed"), ("notRun", "not tested"))
        )
        uniform = Cond(
            UNIFORM,
            "Unknown",
            R.NO_ENVIRONMENT,
            f"not compared: none of the run's {completed.get('total', 0)} nodes recorded an "
            f"environment ({counts}); the next run that reads one compares them",
        )
    elif outliers is None:
        uniform = Cond(UNIFORM, "Unknown", R.NOT_COMPARED, "compared when the run completes")
    elif outliers:
        nodes = sorted({o.node for o in outliers})
        first_outlier = outliers[0]
        uniform = Cond(
            UNIFORM,
            "False",
            R.NOT_UNIFORM,
            f"{len(nodes)} nodes differ: {_names(nodes)} (first: {first_outlier.field} "
            f"{first_outlier.value} on {first_outlier.node}, expected {first_outlier.expected})",
        )
    else:
        uniform = Cond(UNIFORM, "True", R.UNIFORM, "every node's environment agrees")
    return uniform


def profile_condition(run: RunState) -> Cond:
    """ProfileOverridden: True naming each check of spec.checks.profile that its section's own
    `enabled: false` keeps off (the section wins, docs/agent.md "Profiles"), else False."""
    kind, profile = ConditionType.PROFILE_OVERRIDDEN, f"spec.checks.profile {run.profile}"
    if run.overridden:
        adds = " and ".join(PROFILE_RUNS[run.profile])
        off = " and ".join(f"spec.checks.{name}.enabled false" for name in run.overridden)
        return Cond(
            kind,
            "True",
            R.ENABLED_FALSE_WINS,
            f"{profile} adds {adds}, but {off} keeps {' and '.join(run.overridden)} off: a "
            "section's own enabled wins over the profile; remove it to run the profile's checks",
        )
    return Cond(kind, "False", R.PROFILE_APPLIED, f"{profile}: every check it names runs")


def run_conditions(run: RunState, outliers: Sequence[Outlier] | None) -> list[Cond]:
    """Succeeded, NodesHealthy, Uniform, Invalid (False), NodeActionsHeld, SystemicFailure,
    AgentPodsRefused, ProfileOverridden and, with spec.remediation, RepairRequestsRefused for a
    valid spec's run.

    `outliers` is None while the run goes on or when no node reported an environment: uniformity is
    then Unknown rather than a premature True.
    """
    return [*_run_conditions(run, outliers), profile_condition(run)]


def _run_conditions(run: RunState, outliers: Sequence[Outlier] | None) -> list[Cond]:
    valid = Cond(INVALID, "False", R.VALID, "the spec is valid")
    if waiting_for_nodes(run):
        message = (
            "no selected node yet (Ready, schedulable, with nvidia.com/gpu): spec.gating "
            "validates each node that joins"
        )
        return [
            Cond(SUCCEEDED, "Unknown", R.WAITING_FOR_NODES, message),
            Cond(NODES_HEALTHY, "Unknown", R.WAITING_FOR_NODES, message),
            Cond(UNIFORM, "Unknown", R.WAITING_FOR_NODES, message),
            valid,
        ]
    if run.completed_at is not None and run.counts()["total"] == 0:
        # An empty selection is almost always a wrong nodeSelector, not a healthy fleet.
        message = "no Ready, schedulable node with nvidia.com/gpu matched spec.nodeSelector"
        return [
            Cond(SUCCEEDED, "False", R.NO_NODES_SELECTED, message),
            Cond(NODES_HEALTHY, "Unknown", R.NO_NODES_SELECTED, message),
            Cond(UNIFORM, "Unknown", R.NO_NODES_SELECTED, message),
            valid,
        ]
    failures = Counter(str(r.reason) for r in run.failed())
    holds = (held_condition(run.breaker, failures, run.validation), systemic_condition(run.breaker))
    refused = refused_condition(run.refused, len(run.refused_nodes()))
    found = [
        _succeeded(run),
        _healthy(run),
        uniform_condition(outliers, run.counts() if run.completed_at is not None else None),
        valid,
        *(Cond(*c) for c in holds),
        Cond(*refused),
    ]
    published = devices_published_condition(run)
    if published is not None:
        found.append(published)
    if run.repair_requests is not None:
        found.append(Cond(*run.repair_requests))
    if run.baseline is not None:
        status, reason, message = run.baseline.condition(run.completed_at is not None)
        found.append(Cond(ConditionType.WITHIN_BASELINE, status, reason, message))
        bimodal = run.baseline.bimodal_condition()
        if bimodal is not None:
            found.append(Cond(ConditionType.BIMODAL, *bimodal))
    return found


def devices_published_condition(run: RunState) -> Cond | None:
    """DevicesPublished (spec.agent.devices dra): False naming the selected nodes for which the
    driver publishes no device (left out of the run), True when every one publishes; None
    without DRA."""
    missing = run.without_devices
    if missing is None:
        return None
    total = len(missing) + run.without_devices_omitted
    if not total:
        return Cond(
            DEVICES_PUBLISHED,
            "True",
            R.ALL_NODES_PUBLISH,
            f"every selected node publishes devices ({len(run.nodes)})",
        )
    message = (
        f"{total} of {total + len(run.nodes)} selected nodes (Ready, schedulable) have no "
        f"device in a ResourceSlice of the DRA driver, so they are not in run {run.run_id}: "
        f"{_names(list(missing))}; is the driver's kubelet plugin running there?"
    )
    return Cond(DEVICES_PUBLISHED, "False", R.NODES_WITHOUT_DEVICES, message)


def unhealthy_devices(run: RunState) -> list[dict[str, str]]:
    """The devices of the run's claims the kubelet does not report Healthy, by node."""
    return [
        {
            "node": record.node,
            "resourceId": fact.resource_id[:512],
            "health": fact.health[:16],
            "message": (fact.message or "")[:1024],
        }
        for node in sorted(run.nodes)
        for record in [run.nodes[node]]
        for fact in record.device_health
        if fact.health != DEVICE_HEALTHY
    ]


def _succeeded(run: RunState) -> Cond:
    counts = run.counts()
    failed = [r.node for r in run.failed()]
    untested = [r.node for r in run.in_phase(Phase.NOT_RUN)]
    done = counts["passed"] + counts["failed"] + counts["notRun"]
    if run.completed_at is None:
        message = f"{done} of {counts['total']} nodes have a verdict"
        if counts["waiting"]:
            message += (
                f"; {counts['running']} running, {counts['waiting']} waiting for the API server "
                "to admit their agent pods (not tested yet: condition AgentPodsRefused)"
            )
        if run.acting is None:
            return Cond(SUCCEEDED, "Unknown", R.RUNNING, message)
        applied, of = run.acting
        message += f"; node actions applied on {applied} of {of}"
        reason = R.APPLYING_NODE_ACTIONS if done == counts["total"] else R.RUNNING
        return Cond(SUCCEEDED, "Unknown", reason, message)
    if failed:
        return Cond(
            SUCCEEDED,
            "False",
            R.NODES_FAILED,
            f"{len(failed)} of {counts['total']} nodes failed: {_names(failed)}",
        )
    if untested:
        return Cond(
            SUCCEEDED,
            "True",
            R.NODES_NOT_RUN,
            f"{counts['passed']} nodes passed; {len(untested)} could not be tested (NotRun, no "
            f"action taken): {_names(untested)}",
        )
    return Cond(SUCCEEDED, "True", R.ALL_NODES_PASSED, f"all {counts['total']} nodes passed")


def _healthy(run: RunState) -> Cond:
    failed = [r.node for r in run.failed()]
    if failed:
        first = run.nodes[failed[0]]
        return Cond(
            NODES_HEALTHY,
            "False",
            R.NODES_FAILED,
            f"{len(failed)} failed: {_names(failed)} (first: {first.reason}: {first.message})",
        )
    if run.completed_at is not None:
        counts = run.counts()
        tested = counts["passed"] + counts["failed"]
        return Cond(
            NODES_HEALTHY, "True", R.ALL_NODES_PASSED, f"every tested node passed ({tested})"
        )
    return Cond(NODES_HEALTHY, "Unknown", R.RUNNING, "no node has failed so far")


def invalid_conditions(errors: Sequence[str]) -> list[Cond]:
    message = "; ".join(errors)
    return [
        Cond(SUCCEEDED, "False", R.INVALID_SPEC, "nothing was scheduled: the spec is invalid"),
        Cond(NODES_HEALTHY, "Unknown", R.INVALID_SPEC, "nothing was validated"),
        Cond(UNIFORM, "Unknown", R.INVALID_SPEC, "nothing was validated"),
        Cond(INVALID, "True", R.INVALID_SPEC, message),
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


def waiting_for_nodes(run: RunState) -> bool:
    """A gating validation with no node yet waits for them: nothing failed, nothing ran."""
    return run.gating and not run.nodes


def announce_completion(run: RunState, budget: int) -> bool:
    """RunCompleted is posted once per end of a run: its first, and again each time arrivals, a
    retry or a revised verdict reopened it and it closed again, at most `budget` ends a run
    (GPUVAL_EVENTS_PER_RUN); never for a gating run that has no node yet (it waits for them)."""
    return not run.announced and not waiting_for_nodes(run) and run.announcements < max(budget, 1)


def phase_of(run: RunState) -> str:
    if run.completed_at is None or waiting_for_nodes(run):
        return ValidationPhase.RUNNING if run.nodes else ValidationPhase.PENDING
    failed = run.failed() or not run.nodes
    return ValidationPhase.FAILED if failed else ValidationPhase.SUCCEEDED


def _listed(records: Sequence[NodeRecord]) -> list[dict[str, str]]:
    return [
        {"node": r.node, "reason": str(r.reason), "message": r.message}
        for r in records[:MAX_LISTED]
    ]


def build_run_status(
    run: RunState, *, previous_conditions: Sequence[dict[str, Any]], now: float
) -> dict[str, Any]:
    """The GpuValidation status body (for a JSON merge patch on /status) of a run."""
    failed = run.failed()
    untested = run.in_phase(Phase.NOT_RUN)
    planned = sorted(run.dry_run.items())
    outliers, generation = run.outliers, run.generation
    listed = outliers or []
    missing = run.without_devices or ()
    unhealthy = unhealthy_devices(run)
    status: dict[str, Any] = {
        "observedGeneration": generation,
        "phase": phase_of(run),
        "run": run_info(run),
        "nodes": run.counts(),
        "failingNodes": _listed(failed),
        "failingNodesOmitted": max(0, len(failed) - MAX_LISTED),
        "notRunNodes": _listed(untested),
        "notRunNodesOmitted": max(0, len(untested) - MAX_LISTED),
        "nodesWithoutDevices": list(missing[:MAX_LISTED]),
        "nodesWithoutDevicesOmitted": max(0, len(missing) - MAX_LISTED)
        + run.without_devices_omitted,
        "unhealthyDevices": unhealthy[:MAX_LISTED],
        "unhealthyDevicesOmitted": max(0, len(unhealthy) - MAX_LISTED),
        "dryRun": [{"node": n, "actions": a[:1024]} for n, a in planned[:MAX_LISTED]],
        "dryRunOmitted": max(0, len(planned) - MAX_LISTED),
        "outliers": [o.as_status() for o in listed[:MAX_LISTED]],
        "outliersOmitted": max(0, len(listed) - MAX_LISTED),
        "conditions": merge_conditions(
            previous_conditions, run_conditions(run, outliers), generation, now
        ),
        "nextRunAt": rfc3339(run.next_run_at) if run.next_run_at else None,
    }
    # The validation's status.fabric has the report's key (gpuval_api.report.StatusKey).
    if run.fabric is not None:
        status[StatusKey.FABRIC] = build_fabric_run_status(run.fabric)
    elif run.completed_at is None:
        status[StatusKey.FABRIC] = None  # a run without a fabric phase: the last one's is gone
    # status.baseline: the run against its baselines, once it completed (the last run's is gone
    # while a run goes on).
    baseline = run.baseline.status if run.baseline is not None else None
    status["baseline"] = (
        baseline.model_dump(mode="json", by_alias=True) if baseline is not None else None
    )
    status["training"] = (
        run.training.model_dump(mode="json", by_alias=True) if run.training is not None else None
    )
    status["remediation"] = run.remediation
    if run.completed_at is not None:
        status["lastCompletedRun"] = run_info(run)
    return status


def proof_status(summary: ProofSummary) -> dict[str, Any]:
    """status.proof (spec.maxProofAgeSeconds): the selected nodes against the age."""
    body = ProofStatus(
        max_age_seconds=int(summary.max_age),
        within_age=summary.within_nodes,
        stale=summary.stale,
        oldest=None if summary.oldest is None else rfc3339(summary.oldest),
        next_expiry_at=rfc3339(summary.next_due) if summary.next_due else None,
    )
    return body.model_dump(mode="json", by_alias=True)


def capacity_status(summary: CapacitySummary) -> dict[str, Any]:
    """status.capacity: the selected GPUs and nodes by healthy-capacity state."""

    def counts(by_state: Mapping[CapacityState, int]) -> CapacityCounts:
        return CapacityCounts.model_validate({str(s): n for s, n in by_state.items()})

    body = CapacityStatus(
        gpus=counts(summary.gpus),
        nodes=counts(summary.nodes),
        healthy_ratio=f"{summary.healthy_ratio:.4f}",
    )
    return body.model_dump(mode="json", by_alias=True)


def build_invalid_status(
    errors: Sequence[str],
    *,
    generation: int,
    previous_conditions: Sequence[dict[str, Any]],
    now: float,
) -> dict[str, Any]:
    return {
        "observedGeneration": generation,
        "phase": ValidationPhase.INVALID,
        "nextRunAt": None,
        "conditions": merge_conditions(
            previous_conditions, invalid_conditions(errors), generation, now
        ),
    }


def run_summary(run: RunState, outliers: Sequence[Outlier] | None) -> str:
    """One line about a completed run, for its RunCompleted Event and the log: the figures of
    this end, saying when it was and whether the run had ended before (it reopened)."""
    counts = run.counts()
    again = " again" if run.announcements else ""
    when = f" at {rfc3339(run.completed_at)}" if run.completed_at is not None else ""
    summary = (
        f"run {run.run_id} completed{again}{when}: {counts['passed']} passed, "
        f"{counts['failed']} failed, {counts['notRun']} not tested of {counts['total']}"
    )
    if outliers:
        summary += f"; {len({o.node for o in outliers})} nodes not uniform"
    return summary


def read_run(name: str, status: Mapping[str, Any], *, fabric: bool) -> RunState | None:
    """The run `build_run_status` recorded, rebuilt for an operator that restarted (its nodes come
    back from its reports; its fabric phase, when `fabric` and the run goes on, from its reports
    and pods); None when the status records none."""
    info = status.get("run")
    if not info:
        return None
    run = RunState(
        validation=name,
        run_id=info["id"],
        number=int(info.get("number") or run_number(info["id"])),
        generation=int(info.get("generation") or 0),
        trigger=info.get("trigger") or RunTrigger.CREATED,
        started_at=parse_time(info.get("startedAt")) or 0.0,
        completed_at=parse_time(info.get("completedAt")),
        next_run_at=parse_time(status.get("nextRunAt")),
    )
    # A run the status shows completed with nodes was announced (RunCompleted) by whoever closed
    # it; one with none (a gating run still waiting) announces its first real close.
    run.announced = run.completed_at is not None and bool((status.get("nodes") or {}).get("total"))
    run.announcements = int(run.announced)
    if fabric and run.completed_at is None:
        run.expect_fabric(parse_time((status.get(StatusKey.FABRIC) or {}).get("startedAt")))
    conditions = {c.get("type") for c in status.get("conditions") or []}
    if DEVICES_PUBLISHED in conditions:
        run.without_devices = tuple(status.get("nodesWithoutDevices") or ())
        run.without_devices_omitted = int(status.get("nodesWithoutDevicesOmitted") or 0)
    return run
