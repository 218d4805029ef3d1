"""What a person looks at: a fleet (a GpuValidation and its reports) or one machine (an agent
result), as plain data. Pure: nothing here calls the API or draws.

`kubectl gpuval status` prints a `FleetView`; `gpuval_report` draws the same view as an HTML page
(`kubectl gpuval report --html`, `gpuval-agent run --html`). A fleet's units are its nodes (each
with its worst GPU's figures, as in the report summary); a machine's units are its GPUs
(`gpuval_api.machine`).

Verdicts are kept as the strings the reports carry: a verdict this version does not know (a later
`NotRun`, say) is counted and shown under its own name, never dropped.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from gpuval_api import figures
from gpuval_api.baseline import bands
from gpuval_api.baseline.bands import BaselineView
from gpuval_api.baseline.history import gpu_identity, result_units, since_gpus_changed
from gpuval_api.baseline.history import value as history_value
from gpuval_api.baselinemodel import BaselineSettings, GpuBaselineSpec
from gpuval_api.crd import DEVICE_HEALTHY, GpuNodeReport, GpuValidation
from gpuval_api.fabric.summary import FabricPathEntry
from gpuval_api.fabric.view import FabricFinding, FabricLink, fabric_bounds, fabric_finding
from gpuval_api.figures import Figure
from gpuval_api.mig import mig_layout
from gpuval_api.reasons import REASONS, Reason
from gpuval_api.report import ReportPhase
from gpuval_api.result import AgentResult, CheckResult, Verdict, parse_result
from gpuval_api.stateview import StateLine, not_read, not_read_by_what, state_lines

# A unit whose figure is below this fraction of the fleet's median is an outlier: one NIC down on
# an 8-NIC node costs 12.5 % (design.md, Fabric), so the ratio must sit at 0.9 or above to see it.
# Where lower is better, above (2 - OUTLIER_RATIO) x the median plus the figure's tolerance: a
# median of 0 (a count no healthy unit has) makes only a unit above the tolerance an outlier.
OUTLIER_RATIO = 0.9

PASSED = str(Verdict.PASSED)
FAILED = str(Verdict.FAILED)
NOT_RUN = str(Verdict.NOT_RUN)
# Verdict-like states of a unit that has no verdict yet (a report's phase).
RUNNING = str(ReportPhase.RUNNING)
PENDING = str(ReportPhase.PENDING)
# The API server refuses its agent pod for now (a quota that paces the run, a policy): untested,
# not NotRun; listed with the server's words among the units not judged.
WAITING = str(ReportPhase.WAITING)
KNOWN_STATES = (PASSED, FAILED, RUNNING, PENDING)


# The figures a page plots and compares across units: the registry's (gpuval_api.figures).
FIGURES: tuple[Figure, ...] = figures.page_figures()

# Environment fields compared across units; the operator's uniformity compares the same ones
# (gpuval_operator.run.facts.UNIFORMITY_FIELDS is this tuple).
ENVIRONMENT_FIELDS: tuple[str, ...] = (
    "driverVersion",
    "cudaDriverVersion",
    "ncclVersion",
    "gpuProduct",
    "gpuCount",
    "vbios",
    "kernel",
    "eccEnabled",
    "migMode",
    "migLayout",
    "persistenceMode",
)
GPU_ENVIRONMENT_FIELDS: tuple[str, ...] = (
    "gpuProduct",
    "vbios",
    "pcieLink",
    "eccEnabled",
    "persistenceMode",
    "migMode",
    "powerLimitWatts",
)


@dataclass(frozen=True, slots=True)
class FailureView:
    """One failed finding with the catalogue's hint."""

    unit: str
    check: str
    reason: str
    message: str
    hint: str
    gpu: int | None = None


@dataclass(frozen=True, slots=True)
class DeviceHealthLine:
    """A device of a node's agent-pod claim the kubelet does not report Healthy (KEP-4680)."""

    unit: str
    resource_id: str  # <driver>/<pool>/<device>
    health: str
    message: str = ""


@dataclass(frozen=True, slots=True)
class UnitView:
    """A node of a fleet or a GPU of a machine."""

    name: str
    verdict: str
    reason: str | None = None
    message: str = ""
    figures: dict[str, float] = field(default_factory=dict)
    environment: dict[str, str] = field(default_factory=dict)
    failures: tuple[FailureView, ...] = ()
    # NCCL all-reduce sweep: (message bytes, busbw GB/s), smallest first.
    nccl: tuple[tuple[int, float], ...] = ()
    fabric: FabricFinding | None = None
    # The state check's findings (errors and warnings) and what it could not read.
    state: tuple[StateLine, ...] = ()
    not_read: tuple[str, ...] = ()
    # The node's key figures run by run, oldest first, this run last: (run id, {key: value}).
    history: tuple[tuple[str, dict[str, float]], ...] = ()
    # What the unit is, for comparing like with like: "" whole GPUs; a MIG instance's profile
    # ('MIG 1g.18gb'); a node's MIG layout ('7x1g.18gb').
    kind: str = ""
    # The kubelet's word on its claim's devices that are not Healthy (spec.agent.devices dra).
    device_health: tuple[DeviceHealthLine, ...] = ()


@dataclass(frozen=True, slots=True)
class FigureOutlier:
    """A unit whose figure is below OUTLIER_RATIO of the median of its peers (above, where lower
    is better)."""

    figure: Figure
    unit: str
    value: float
    median: float

    @property
    def ratio(self) -> float:
        """Below 1: worse than the median (whichever way the figure is better)."""
        return self.figure.ratio(self.value, self.median)

    @property
    def against_median(self) -> str:
        """How it stands to the median, as said: '71% of median', '3.2x the median' (lower is
        better), 'above median 0.0' (lower is better, a median of 0)."""
        if not self.figure.lower:
            return f"{self.ratio:.0%} of median"
        if self.median <= 0:
            return f"above median {self.median:.1f}"
        return f"{self.value / self.median:.1f}x the median"


@dataclass(frozen=True, slots=True)
class UniformityRow:
    """One environment field: each distinct value with the units that show it, commonest first."""

    field: str
    values: tuple[tuple[str, tuple[str, ...]], ...]

    @property
    def uniform(self) -> bool:
        return len(self.values) <= 1


@dataclass(frozen=True, slots=True)
class FleetView:
    """Everything one page or one `status` print shows."""

    title: str
    kind: str  # "fleet" or "machine"
    unit_label: str  # "node" or "GPU"
    phase: str
    units: tuple[UnitView, ...]
    failures: tuple[FailureView, ...] = ()
    # NCCL all-reduce sweeps: (unit or host, ((message bytes, busbw GB/s), ...)).
    nccl_curves: tuple[tuple[str, tuple[tuple[int, float], ...]], ...] = ()
    conditions: tuple[tuple[str, str, str, str], ...] = ()  # type, status, reason, message
    run: str = ""
    failing_omitted: int = 0
    fabric_summary: str = ""  # the validation's status.fabric.summary; empty without a fabric
    # The run's median pair busbw and the floor below which a pair is slow (fabric_bounds).
    fabric_median_gbps: float | None = None
    fabric_floor_gbps: float | None = None
    # The slow network paths between topology domains the fabric found (status.fabric.slowPaths:
    # no node is blamed for them), and how many more the status counts.
    fabric_paths: tuple[FabricPathEntry, ...] = ()
    fabric_paths_omitted: int = 0
    # The state check's findings of every unit (a machine's host-wide ones included).
    state: tuple[StateLine, ...] = ()
    not_read: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # The baseline the units were judged against, with a band per figure (None: no baseline).
    baseline: BaselineView | None = None
    # Nodes whose history this run started again, their GPUs replaced: what the status said
    # (status.baseline.historyRestarted), and how many more it counts.
    history_restarted: tuple[str, ...] = ()
    history_restarted_omitted: int = 0

    @property
    def fabric_named(self) -> list[UnitView]:
        """Nodes the fabric test named (its Failed verdicts), by name."""
        return [u for u in self.units if u.fabric is not None and u.fabric.verdict == FAILED]

    @property
    def fabric_not_run(self) -> list[UnitView]:
        """Nodes the fabric did not test or could not tell from their partner (its NotRun
        verdicts: a group that did not form, a FabricSlowPair), by name."""
        return [u for u in self.units if u.fabric is not None and u.fabric.verdict == NOT_RUN]

    @property
    def fabric_links(self) -> list[FabricLink]:
        """Every pair the fabric measured, once (each node of a group reports all its pairs)."""
        return distinct_links(self.units)

    @property
    def counts(self) -> dict[str, int]:
        """Units per verdict string, commonest first; unknown verdicts count under their name."""
        return dict(Counter(u.verdict for u in self.units).most_common())

    @property
    def unhealthy_devices(self) -> list[DeviceHealthLine]:
        """Every unit's devices the kubelet does not report Healthy, by unit."""
        return [line for u in self.units for line in u.device_health]

    @property
    def others(self) -> list[UnitView]:
        """Units with a verdict this view does not classify (a later NotRun, say), by name."""
        return [u for u in self.units if u.verdict not in KNOWN_STATES]

    @property
    def outliers(self) -> list[FigureOutlier]:
        return figure_outliers(self.units)

    @property
    def uniformity(self) -> list[UniformityRow]:
        fields = ENVIRONMENT_FIELDS if self.kind == "fleet" else GPU_ENVIRONMENT_FIELDS
        return uniformity_rows(self.units, fields)


def hint_for(reason: str | None) -> str:
    """The catalogue's hint for a reason; empty for a reason this version does not know."""
    if reason is None:
        return ""
    try:
        return REASONS[Reason(reason)].hint
    except ValueError:
        return ""


def figure_outliers(
    units: Iterable[UnitView], chosen: Sequence[Figure] = FIGURES, ratio: float = OUTLIER_RATIO
) -> list[FigureOutlier]:
    """Units whose figure is worse than `ratio` of the median of every unit of their kind that
    measured it (below it; where lower is better, above (2 - ratio) x the median plus the
    figure's tolerance: see OUTLIER_RATIO), worst first: like with like, whole GPUs with whole
    GPUs, MIG instances of one profile (nodes of one MIG layout) with each other; a 1g.18gb
    instance is a seventh of a GPU, not an outlier.

    The median, not the mean, so one broken unit in a small fleet does not drag the reference
    down with it; fewer than three units of a kind have no meaningful median and give none.
    """
    kinds: dict[str, list[UnitView]] = {}
    for unit in units:
        kinds.setdefault(unit.kind, []).append(unit)
    found: list[FigureOutlier] = []
    for figure in chosen:
        for same in kinds.values():
            measured = [(u.name, u.figures[figure.key]) for u in same if figure.key in u.figures]
            if len(measured) < 3:
                continue
            median = statistics.median(value for _, value in measured)
            found.extend(
                FigureOutlier(figure, name, value, median)
                for name, value in sorted(
                    measured, key=lambda item: (figure.ratio(item[1], median), -item[1])
                )
                if figure.worse(value, median, 1 - ratio)
            )
    return found


def uniformity_rows(units: Iterable[UnitView], fields: Sequence[str]) -> list[UniformityRow]:
    """Each field the units report, with its distinct values and the units holding each."""
    units = list(units)
    rows: list[UniformityRow] = []
    for name in fields:
        holders: dict[str, list[str]] = {}
        for unit in units:
            if name in unit.environment:
                holders.setdefault(unit.environment[name], []).append(unit.name)
        if holders:
            ordered = sorted(holders.items(), key=lambda item: (-len(item[1]), item[0]))
            rows.append(UniformityRow(name, tuple((v, tuple(us)) for v, us in ordered)))
    return rows


def distinct(values: Iterable[object]) -> str | None:
    """The distinct values, lowercase booleans, sorted and joined by ',' (the operator's form)."""
    present = sorted(
        {str(v).lower() if isinstance(v, bool) else str(v) for v in values if v is not None}
    )
    return ",".join(present) if present else None


def nccl_curve(check: CheckResult | None) -> tuple[tuple[int, float], ...]:
    """(message bytes, busbw GB/s) of an NCCL check's sweep, smallest first."""
    if check is None:
        return ()
    return tuple(sorted((s.bytes, s.busbw_gbps) for s in check.nccl_sizes))


def _node_environment(result: AgentResult) -> dict[str, str]:
    env = result.environment
    raw: dict[str, object] = {
        "driverVersion": env.driver_version,
        "cudaDriverVersion": env.cuda_driver_version,
        "ncclVersion": env.nccl_version,
        "gpuProduct": distinct(g.name for g in env.gpus),
        "gpuCount": env.gpu_count,
        "vbios": distinct(g.vbios for g in env.gpus),
        "kernel": env.kernel,
        "eccEnabled": distinct(g.ecc_enabled for g in env.gpus),
        "migMode": distinct(g.mig_mode for g in env.gpus),
        "migLayout": mig_layout(g.mig.profile for g in env.gpus if g.mig is not None) or None,
        "persistenceMode": distinct(g.persistence_mode for g in env.gpus),
    }
    return {k: str(v) for k, v in raw.items() if v is not None}


def node_unit(report: GpuNodeReport) -> UnitView:
    """A fleet's unit: one node, from its GpuNodeReport."""
    node = report.spec.node
    status = report.status
    health = tuple(
        DeviceHealthLine(node, h.resource_id, h.health, h.message or "")
        for h in (status.device_health or [] if status is not None else [])
        if h.health != DEVICE_HEALTHY
    )
    if status is None or status.verdict is None:
        phase = status.phase if status is not None and status.phase else PENDING
        if phase == WAITING and status is not None:
            return UnitView(
                node,
                WAITING,
                reason=status.reason,
                message=status.message or "",
                device_health=health,
            )
        return UnitView(node, RUNNING if phase == RUNNING else PENDING, device_health=health)
    summary = status.summary.model_dump(by_alias=True) if status.summary else {}
    figures = {f.key: float(summary[f.key]) for f in FIGURES if summary.get(f.key) is not None}
    # Only a Failed node has failures: a node gpuval could not test (NotRun) is not blamed.
    failed = status.verdict == FAILED
    failures = tuple(
        FailureView(node, f.check, f.reason, f.message, f.hint or hint_for(f.reason), f.gpu)
        for f in (status.failures if failed else [])
    )
    if failed and not failures and status.reason:
        failures = (
            FailureView(node, "-", status.reason, status.message or "", hint_for(status.reason)),
        )
    result = parse_result(status.result)
    environment = _node_environment(result) if result else {}
    return UnitView(
        name=node,
        verdict=status.verdict,
        reason=status.reason,
        message=status.message or "",
        figures=figures,
        environment=environment,
        failures=failures,
        nccl=nccl_curve(result.check("nccl")) if result else (),
        fabric=fabric_finding(status.fabric),
        state=state_lines(result, node),
        not_read=not_read(result),
        history=_history(report, figures, result),
        kind=environment.get("migLayout", ""),
        device_health=health,
    )


def _history(
    report: GpuNodeReport, current: dict[str, float], result: AgentResult | None
) -> tuple[tuple[str, dict[str, float]], ...]:
    """The runs the report's spec.history carries on the GPUs this run measured (not those of
    GPUs since replaced), then this run's figures; () without any."""
    entries = report.spec.history
    if result is not None:
        gpus = gpu_identity(result_units(result.environment.gpus))
        entries = entries[since_gpus_changed([e.gpu_identity for e in entries], gpus) :]
    if not entries:
        return ()
    past = tuple(
        (
            entry.run,
            {f.key: v for f in FIGURES if (v := history_value(entry, f.key)) is not None},
        )
        for entry in entries
    )
    return (*past, (report.spec.run, current))


def distinct_links(units: Iterable[UnitView]) -> list[FabricLink]:
    """Every pair the units' fabric results hold, once: by group, the pair rounds in order, then
    the confirmations (round 0) that followed."""
    found: dict[tuple[str, int, str, str], FabricLink] = {}
    for unit in units:
        for link in unit.fabric.links if unit.fabric else ():
            found.setdefault((link.group, link.round, link.a, link.b), link)
    return [found[key] for key in sorted(found, key=lambda k: (k[0], k[1] == 0, k))]


def fleet_view(
    validation: GpuValidation,
    reports: Iterable[GpuNodeReport],
    baseline: tuple[str, GpuBaselineSpec] | None = None,
) -> FleetView:
    """A GpuValidation's current run as a fleet: one unit per node report, sorted by node name;
    with `baseline` (a GpuBaseline's name and spec), its band on every figure it holds."""
    return fleet_of_units(validation, (node_unit(r) for r in reports), baseline)


def baseline_view(validation: GpuValidation, name: str, spec: GpuBaselineSpec) -> BaselineView:
    """A GpuBaseline as the fleet's page draws it, at the validation's fraction and settings."""
    checks = validation.spec.checks
    settings = validation.spec.baseline or BaselineSettings()
    precision = str(checks.burn.precisions[0])
    return bands.of_spec(
        name,
        spec,
        fraction=settings.fraction,
        precision=precision,
        nccl_bytes=checks.nccl.max_bytes,
    )


def fleet_of_units(
    validation: GpuValidation,
    node_units: Iterable[UnitView],
    baseline: tuple[str, GpuBaselineSpec] | None = None,
) -> FleetView:
    """The same from units already taken out of their reports (a reader of thousands of reports
    keeps the units, a few hundred bytes each, and drops each page of whole reports)."""
    status = validation.status
    units = sorted(node_units, key=lambda u: u.name)
    fabric_status = status.fabric if status else None
    fabric_spec = validation.spec.fabric if validation.spec else None
    median, floor = fabric_bounds(fabric_status, fabric_spec, distinct_links(units))
    conditions = tuple(
        (c.type, str(c.status), c.reason, c.message) for c in (status.conditions if status else [])
    )
    restarted = status.baseline if status else None
    return FleetView(
        title=f"GpuValidation {validation.metadata.name}",
        kind="fleet",
        unit_label="node",
        phase=(status.phase if status and status.phase else PENDING),
        units=tuple(units),
        failures=tuple(f for u in units for f in u.failures),
        nccl_curves=tuple((u.name, u.nccl) for u in units if u.nccl),
        conditions=conditions,
        run=(status.run.id if status and status.run else ""),
        failing_omitted=(status.failing_nodes_omitted if status else 0),
        fabric_summary=(status.fabric.summary if status and status.fabric else ""),
        fabric_median_gbps=median,
        fabric_floor_gbps=floor,
        fabric_paths=tuple(fabric_status.slow_paths) if fabric_status else (),
        fabric_paths_omitted=fabric_status.slow_paths_omitted if fabric_status else 0,
        state=tuple(line for u in units for line in u.state),
        not_read=tuple(not_read_by_what((u.name, u.not_read) for u in units)),
        baseline=baseline_view(validation, *baseline) if baseline is not None else None,
        history_restarted=tuple(r.message for r in restarted.history_restarted)
        if restarted is not None
        else (),
        history_restarted_omitted=restarted.history_restarted_omitted if restarted else 0,
    )
