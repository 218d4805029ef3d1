"""Pure: what is done with baselines and history over a run's GpuNodeReports
(docs/operator/baselines.md,
"Baselines and history"): by the operator (which keeps no report, only what these read of one)
and by `kubectl gpuval baseline learn`. Nothing here calls the API: the callers read, these
decide, the callers write.

- `report_figures`: a report as learning reads it (key, passed or not, every sample, the fabric
  pairs with the node at one end);
- `learn_run`, `learn_nodes`: one GpuBaseline per key of the run that has none yet
  (spec.baseline.mode Learn);
- `report_comparison`, `run_status` and `status_of`: each node's comparison as its agent recorded
  it, and the bounded `status.baseline` of the GpuValidation, systemic figures included;
- `history_entry`: the entry of a finished report that the node's next report carries.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from gpuval_api.baseline import history, learn, rules, samples
from gpuval_api.baselinecomparison import BaselineComparison
from gpuval_api.baselinemodel import (
    MAX_LISTED,
    MAX_NAMES,
    BaselineRunStatus,
    BaselineSettings,
    BaselineSource,
    DriftingNode,
    GpuBaselineSpec,
    HistoryEntry,
    RestartedNode,
    SourceKind,
    SystemicFigure,
)
from gpuval_api.crd import GpuBaseline, GpuNodeReport, ObjectMeta
from gpuval_api.fabric import read_pairs
from gpuval_api.report import rfc3339
from gpuval_api.result import AgentResult, Verdict, parse_result

MAX_SYSTEMIC = 8


def _result(report: GpuNodeReport) -> AgentResult | None:
    return parse_result(report.status.result) if report.status else None


def report_figures(report: GpuNodeReport) -> learn.NodeFigures | None:
    """The node as learning reads it; None for a report without a readable result. A node passed
    only when its report says Passed (the fabric's verdict included, as the operator writes it)."""
    result = _result(report)
    if result is None or report.status is None:
        return None
    key, _ = samples.node_key(result.environment)
    found = samples.result_samples(result)
    fabric = report.status.fabric
    if fabric is not None and fabric.result is not None:
        transport = str(fabric.transport) if fabric.transport else "Unknown"
        pairs = read_pairs(fabric.result)
        found += samples.fabric_samples(report.spec.node, pairs, transport)
    passed = report.status.verdict == Verdict.PASSED
    return learn.NodeFigures(report.spec.node, key, passed, tuple(found))


def learn_run(
    reports: Iterable[GpuNodeReport],
    settings: BaselineSettings,
    *,
    validation: str,
    run: str,
    at: datetime,
    existing: Sequence[GpuBaselineSpec] = (),
    choose_mode: bool = False,
) -> list[learn.Learned]:
    """Learn a baseline for every key of the run that no `existing` baseline has (Learn mode):
    from its passing nodes, leaving out those that break the rule; the outcome names them. Of a
    bimodal key nothing, or with `choose_mode` (a person asked) its better mode."""
    nodes = [n for n in (report_figures(r) for r in reports) if n is not None]
    return learn_nodes(
        nodes,
        settings,
        validation=validation,
        run=run,
        at=at,
        existing=existing,
        choose_mode=choose_mode,
    )


def learn_nodes(
    nodes: Sequence[learn.NodeFigures],
    settings: BaselineSettings,
    *,
    validation: str,
    run: str,
    at: datetime,
    existing: Sequence[GpuBaselineSpec] = (),
    choose_mode: bool = False,
) -> list[learn.Learned]:
    """`learn_run` over the nodes as learning reads them (a caller that pages through the
    reports keeps these, never the reports)."""
    have = [spec.key for spec in existing]
    outcomes = []
    for key in learn.keys(nodes):
        if key in have:
            continue
        source = BaselineSource(
            kind=SourceKind.LEARNED,
            description=f"learned from run {run} of GpuValidation {validation}",
            validation=validation,
            run=run,
            learned_at=rfc3339(at),
        )
        outcomes.append(
            learn.learn(
                nodes,
                key,
                fraction=settings.fraction,
                min_nodes=settings.min_nodes,
                source=source,
                choose_mode=choose_mode,
            )
        )
    return outcomes


def learned_object(outcome: learn.Learned) -> GpuBaseline | None:
    """The GpuBaseline to create for a learned key (named after it), or None when none was."""
    if outcome.spec is None:
        return None
    return GpuBaseline(metadata=ObjectMeta(name=outcome.key.default_name()), spec=outcome.spec)


def report_comparison(report: GpuNodeReport) -> BaselineComparison | None:
    """The node's comparison as its agent recorded it (result.baseline), if any."""
    result = _result(report)
    return result.baseline if result is not None else None


def run_status(
    reports: Iterable[GpuNodeReport], settings: BaselineSettings, learned: Sequence[str] = ()
) -> BaselineRunStatus:
    """The GpuValidation's bounded `status.baseline`: nodes judged and below, the figures on
    which the run is systemic (the stack, not the nodes), the baselines learned by this run."""
    comparisons = [(r.spec.node, report_comparison(r)) for r in reports]
    judged = [
        (
            node,
            [
                (f.figure, f.ratio, f.below > 0)
                for f in c.figures
                if f.judged and f.ratio is not None
            ],
        )
        for node, c in comparisons
        if c is not None and c.name is not None
    ]
    return status_of(judged, settings, learned=learned)


# A judged node's figures: (figure, ratio to the centre, below the floor).
JudgedNode = tuple[str, Sequence[tuple[str, float, bool]]]


def status_of(
    judged: Sequence[JudgedNode],
    settings: BaselineSettings,
    *,
    learned: Sequence[str] = (),
    drifting: Sequence[DriftingNode] = (),
    drifting_total: int = 0,
    restarted: Sequence[RestartedNode] = (),
    note: str = "",
) -> BaselineRunStatus:
    """`run_status` from each judged node's figures as plain tuples (the operator keeps no result
    documents), with the nodes named DriftFromHistory (the listed ones and how many in all)."""
    flat = ((node, *entry) for node, entries in judged for entry in entries)
    found = rules.systemic_below_of(flat, settings.systemic_fraction)
    total = max(drifting_total, len(drifting))
    return BaselineRunStatus(
        judged=len(judged),
        below=sum(1 for _, entries in judged if any(below for _, _, below in entries)),
        drifting=total,
        systemic=[
            SystemicFigure(
                figure=s.figure,
                below=len(s.below),
                judged=s.judged,
                median_ratio=round(s.median_ratio, 4),
                message=s.message[:1024],
            )
            for s in found[:MAX_SYSTEMIC]
        ],
        learned=list(learned)[:MAX_NAMES],
        drifting_nodes=list(drifting)[:MAX_LISTED],
        drifting_nodes_omitted=max(0, total - MAX_LISTED),
        history_restarted=list(restarted)[:MAX_LISTED],
        history_restarted_omitted=max(0, len(restarted) - MAX_LISTED),
        note=note[:1024],
    )


def history_entry(report: GpuNodeReport) -> HistoryEntry | None:
    """A finished report's key figures, for the node's next report (None before a verdict)."""
    status = report.status
    if status is None or status.verdict is None:
        return None
    summary = status.summary.model_dump(by_alias=True) if status.summary else {}
    pairs = (
        samples.fabric_samples(report.spec.node, read_pairs(status.fabric.result), "")
        if status.fabric is not None and status.fabric.result is not None
        else []
    )
    lowest = min((s.value for s in pairs), default=None)
    gpus, tokens = history.result_gpus(status.result)
    return history.entry(
        report.spec.run, status.completed_at, summary, lowest, gpus, gpu_tokens=tokens
    )
