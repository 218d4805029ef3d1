"""The operator's /metrics, built at scrape time from what the controllers hold (no per-event
bookkeeping).

Per validation: node counts of the current run, run timestamps, uniformity, the fabric groups'
busbw, the node actions held and the nodes out of service through it (and, operator-wide, through
gpuval). Per node: the verdict and worst-GPU figures of its latest completed report, its state
check's findings, links down and counters grown, its latest settled fabric verdict, its worst ratio
to its baseline and to its own history (spec.baseline: one series each, labelled with the figure).
The repair loop's (spec.remediation): gpuval_operator.readmodel.repairmetrics; the proofs'
(spec.maxProofAgeSeconds): gpuval_operator.readmodel.proofmetrics; healthy capacity's:
gpuval_operator.readmodel.capacitymetrics.
Per GPU only with GPUVAL_METRICS_PER_GPU, because 80,000 series cost the scrape most of a second of
GIL; per-GPU detail always lives in the reports and the agent's live exporter. Names follow
Prometheus' conventions: base units in the name, one unit per metric.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from importlib.metadata import PackageNotFoundError, version

from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector

from gpuval_api import Reason, Verdict, label_value
from gpuval_operator.kube.client import KubeClient
from gpuval_operator.nodes.breaker.operatorwide import OutOfServiceCounts
from gpuval_operator.readmodel.capacitymetrics import CapacityFamilies
from gpuval_operator.readmodel.proofmetrics import ProofFamilies
from gpuval_operator.readmodel.registry import Registry
from gpuval_operator.readmodel.repairmetrics import RepairFamilies
from gpuval_operator.readmodel.validation import NodeResult, ValidationState
from gpuval_operator.run.breakerstate import HOLD_CAUSES
from gpuval_operator.run.facts import SUMMARY_FIGURES
from gpuval_operator.run.state import Phase, RunState
from gpuval_operator.run.statefacts import StateFacts

log = logging.getLogger(__name__)

# Label values of gpuval_validation_nodes{state} -> RunState.counts() keys.
NODE_STATES = {
    "pending": "pending",
    "waiting": "waiting",
    "running": "running",
    "passed": "passed",
    "failed": "failed",
    "notrun": "notRun",
}


def operator_version() -> str:
    try:
        return version("gpuval-operator")
    except PackageNotFoundError:
        return "unknown"


def _gauge(name: str, help_text: str, *labels: str) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, help_text, labels=list(labels))


class _Families:
    """The families of one scrape, filled validation by validation."""

    def __init__(self, per_gpu: bool) -> None:
        self.per_gpu = per_gpu
        v, n = "validation", "node"
        self.nodes = _gauge(
            "gpuval_validation_nodes",
            "Nodes of the current run of a GpuValidation, by state.",
            v,
            "state",
        )
        self.unschedulable = _gauge(
            "gpuval_validation_unschedulable_pods",
            "Agent pods of the current run the scheduler could not place.",
            v,
        )
        self.invalid = _gauge("gpuval_validation_invalid", "1 when the spec is invalid.", v)
        self.uniform = _gauge(
            "gpuval_validation_uniform",
            "1 when every node's environment agrees, 0 when not (absent until compared).",
            v,
        )
        self.outliers = _gauge("gpuval_validation_outliers", "Outliers of the last run.", v)
        self.started = _gauge(
            "gpuval_validation_last_run_start_timestamp_seconds",
            "When the current or last run started.",
            v,
        )
        self.completed = _gauge(
            "gpuval_validation_last_run_completion_timestamp_seconds",
            "When the last run completed.",
            v,
        )
        self.success = _gauge(
            "gpuval_validation_last_success_timestamp_seconds",
            "When a run last completed with every node passed.",
            v,
        )
        self._node_families(v, n)
        self._state_families(v, n)
        self._fabric_families(v, n)
        self._hold_families(v)
        self.repairs = RepairFamilies()
        self.proof = ProofFamilies()
        self.capacity = CapacityFamilies()

    def _hold_families(self, v: str) -> None:
        self.held = _gauge(
            "gpuval_validation_node_actions_held",
            "Failed nodes of the current run whose taint and cordon are held, by cause "
            "(MaxNodesReached, OperatorMaxNodesReached, Systemic).",
            v,
            "cause",
        )
        self.out_of_service = _gauge(
            "gpuval_validation_nodes_out_of_service",
            "Nodes out of service (tainted or cordoned) through the validation's own actions, "
            "counted from the nodes.",
            v,
        )
        self.actions_limit = _gauge(
            "gpuval_validation_node_actions_limit",
            "The validation's nodeActions.maxNodes as a node count.",
            v,
        )
        self.systemic = _gauge(
            "gpuval_validation_systemic_failure_ratio",
            "Share of the current run's tested nodes failing with a systemic reason (present "
            "only for a reason past spec.nodeActions.systemicFraction).",
            v,
            "reason",
        )

    def add_holds(self, name: str, run: RunState, out_of_service: int) -> None:
        breaker = run.breaker
        causes = breaker.causes()
        # Every cause, 0 when none is held: a held count that went back to 0 reads 0, not absent.
        for cause in sorted(HOLD_CAUSES):
            self.held.add_metric([name, str(cause)], float(causes.get(cause, 0)))
        self.out_of_service.add_metric([name], float(out_of_service))
        self.actions_limit.add_metric([name], float(breaker.limit))
        for found in breaker.systemic:
            self.systemic.add_metric([name, found.reason], found.failed / max(1, found.tested))

    def _node_families(self, v: str, n: str) -> None:
        self.passed = _gauge(
            "gpuval_node_passed",
            "1 when the node's latest verdict is Passed, 0 when Failed.",
            v,
            n,
        )
        self.failure = _gauge(
            "gpuval_node_failure_info",
            "The reason of a node's latest failed verdict (always 1).",
            v,
            n,
            "reason",
        )
        self.check_failure = _gauge(
            "gpuval_node_check_failure_info",
            "Each (check, reason) that failed in the node's latest report (always 1).",
            v,
            n,
            "check",
            "reason",
        )
        self.untested = _gauge(
            "gpuval_node_not_run_info",
            "Nodes whose latest attempt was NotRun (gpuval could not test them; never a failure), "
            "with the reason (always 1).",
            v,
            n,
            "reason",
        )
        self.untested_since = _gauge(
            "gpuval_node_not_run_since_timestamp_seconds",
            "Since when the node has gone untested (its first NotRun without a test since).",
            v,
            n,
        )
        self.validated = _gauge(
            "gpuval_node_last_validation_timestamp_seconds",
            "When the node's latest verdict was written.",
            v,
            n,
        )
        self.figures = {
            suffix: _gauge(
                f"gpuval_node_{suffix}", f"Worst GPU of the node in its latest report: {key}.", v, n
            )
            for key, (suffix, _) in SUMMARY_FIGURES.items()
        }
        self.gpu_figures: dict[str, GaugeMetricFamily] = {}
        self.baseline_ratio = _gauge(
            "gpuval_node_baseline_ratio",
            "The node's judged figure furthest below its GpuBaseline in its latest report: value "
            "over the baseline's centre (spec.baseline; one series per node, its worst figure).",
            v,
            n,
            "figure",
        )
        self.history_ratio = _gauge(
            "gpuval_node_history_ratio",
            "The node's key figure furthest below its own kept runs in its latest run: value "
            "over their median (spec.baseline.history; one series per node, its worst figure).",
            v,
            n,
            "figure",
        )

    def _state_families(self, v: str, n: str) -> None:
        """The state check of the node's latest tested report (per GPU detail: the report)."""
        self.state_finding = _gauge(
            "gpuval_node_state_finding_info",
            "Each (reason, severity) the state check found on the node in its latest tested "
            "report (always 1; how many GPUs, links or ports: gpuval_node_state_findings).",
            v,
            n,
            "reason",
            "severity",
        )
        self.state_findings = _gauge(
            "gpuval_node_state_findings",
            "How many findings of each (reason, severity) the state check has on the node "
            "(GPUs, links, ports, XIDs) in its latest tested report.",
            v,
            n,
            "reason",
            "severity",
        )
        self.nvlinks_down = _gauge(
            "gpuval_node_nvlinks_down",
            "NVLinks of the node down at rest, below the count each GPU should have.",
            v,
            n,
        )
        self.ib_ports_down = _gauge(
            "gpuval_node_ib_ports_down",
            "InfiniBand/RoCE ports of the node not up (state ACTIVE, physical state LinkUp).",
            v,
            n,
        )
        self.counters_grown = _gauge(
            "gpuval_node_state_counters_grown",
            "Error counters (ECC, NVLink, PCIe, InfiniBand) that grew while a load check ran, "
            "by the check.",
            v,
            n,
            "check",
        )

    def add_state(self, name: str, node: str, state: StateFacts) -> None:
        for reason, severity, count in state.findings:
            labels = [name, node, str(reason), str(severity)]
            self.state_finding.add_metric(labels, 1.0)
            self.state_findings.add_metric(labels, float(count))
        if state.nvlinks_down is not None:
            self.nvlinks_down.add_metric([name, node], float(state.nvlinks_down))
        if state.ib_ports_down is not None:
            self.ib_ports_down.add_metric([name, node], float(state.ib_ports_down))
        for check, grown in state.grown:
            self.counters_grown.add_metric([name, node, str(check)], float(grown))

    def _fabric_families(self, v: str, n: str) -> None:
        self.fabric_group = _gauge(
            "gpuval_fabric_group_busbw_bytes_per_second",
            "All-reduce bus bandwidth of each fabric group of the latest run with settled "
            "fabric verdicts, at its largest size.",
            v,
            "group",
        )
        self.fabric_slow = _gauge(
            "gpuval_validation_fabric_slow_groups",
            "Fabric groups of the current run below their floor with no node named.",
            v,
        )
        self.fabric_paths = _gauge(
            "gpuval_validation_fabric_slow_paths",
            "Slow network paths between topology domains the current run's cross-domain "
            "fabric groups found (no node blamed).",
            v,
        )
        self.fabric_passed = _gauge(
            "gpuval_node_fabric_passed",
            "1 when the node's latest settled fabric verdict is Passed, 0 when Failed (absent "
            "for NotRun: its group did not form).",
            v,
            n,
        )
        self.fabric_failure = _gauge(
            "gpuval_node_fabric_failure_info",
            "The reason of a node's latest failed fabric verdict (always 1).",
            v,
            n,
            "reason",
        )

    def add_fabric(self, name: str, state: ValidationState) -> None:
        for group, busbw in list(state.fabric_groups.items()):
            self.fabric_group.add_metric([name, group], busbw * 1e9)
        run = state.run
        if run is not None and run.fabric is not None and run.fabric.classification is not None:
            slow = sum(1 for g in run.fabric.classification.groups if g.slow)
            self.fabric_slow.add_metric([name], float(slow))
            self.fabric_paths.add_metric([name], float(len(run.fabric.classification.paths)))
        for node, fabric in list(state.fabric_nodes.items()):
            if fabric.verdict is Verdict.NOT_RUN:
                continue
            passed = fabric.verdict is Verdict.PASSED
            self.fabric_passed.add_metric([name, node], 1.0 if passed else 0.0)
            if not passed:
                reason = str(fabric.reason or Reason.CHECK_ERROR)
                self.fabric_failure.add_metric([name, node, reason], 1.0)

    def add_validation(self, name: str, state: ValidationState, out_of_service: int = 0) -> None:
        self.invalid.add_metric([name], 1.0 if state.invalid else 0.0)
        run = state.run
        if run is not None:
            self.add_holds(name, run, out_of_service)
            counts = run.counts()
            for label, key in NODE_STATES.items():
                self.nodes.add_metric([name, label], float(counts[key]))
            waiting = sum(
                1 for r in run.nodes.values() if r.phase is Phase.RUNNING and r.unschedulable
            )
            self.unschedulable.add_metric([name], float(waiting))
        if state.uniform is not None:
            self.uniform.add_metric([name], 1.0 if state.uniform else 0.0)
            self.outliers.add_metric([name], float(state.outliers))
        for family, value in (
            (self.started, state.last_run_started),
            (self.completed, state.last_run_completed),
            (self.success, state.last_success),
        ):
            if value is not None:
                family.add_metric([name], value)
        for node, result in list(state.latest.items()):
            self.add_node(name, node, result)
        for node, chain in list(state.history.items()):
            if chain.worst is not None:
                figure, ratio = chain.worst
                self.history_ratio.add_metric([name, node, figure], ratio)
        for node, untested in list(state.untested.items()):
            self.untested.add_metric([name, node, untested.reason], 1.0)
            self.untested_since.add_metric([name, node], untested.since)
        self.add_fabric(name, state)
        self.repairs.add(name, state.repairs)
        self.proof.add(name, state.proof, time.time())
        self.capacity.add(name, state.capacity)

    def add_node(self, name: str, node: str, result: NodeResult) -> None:
        self.passed.add_metric([name, node], 1.0 if result.passed else 0.0)
        if not result.passed:
            reason = str(result.reason or Reason.CHECK_ERROR)
            self.failure.add_metric([name, node, reason], 1.0)
            for check, check_reason in result.failed_checks:
                self.check_failure.add_metric([name, node, check, check_reason], 1.0)
        if result.completed_at is not None:
            self.validated.add_metric([name, node], result.completed_at)
        if result.state is not None:
            self.add_state(name, node, result.state)
        worst = result.comparison.worst() if result.comparison is not None else None
        if worst is not None:
            self.baseline_ratio.add_metric([name, node, worst[0]], worst[1])
        for key, value in result.summary.items():
            suffix, factor = SUMMARY_FIGURES[key]
            self.figures[suffix].add_metric([name, node], value * factor)
        if self.per_gpu:
            for index, suffix, value in result.gpu_figures:
                family = self.gpu_figures.get(suffix)
                if family is None:
                    family = self.gpu_figures[suffix] = _gauge(
                        f"gpuval_gpu_{suffix}",
                        f"Per-GPU figure of the node's latest report: {suffix}.",
                        "validation",
                        "node",
                        "gpu",
                    )
                family.add_metric([name, node, str(index)], value)

    def all(self) -> Iterator[Metric]:
        yield from (self.nodes, self.unschedulable, self.invalid, self.uniform, self.outliers)
        yield from (self.started, self.completed, self.success)
        yield from (self.passed, self.failure, self.check_failure, self.validated)
        yield from (self.untested, self.untested_since)
        yield from (self.state_finding, self.state_findings, self.nvlinks_down)
        yield from (self.ib_ports_down, self.counters_grown)
        yield from self.figures.values()
        yield from (self.baseline_ratio, self.history_ratio)
        yield from self.gpu_figures.values()
        yield from (self.fabric_group, self.fabric_slow, self.fabric_paths)
        yield from (self.fabric_passed, self.fabric_failure)
        yield from (self.held, self.out_of_service, self.actions_limit, self.systemic)
        yield from self.repairs.all()
        yield from self.proof.all()
        yield from self.capacity.all()


def _operator_out_of_service(figures: OutOfServiceCounts) -> Iterator[Metric]:
    total = GaugeMetricFamily(
        "gpuval_operator_nodes_out_of_service",
        "Nodes gpuval holds out of service (tainted or cordoned) across every validation, as "
        "last counted from the nodes.",
    )
    total.add_metric([], float(figures.total))
    limit = GaugeMetricFamily(
        "gpuval_operator_nodes_out_of_service_limit",
        "The operator-wide limit on nodes gpuval holds out of service at once.",
    )
    limit.add_metric([], float(figures.limit))
    yield from (total, limit)


class GpuvalCollector(Collector):
    def __init__(
        self, registry: Registry, *, per_gpu: bool = False, client: KubeClient | None = None
    ):
        self.registry = registry
        self.per_gpu = per_gpu
        self.client = client

    def collect(self) -> Iterator[Metric]:
        build = InfoMetricFamily("gpuval_operator_build", "gpuval operator build information.")
        build.add_metric([], {"version": operator_version()})
        yield build
        leader = GaugeMetricFamily(
            "gpuval_operator_leader", "1 on the replica holding the leader Lease, 0 on a standby."
        )
        leader.add_metric([], 1.0 if self.registry.leading else 0.0)
        yield leader
        if self.registry.leading:  # a standby counts nothing
            yield from _operator_out_of_service(self.registry.out_of_service)
        families = _Families(self.per_gpu)
        by_validation = self.registry.out_of_service.by_validation
        for name, state in list(self.registry.items()):
            families.add_validation(name, state, by_validation.get(label_value(name), 0))
        yield from families.all()
        if self.client is not None:
            requests = CounterMetricFamily(
                "gpuval_operator_api_requests",
                "API requests of the operator's own client by verb and HTTP status (0: no answer).",
                labels=["verb", "code"],
            )
            for (verb, code), count in sorted(self.client.requests_total.items()):
                requests.add_metric([verb, str(code)], float(count))
            yield requests


def make_registry(
    registry: Registry, *, per_gpu: bool = False, client: KubeClient | None = None
) -> CollectorRegistry:
    prom = CollectorRegistry(auto_describe=False)
    prom.register(GpuvalCollector(registry, per_gpu=per_gpu, client=client))
    return prom


async def start_server(
    prom: CollectorRegistry,
    port: int,
    host: str = "0.0.0.0",
    *,
    not_ready: Callable[[], str | None] = lambda: None,
) -> web.AppRunner:
    """Serve /metrics, /healthz (the event loop answers: liveness) and /readyz (503 with the
    reason `not_ready` gives, else 200: readiness) on `port`."""

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=generate_latest(prom), content_type="text/plain", charset="utf-8")

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/metrics", metrics)

    async def readyz(_: web.Request) -> web.Response:
        reason = not_ready()
        return web.Response(text="ok") if reason is None else web.Response(status=503, text=reason)

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    log.info("metrics on :%d/metrics", port)
    return runner
