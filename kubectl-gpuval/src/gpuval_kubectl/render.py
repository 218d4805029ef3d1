"""What `kubectl gpuval status` prints: every GpuValidation one line each, or one in detail (its
run, failing nodes with reason and hint, the rest of their hardware state (warnings), the fabric's
findings, outliers), kubectl style. Pure."""

from __future__ import annotations

from collections.abc import Sequence

from gpuval_api.checks import CheckName
from gpuval_api.conditions import ConditionType, ValidationPhase
from gpuval_api.crd import GpuValidation
from gpuval_api.views import FAILED, FleetView

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
    lines += _state_lines(view)
    lines += _fabric_lines(view)
    lines += _outlier_lines(view, validation)
    return "\n".join(lines)


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
