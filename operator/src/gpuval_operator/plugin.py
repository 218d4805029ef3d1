"""`kubectl gpuval`: the kubectl plugin (the `kubectl-gpuval` script of this package).

    kubectl gpuval status              every GpuValidation, one line each
    kubectl gpuval status NAME         its run, failing nodes with reason and hint, and outliers
    kubectl gpuval report NAME --html FILE   a self-contained HTML page with plots (report extra)

It reads with the kubeconfig (--kubeconfig, $KUBECONFIG or ~/.kube/config) through the operator's
raw-JSON client; objects written by a newer gpuval are read with their unknown fields dropped.
Exit codes: 0 shown, 1 the API or the file said no (the message says why), 2 bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path

from gpuval_api import keys
from gpuval_api.conditions import ConditionType, ValidationPhase
from gpuval_api.crd import API_VERSION, GpuNodeReport, GpuValidation
from gpuval_api.lenient import read_model
from gpuval_api.views import FleetView, UnitView, fleet_of_units, node_unit
from gpuval_operator import names
from gpuval_operator.kube.client import ApiError, KubeClient, ResourceExpiredError, q
from gpuval_operator.kube.credentials import CredentialsError, load_credentials

VALIDATIONS = f"/apis/{API_VERSION}/gpuvalidations"
REPORTS = f"/apis/{API_VERSION}/gpunodereports"
# Lines of `status NAME` per section before the rest are counted, so 500 failing nodes stay
# readable; the HTML report lists them all.
MAX_LINES = 20


class PluginError(Exception):
    """What kubectl gpuval tells the user instead of a traceback."""


async def _units(client: KubeClient, selector: str) -> list[UnitView]:
    """The reports' units, a page of 500 reports at a time: a report carries the agent's whole
    result document, so thousands of them are never held at once."""
    while True:
        units: list[UnitView] = []
        try:
            async for page, _, _ in client.pages(REPORTS, selector):
                units.extend(node_unit(read_model(GpuNodeReport, item)) for item in page)
        except ResourceExpiredError:
            continue  # the list changed too much to go on paging: start again
        return units


async def _fetch(
    kubeconfig: str | None, name: str | None
) -> tuple[list[GpuValidation], list[UnitView]]:
    """The named GpuValidation with its current run's node units, or every GpuValidation."""
    try:
        credentials = load_credentials(kubeconfig)
    except CredentialsError as error:  # it names the file, the entry and the field
        raise PluginError(f"cannot use the kubeconfig: {error}") from None
    async with KubeClient(credentials, max_retries=2) as client:
        try:
            if name is None:
                items, _ = await client.list_pages(VALIDATIONS)
                return [read_model(GpuValidation, item) for item in items], []
            body = await client.get_or_none(f"{VALIDATIONS}/{q(name)}")
            if body is None:
                raise PluginError(
                    f"GpuValidation {name!r} not found; `kubectl get gpuvalidations` lists them"
                )
            validation = read_model(GpuValidation, body)
            run = validation.status.run if validation.status else None
            if run is None:
                return [validation], []
            selector = (
                f"{keys.LABEL_VALIDATION}={names.label_value(name)},{keys.LABEL_RUN}={run.id}"
            )
            return [validation], await _units(client, selector)
        except ApiError as error:
            raise PluginError(f"the API server refused: {error}") from None


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


def write_html(view: FleetView, path: Path) -> Path:
    try:
        from gpuval_report import write_page  # noqa: PLC0415 - optional, heavy (plotly)
    except ImportError:
        raise PluginError(
            "kubectl gpuval report needs the report extra: pip install 'gpuval-operator[report]'"
        ) from None
    try:
        return write_page(view, path)
    except OSError as error:
        raise PluginError(f"--html {str(path)!r}: cannot write the report: {error}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kubectl gpuval", description="See gpuval's verdicts.")
    parser.add_argument(
        "--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    status = sub.add_parser("status", help="every GpuValidation, or one in detail")
    status.add_argument("name", nargs="?", help="a GpuValidation's name")
    report = sub.add_parser("report", help="write a self-contained HTML report of a GpuValidation")
    report.add_argument("name", help="a GpuValidation's name")
    report.add_argument(
        "--html", required=True, type=Path, metavar="FILE", help="where to write it"
    )
    return parser


def run(args: argparse.Namespace) -> str:
    validations, units = asyncio.run(_fetch(args.kubeconfig, args.name))
    if args.name is None:
        return render_list(validations)
    view = fleet_of_units(validations[0], units)
    if args.command == "report":
        path = write_html(view, args.html)
        return f"wrote {path.resolve()} ({len(view.units)} nodes)"
    return render_status(view, validations[0])


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        print(run(args))
    except PluginError as error:
        print(f"kubectl gpuval: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
