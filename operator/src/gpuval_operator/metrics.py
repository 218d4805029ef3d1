"""The operator's /metrics, built at scrape time from what the controllers hold (no per-event
bookkeeping).

Per validation: node counts of the current run, run timestamps, uniformity. Per node: the verdict
and worst-GPU figures of its latest completed report. Per GPU only with GPUVAL_METRICS_PER_GPU,
because 80,000 series cost the scrape most of a second of GIL; per-GPU detail always lives in the
reports and the agent's live exporter. Names follow Prometheus' conventions: base units in the name,
one unit per metric.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from importlib.metadata import PackageNotFoundError, version

from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector

from gpuval_operator.kube import KubeClient
from gpuval_operator.reconciler import Registry
from gpuval_operator.state import SUMMARY_FIGURES, Phase

log = logging.getLogger(__name__)

NODE_STATES = ("pending", "running", "passed", "failed")


def operator_version() -> str:
    try:
        return version("gpuval-operator")
    except PackageNotFoundError:
        return "unknown"


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

        nodes = GaugeMetricFamily(
            "gpuval_validation_nodes",
            "Nodes of the current run of a GpuValidation, by state.",
            labels=["validation", "state"],
        )
        unschedulable = GaugeMetricFamily(
            "gpuval_validation_unschedulable_pods",
            "Agent pods of the current run the scheduler could not place.",
            labels=["validation"],
        )
        invalid = GaugeMetricFamily(
            "gpuval_validation_invalid",
            "1 when the GpuValidation's spec is invalid.",
            labels=["validation"],
        )
        uniform = GaugeMetricFamily(
            "gpuval_validation_uniform",
            "1 when every node's environment agrees, 0 when not (absent until compared).",
            labels=["validation"],
        )
        outliers = GaugeMetricFamily(
            "gpuval_validation_outliers",
            "Uniformity outliers of the last run.",
            labels=["validation"],
        )
        started = GaugeMetricFamily(
            "gpuval_validation_last_run_start_timestamp_seconds",
            "When the current or last run started.",
            labels=["validation"],
        )
        completed = GaugeMetricFamily(
            "gpuval_validation_last_run_completion_timestamp_seconds",
            "When the last run completed.",
            labels=["validation"],
        )
        success = GaugeMetricFamily(
            "gpuval_validation_last_success_timestamp_seconds",
            "When a run last completed with every node passed.",
            labels=["validation"],
        )
        passed = GaugeMetricFamily(
            "gpuval_node_passed",
            "1 when the node's latest verdict is Passed, 0 when Failed.",
            labels=["validation", "node"],
        )
        failure = GaugeMetricFamily(
            "gpuval_node_failure_info",
            "The reason of a node's latest failed verdict (always 1).",
            labels=["validation", "node", "reason"],
        )
        check_failure = GaugeMetricFamily(
            "gpuval_node_check_failure_info",
            "Each (check, reason) that failed in the node's latest report (always 1).",
            labels=["validation", "node", "check", "reason"],
        )
        validated = GaugeMetricFamily(
            "gpuval_node_last_validation_timestamp_seconds",
            "When the node's latest verdict was written.",
            labels=["validation", "node"],
        )
        figures = {
            suffix: GaugeMetricFamily(
                f"gpuval_node_{suffix}",
                f"Worst GPU of the node in its latest report: {key}.",
                labels=["validation", "node"],
            )
            for key, (suffix, _) in SUMMARY_FIGURES.items()
        }
        gpu_figures: dict[str, GaugeMetricFamily] = {}

        for name, state in list(self.registry.items()):
            invalid.add_metric([name], 1.0 if state.invalid else 0.0)
            run = state.run
            if run is not None:
                counts = run.counts()
                for s in NODE_STATES:
                    nodes.add_metric([name, s], float(counts[s]))
                unschedulable.add_metric(
                    [name],
                    float(
                        sum(
                            1
                            for r in run.nodes.values()
                            if r.phase is Phase.RUNNING and r.unschedulable
                        )
                    ),
                )
            if state.uniform is not None:
                uniform.add_metric([name], 1.0 if state.uniform else 0.0)
                outliers.add_metric([name], float(state.outliers))
            for family, value in (
                (started, state.last_run_started),
                (completed, state.last_run_completed),
                (success, state.last_success),
            ):
                if value is not None:
                    family.add_metric([name], value)
            for node, result in list(state.latest.items()):
                ok = result.verdict == "Passed"
                passed.add_metric([name, node], 1.0 if ok else 0.0)
                if not ok:
                    failure.add_metric([name, node, result.reason or "Unknown"], 1.0)
                    for check, reason in result.failed_checks:
                        check_failure.add_metric([name, node, check, reason], 1.0)
                if result.completed_at is not None:
                    validated.add_metric([name, node], result.completed_at)
                for key, value in result.summary.items():
                    suffix, factor = SUMMARY_FIGURES[key]
                    figures[suffix].add_metric([name, node], value * factor)
                if self.per_gpu:
                    for index, suffix, value in result.gpu_figures:
                        gpu_family = gpu_figures.get(suffix)
                        if gpu_family is None:
                            gpu_family = gpu_figures[suffix] = GaugeMetricFamily(
                                f"gpuval_gpu_{suffix}",
                                f"Per-GPU figure of the node's latest report: {suffix}.",
                                labels=["validation", "node", "gpu"],
                            )
                        gpu_family.add_metric([name, node, str(index)], value)
        yield from (nodes, unschedulable, invalid, uniform, outliers, started, completed, success)
        yield from (passed, failure, check_failure, validated)
        yield from figures.values()
        yield from gpu_figures.values()

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


async def start_server(prom: CollectorRegistry, port: int, host: str = "0.0.0.0") -> web.AppRunner:
    """Serve /metrics and /healthz on `port`."""

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=generate_latest(prom), content_type="text/plain", charset="utf-8")

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    log.info("metrics on :%d/metrics", port)
    return runner
