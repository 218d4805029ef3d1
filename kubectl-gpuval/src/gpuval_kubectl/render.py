"""What `kubectl gpuval status` prints: every GpuValidation one line each, or one in detail, both
opened by the healthy capacity line (its GPUs proven healthy of those selected); the detail then
says its run, a systemic failure and held node actions, failing nodes with reason and hint, the
rest of their hardware state (warnings), the fabric's findings, the run against its baselines,
outliers, kubectl style; and what `kubectl gpuval release` says. Pure."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import datetime

from gpuval_api import ConditionType, ValidationPhase
from gpuval_api.baselinemodel import BaselineRunStatus
from gpuval_api.capacity import NODE_STATES, STATE_WORDS, CapacityState
from gpuval_api.checks import CheckName
from gpuval_api.crd import (
    CapacityCounts,
    CapacityStatus,
    ConditionStatus,
    GpuValidation,
    ProofStatus,
    RemediationStatus,
    RepairNode,
)
from gpuval_api.fabric.summary import FabricRankWait
from gpuval_api.release import Release
from gpuval_api.remediation import RepairState, repairs_text
from gpuval_api.views import FAILED, FleetView, UnitView

# Lines of `status NAME` per section before the rest are counted, so 500 failing nodes stay
# readable; the HTML report lists them all.
MAX_LINES = 20


def _summary_line(validation: GpuValidation) -> list[str]:
    status = validation.status
    counts = status.nodes if status and status.nodes else None
    uniform = next(
        (
            c.status
            for c in (status.conditions if status else [])
            if c.type == ConditionType.UNIFORM
        ),
        "",
    )
    return [
        validation.metadata.name,
        (status.phase if status and status.phase else ValidationPhase.PENDING),
        str(counts.total if counts else 0),
        str(counts.passed if counts else 0),
        str(counts.failed if counts else 0),
        str(uniform),
        (status.run.started_at if status and status.run else ""),
    ]


def columns(rows: Sequence[Sequence[str]], indent: str = "") -> str:
    """Rows as left-aligned columns, kubectl style."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        indent + "   ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def render_list(validations: Sequence[GpuValidation]) -> str:
    """One line per validation, opened by each one's healthy capacity (the figure first)."""
    if not validations:
        return "No GpuValidations found."
    header = ["NAME", "PHASE", "NODES", "PASSED", "FAILED", "UNIFORM", "RUN STARTED"]
    opening = [
        f"{v.metadata.name}: {capacity_line(v.status.capacity)}"
        for v in validations
        if v.status is not None and v.status.capacity is not None
    ]
    return "\n".join([*opening, columns([header, *(_summary_line(v) for v in validations)])])


def _count(counts: CapacityCounts, state: CapacityState) -> int:
    return int(getattr(counts, state.name.lower()))


def capacity_line(capacity: CapacityStatus) -> str:
    """Healthy capacity in one line: the proven-healthy GPUs of the selected ones, the others by
    state, and the nodes (docs/operator/capacity.md)."""
    gpus, nodes = capacity.gpus, capacity.nodes
    total = sum(_count(gpus, s) for s in CapacityState)
    healthy = _count(gpus, CapacityState.HEALTHY)
    share = f" ({100.0 * healthy / total:.1f} %)" if total else ""
    line = f"Healthy capacity: {healthy} of {total} GPUs{share} proven healthy"
    others = [
        f"{_count(gpus, s)} {STATE_WORDS[s]}"
        for s in CapacityState
        if s is not CapacityState.HEALTHY and _count(gpus, s)
    ]
    if others:
        line += "; " + ", ".join(others)
    node_total = sum(_count(nodes, s) for s in NODE_STATES)
    line += f"; nodes: {_count(nodes, CapacityState.HEALTHY)} of {node_total} healthy"
    return line


def _more(total: int) -> list[str]:
    return (
        [f"  ... and {total - MAX_LINES} more (kubectl gpuval report NAME --html FILE lists all)"]
        if total > MAX_LINES
        else []
    )


def render_status(view: FleetView, validation: GpuValidation, now: float | None = None) -> str:
    """`status NAME`: the run, verdict counts, conditions, failing nodes with hints, the fabric's
    findings and the groups it waits for (time left counted from `now`, epoch seconds), outliers.
    """
    counts = ", ".join(f"{verdict} {n}" for verdict, n in view.counts.items()) or "no reports yet"
    capacity = validation.status.capacity if validation.status else None
    lines = [capacity_line(capacity)] if capacity is not None else []
    lines.append(
        f"{view.title}: {view.phase}, run {view.run or '-'}, {len(view.units)} nodes ({counts})"
    )
    lines += _hold_lines(view)
    if view.conditions:
        lines.append("Conditions:")
        lines += [f"  {t}={s} ({r}): {m}" for t, s, r, m in view.conditions]
    failures = view.failures
    lines.append(
        f"Failing nodes: {len({f.unit for f in failures})}" if failures else "Failing nodes: none"
    )
    for failure in failures[:MAX_LINES]:
        gpu = f" GPU {failure.gpu}" if failure.gpu is not None else ""
        lines.append(f"  {failure.unit}  {failure.check}{gpu}  {failure.reason}: {failure.message}")
        if failure.hint:
            lines.append(f"      hint: {failure.hint}")
    lines += _more(len(failures))
    if view.failing_omitted:
        lines.append(f"  ({view.failing_omitted} more failing nodes beyond the status' list)")
    if view.others:
        lines.append(f"Not judged: {len(view.others)}")
        lines += [
            f"  {u.name}  {u.verdict}  {u.reason or ''}  {u.message}".rstrip()
            for u in view.others[:MAX_LINES]
        ]
        lines += _more(len(view.others))
    lines += _device_health_lines(view)
    lines += _state_lines(view)
    lines += _fabric_lines(view)
    lines += _waiting_lines(validation, now)
    lines += baseline_lines(validation.status.baseline if validation.status else None)
    lines += repair_lines(validation.status.remediation if validation.status else None)
    lines += proof_lines(validation.status.proof if validation.status else None)
    lines += _outlier_lines(view, validation)
    return "\n".join(lines)


def proof_lines(proof: ProofStatus | None) -> list[str]:
    """spec.maxProofAgeSeconds: the nodes proven within the age, the oldest proof, the next run."""
    if proof is None:
        return []
    line = (
        f"Proof age: {proof.within_age} of {proof.within_age + proof.stale} nodes proven within "
        f"{proof.max_age_seconds}s, {proof.stale} stale; oldest proof {proof.oldest or 'none'}"
    )
    if proof.next_expiry_at:
        line += f"; next proof-expired run {proof.next_expiry_at}"
    return [line]


def _device_health_lines(view: FleetView) -> list[str]:
    """The kubelet's word on claimed devices that are not Healthy (spec.agent.devices dra)."""
    found = view.unhealthy_devices
    if not found:
        return []
    lines = [f"Unhealthy devices (the kubelet's word): {len(found)}"]
    for line in found[:MAX_LINES]:
        why = f": {line.message}" if line.message else ""
        lines.append(f"  {line.unit}  {line.resource_id}  {line.health}{why}")
    return lines + _more(len(found))


def _seconds_between(start: str | None, end: str | None) -> str:
    try:
        first = datetime.fromisoformat((start or "").replace("Z", "+00:00"))
        last = datetime.fromisoformat((end or "").replace("Z", "+00:00"))
    except ValueError:
        return ""
    return f" ({(last - first).total_seconds():.0f}s after it failed)"


def repair_path(node: RepairNode) -> str:
    """One node's way through the repair loop, in the order it happened: failed, repair asked
    (which, when), ended (how), re-validated (passed or failed), back in service; a failure after
    it came back (a flapping node); then where it stands."""
    back = node.back_in_service_at
    passed = bool(back) and bool(node.revalidated_at) and back == node.revalidated_at
    # A node back in service that failed later (a flapping node): its record keeps the new failure.
    again = bool(node.failed_at and back and node.failed_at > back)
    dated: list[tuple[str, str]] = [
        (
            node.failed_at or "",
            f"{'failed again' if again else 'failed'} {node.failed_at or ''}".strip(),
        )
    ]
    if node.requested_at:
        what = f" ({node.object})" if node.object else ""
        asked = f"{node.action} asked {node.requested_at}{what}, repair {node.repairs}"
        dated.append((node.requested_at, asked))
    if node.ended_at and node.state == RepairState.CANCELLED:
        cancelled = f"cancelled {node.ended_at} (its object deleted before it ended)"
        dated.append((node.ended_at, cancelled))
    elif node.ended_at:
        dated.append((node.ended_at, f"ended {node.ended_at} ({node.ended_by})"))
    if node.revalidated_at:
        outcome = "passed" if passed else "failed"
        dated.append((node.revalidated_at, f"re-validated {node.revalidated_at}: {outcome}"))
    if back and node.state != RepairState.REVALIDATING:
        withdrawn = node.state == RepairState.WITHDRAWN
        note = " (passed before its repair ended: request withdrawn)" if withdrawn else ""
        took = "" if again else _seconds_between(node.failed_at, back)
        dated.append((back, f"back in service {back}{note}{took}"))
    steps = [text for _, text in sorted(dated, key=lambda d: d[0])]
    if node.state == RepairState.NEEDS_REPAIR:
        steps.append(
            f"not back: needs repair by a person after {repairs_text(node.repairs)} within "
            "the window"
        )
    elif node.state == RepairState.REVALIDATING:
        steps.append("being validated again under load")
    elif node.state == RepairState.REQUESTED:
        steps.append("waiting for the engine")
    elif node.state == RepairState.CANCELLED:
        steps.append("not counted; asked again only if it fails anew")
    return " -> ".join(steps)


def repair_lines(status: RemediationStatus | None) -> list[str]:
    """spec.remediation: each node in the repair loop, its path with times."""
    if status is None:
        return []
    lines = [
        f"Repairs: {status.in_repair} in repair, {status.needs_repair} need repair by a person"
    ]
    for node in status.nodes[:MAX_LINES]:
        lines.append(f"  {node.node}  {node.state}  {node.reason}: {repair_path(node)}")
    hidden = max(0, len(status.nodes) - MAX_LINES) + status.nodes_omitted
    if hidden:
        lines.append(f"  ... and {hidden} more")
    return lines


def _hold_lines(view: FleetView) -> list[str]:
    """One line each when the API server refuses the agent pods or the repair requests, when the
    run's failures look systemic and when node actions are held: the likely cause, before the
    node-by-node detail."""
    said: dict[str, str] = {
        ConditionType.AGENT_PODS_REFUSED: "Agent pods refused (the cluster, not the nodes)",
        ConditionType.SYSTEMIC_FAILURE: "Likely systemic (the spec or the stack, not the nodes)",
        ConditionType.NODE_ACTIONS_HELD: "Node actions held",
        ConditionType.REPAIR_REQUESTS_REFUSED: "Repair requests refused (nothing asked yet)",
    }
    return [
        f"{said[kind]}: {message}"
        for kind, status, _, message in view.conditions
        if kind in said and status == ConditionStatus.TRUE
    ]


def _listed(view: FleetView) -> dict[tuple[str, str], list[str]]:
    """(node, reason) -> the messages of the state failures `Failing nodes` lists (a report's
    first 16, each cut to one line)."""
    listed: dict[tuple[str, str], list[str]] = {}
    for failure in view.failures:
        if failure.check == CheckName.STATE:
            key = (failure.unit, failure.reason)
            listed.setdefault(key, []).append(failure.message.removesuffix("…"))
    return listed


def _state_lines(view: FleetView) -> list[str]:
    """What the state check found on the failing nodes that `Failing nodes` does not list
    already: its warnings, and errors past a report's first 16 failures; each reason's hint once
    per node."""
    failing = {u.name for u in view.units if u.verdict == FAILED}
    listed = _listed(view)
    found = [
        line
        for line in view.state
        if line.unit in failing
        and not any(
            line.message.startswith(shown) for shown in listed.get((line.unit, line.reason), [])
        )
    ]
    if not found:
        return []
    lines = [f"More state of failing nodes (state check, not listed above): {len(found)}"]
    hinted: set[tuple[str, str]] = set()
    for line in found[:MAX_LINES]:
        lines.append(f"  {line.unit}  {line.severity}  {line.reason}: {line.message}")
        if line.hint and (line.unit, line.reason) not in hinted:
            hinted.add((line.unit, line.reason))
            lines.append(f"      hint: {line.hint}")
    return lines + _more(len(found))


def _fabric_lines(view: FleetView) -> list[str]:
    """The fabric phase (spec.fabric): its summary, the nodes it named, the nodes it did not test
    or could not tell from their partner (a FabricSlowPair names both ends), the slow paths
    between topology domains it found (with the nodes they were tested through)."""
    if not view.fabric_summary:
        return []
    named, untested = view.fabric_named, view.fabric_not_run
    lines = [f"Fabric: {view.fabric_summary}"]
    lines += _fabric_units(named)
    if untested:
        lines.append(f"  Not tested by the fabric (no evidence against them): {len(untested)}")
        lines += _fabric_units(untested)
    for path in view.fabric_paths:
        through = f" (through {', '.join(path.nodes)})" if path.nodes else ""
        lines.append(f"  path {' - '.join(path.domains)}{through}  {path.reason}: {path.message}")
    if view.fabric_paths_omitted:
        lines.append(f"  ... and {view.fabric_paths_omitted} more slow paths")
    return lines


def _fabric_units(units: Sequence[UnitView]) -> list[str]:
    lines = [
        f"  {unit.name}  group {unit.fabric.group}  {unit.fabric.reason}: {unit.fabric.message}"
        for unit in units[:MAX_LINES]
        if unit.fabric is not None
    ]
    return lines + _more(len(units))


def _ranks(ranks: Sequence[FabricRankWait], with_state: bool) -> str:
    def one(r: FabricRankWait) -> str:
        state = f": {r.state}" if with_state and r.state else ""
        return f"rank {r.rank} ({r.node}{state})"

    return ", ".join(one(r) for r in ranks) or "none"


def _waiting_lines(validation: GpuValidation, now: float | None) -> list[str]:
    """The fabric groups forming now: who joined, who is awaited and why, the time left before
    the group is given up (status.fabric.waiting)."""
    fabric = validation.status.fabric if validation.status else None
    if fabric is None or not fabric.waiting:
        return []
    lines = [f"Fabric groups forming: {len(fabric.waiting) + fabric.waiting_omitted}"]
    for wait in fabric.waiting:
        left = ""
        if wait.gang_deadline:
            deadline = datetime.fromisoformat(wait.gang_deadline).timestamp()
            seconds = max(0.0, deadline - (time.time() if now is None else now))
            left = f"; {seconds:.0f} s left of fabric.timeouts.gangSeconds"
        lines.append(
            f"  group {wait.group}: waits for {_ranks(wait.waiting_for, True)}; joined: "
            f"{_ranks(wait.joined, False)}{left}"
        )
    if fabric.waiting_omitted:
        lines.append(f"  ({fabric.waiting_omitted} more groups forming)")
    return lines


def _outlier_lines(view: FleetView, validation: GpuValidation) -> list[str]:
    rows = [
        [
            o.unit,
            o.figure.label,
            f"{o.value:.1f} {o.figure.unit}",
            f"{o.against_median} {o.median:.1f}"
            if not o.figure.lower or o.median > 0
            else o.against_median,
        ]
        for o in view.outliers
    ]
    status = validation.status
    rows += [
        [o.node, o.field, o.value, f"expected {o.expected} ({o.source})"]
        for o in (status.outliers if status else [])
    ]
    if not rows:
        return ["Outliers: none"]
    lines = [f"Outliers: {len(rows)}", columns(rows[:MAX_LINES], "  ")]
    return lines + _more(len(rows))


def _condition(validation: GpuValidation, kind: ConditionType) -> str | None:
    """The message of the validation's condition `kind` when it is True."""
    status = validation.status
    found = next((c for c in (status.conditions if status else []) if c.type == kind), None)
    return found.message if found is not None and found.status == ConditionStatus.TRUE else None


def render_release(validation: GpuValidation, release: Release) -> str:
    """What `release NAME` says: what it released and what the operator does next."""
    name = validation.metadata.name
    held = _condition(validation, ConditionType.NODE_ACTIONS_HELD)
    systemic = _condition(validation, ConditionType.SYSTEMIC_FAILURE)
    what = (
        f"held until now: {held}"
        if held is not None
        else "no node action was held; the nodes now out of service through it are approved"
    )
    lines = [
        f"released GpuValidation {name} (run {release.run or '-'}, at {int(release.at)}): {what}",
        "Released: the held taints and cordons. The operator acts on the held nodes up to "
        "nodeActions.maxNodes again (the nodes out of service before now no longer count against "
        "it; the operator-wide limit still holds) and lifts the run's systemic hold.",
    ]
    remediation = validation.spec.remediation is not None
    if systemic is not None and remediation and release.repair:
        lines.append(
            f"Repairs: asked (--repair) for the nodes of the systemic failure ({systemic}), "
            "up to the limits."
        )
    elif systemic is not None and remediation:
        lines.append(
            f"Not released: repairs. The run says the cause is systemic ({systemic}): no repair "
            f"is asked for those nodes; `kubectl gpuval release --repair {name}` asks for them."
        )
    lines.append(f"`kubectl gpuval status {name}` shows what follows.")
    return "\n".join(lines)


def baseline_lines(status: BaselineRunStatus | None) -> list[str]:
    """`status NAME`: the run against its baselines (spec.baseline)."""
    if status is None:
        return []
    lines = [
        f"Baseline: {status.judged} nodes judged, {status.below} below, "
        f"{status.drifting} drifting from their history"
    ]
    lines += [f"  systemic {s.figure}: {s.message}" for s in status.systemic]
    lines += [
        f"  drifting {d.node}{' (failed)' if d.failed else ''}: {d.message}"
        for d in status.drifting_nodes[:MAX_LINES]
    ]
    lines += [f"  history restarted: {r.message}" for r in status.history_restarted[:MAX_LINES]]
    if status.history_restarted_omitted:
        lines.append(f"  history restarted on {status.history_restarted_omitted} more nodes")
    if status.learned:
        lines.append(f"  learned: {', '.join(status.learned)}")
    lines += [f"  bimodal: {text}" for text in status.bimodal]
    if status.note:
        lines.append(f"  note: {status.note}")
    return lines
