"""What `kubectl gpuval status` prints: every GpuValidation one line each, or one in detail (its
run, failing nodes with reason and hint, the fabric's findings, the run against its baselines,
outliers), kubectl style. Pure."""

from __future__ import annotations

from collections.abc import Sequence

from gpuval_api.baseline.model import BaselineRunStatus
from gpuval_api.conditions import ConditionType, ValidationPhase
from gpuval_api.crd import GpuValidation
from gpuval_api.views import FleetView

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
    if not validations:
        return "No GpuValidations found."
    header = ["NAME", "PHASE", "NODES", "PASSED", "FAILED", "UNIFORM", "RUN STARTED"]
    return columns([header, *(_summary_line(v) for v in validations)])


def _more(total: int) -> list[str]:
    return (
        [f"  ... and {total - MAX_LINES} more (kubectl gpuval report NAME --html FILE lists all)"]
        if total > MAX_LINES
        else []
    )


def render_status(view: FleetView, validation: GpuValidation) -> str:
    """`status NAME`: the run, verdict counts, conditions, failing nodes with hints, outliers."""
    counts = ", ".join(f"{verdict} {n}" for verdict, n in view.counts.items()) or "no reports yet"
    lines = [
        f"{view.title}: {view.phase}, run {view.run or '-'}, {len(view.units)} nodes ({counts})"
    ]
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
    lines += _fabric_lines(view)
    lines += baseline_lines(validation.status.baseline if validation.status else None)
    lines += _outlier_lines(view, validation)
    return "\n".join(lines)


def _fabric_lines(view: FleetView) -> list[str]:
    """The fabric phase (spec.fabric): its summary and the nodes it named."""
    if not view.fabric_summary:
        return []
    named = view.fabric_named
    lines = [f"Fabric: {view.fabric_summary}"]
    for unit in named[:MAX_LINES]:
        found = unit.fabric
        if found is not None:
            lines.append(f"  {unit.name}  group {found.group}  {found.reason}: {found.message}")
    return lines + _more(len(named))


def _outlier_lines(view: FleetView, validation: GpuValidation) -> list[str]:
    rows = [
        [
            o.unit,
            o.figure.label,
            f"{o.value:.1f} {o.figure.unit}",
            f"{o.ratio:.0%} of median {o.median:.1f}",
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
    if status.learned:
        lines.append(f"  learned: {', '.join(status.learned)}")
    if status.note:
        lines.append(f"  note: {status.note}")
    return lines
