"""Operator at fleet scale: one GpuValidation over N simulated GPU nodes on the local control plane.

Measures the figures of shared/targets.md ("Operator"): apply → every first-wave agent pod created,
last report written → GpuValidation status final, the operator's peak resident memory, the
GpuValidation object's size, and the operator's API writes per node (from its own request counter).
The validation gates nodes (spec.gating), so the operator follows all N nodes with its node watch
the whole time; once the (last) run is complete, `--join` new nodes are added and the time until
each has its verdict on the node (label gpuval.dev/verdict) is measured: detection, the batch
window (`--batch-seconds`), pod, stand-in agent, node action.

The agents are stand-ins here, on purpose: the operator is what is measured, so each agent pod's
report is completed (status Passed and a summary; with `--baseline`, judged as below) as soon as
kwok marks the pod Running, with the admin's credentials and bounded concurrency. The real agent
runs in the demo and the integration tests.

With `--fabric` the validation has spec.fabric (groups of 8, topologyKey a rack label, `--racks`
racks), faults are injected into the fabric, and each fabric group's agents run the real agent
fabric code with the simulated fabric double once kwok marks the group's pods Running
(benchmarks/scale_fabric.py); the figures add planning, pods, rounds, the fabric's wall time and
the operator's time per round, report sizes, the GPU-seconds members held idle waiting for their
gang (gpuval_devtools.gangidle: the operator's own gang, without Kueue), and whether every
injected fault was named and nothing else was, and how long the fabric's pods waited at each stage
(made, bound, Running, ended: benchmarks/fabric_pipeline.py; `--fabric-timeline FILE` writes each
pod's times). `--apiserver-profile DIR` adds kube-apiserver's CPU profiles over the fabric phase
and what each kind of work cost in them (benchmarks/apiserver_profile.py).

With `--baseline` the validation has spec.baseline (Learn, each node's last 5 runs kept) and a
stand-in writes what a real agent writes: a result document measured once per kind by the real
agent code, judged by the agent's own code against the GpuBaselines its pod was given
(GPUVAL_BASELINE; benchmarks/scale_baseline.py). The shipped H200 baseline (2 GPUs) is applied
first, so the first run is judged on per-GPU figures and learns the 8-GPU baseline after its
final status; the figures add the time to learn and the object's size with the baseline.

With `--devices dra` the nodes advertise no `nvidia.com/gpu`: each publishes its 8 GPUs in a
ResourceSlice as NVIDIA's DRA driver does, the validation has spec.agent.devices dra, and the
real kube-scheduler allocates each agent pod's ResourceClaim before kwok marks it Running (the
operator learns the nodes' GPUs from the slices' list+watch).

`--runs N` adds N - 1 runs, each started by a spec change (spec.history) once the one before is
complete and, with `--baseline`, learned: judged against the learned baseline, each report
carrying its node's history. Each later run's figures are printed as `runN.<figure>`, with the
sizes of one of its reports, one of its pods and the learned GpuBaseline when `--baseline` is on.
The modes combine (`--fabric --baseline`: the fabric's stand-ins as above, the local checks'
stand-ins judged).

With `--remediation FRACTION` that share of the nodes fails with a reboot-class XID, the validation
hands failed nodes to a stand-in of NVSentinel's janitor through RebootNode objects
(spec.remediation mode Template), and the figures add the repair loop's: requests, the most nodes
in repair and out of service at once against the breaker, failure → back in service (median, max),
memory and writes per node (benchmarks/scale_repairs.py).

    python3 -m uv run python benchmarks/operator_scale.py --nodes 10000 --json out/scale.json
    python3 -m uv run python benchmarks/operator_scale.py --nodes 10000 --fabric --join 0 \
        --json out/scale-fabric.json
    python3 -m uv run python benchmarks/operator_scale.py --nodes 10000 --baseline --runs 2 \
        --json out/scale-baseline.json
    python3 -m uv run python benchmarks/operator_scale.py --nodes 1000 --devices dra \
        --json out/scale-dra.json
    python3 -m uv run python benchmarks/operator_scale.py --nodes 1000 --remediation 0.05 \
        --join 0 --json out/scale-remediation.json

Prints a live line while it runs and a table at the end; a benchmark, never a timed test.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import scale_baseline
import scale_fabric
import scale_repairs
from apiserver_profile import ApiserverProfiler
from apiserver_requests import ApiSampler
from gpuval_api.env import OperatorEnv
from gpuval_devtools import dra
from gpuval_devtools.controlplane import Cluster, GpuNode, free_port
from gpuval_devtools.launch import AGENT_NAMESPACE, agent_rbac, install_crds, operator_process
from gpuval_operator.kube import Follower, KubeClient, load_credentials
from proc_cpu import CpuSampler, cluster_pids
from scale_figures import operator_writes, rss_kib, table, wait_for_metrics
from scale_join import measure_join
from scale_options import (
    DRA,
    VALIDATION,
    Options,
    go_runtime_env,
    kwok_options,
    parse_options,
    validation,
)
from scale_standins import StandInAgents, acting_message, all_verdicts_in

NOT_READY_SECONDS = 3600
# The operator-wide limit on nodes out of service (GPUVAL_MAX_NODES_OUT_OF_SERVICE, the chart's
# default): with --remediation it bounds the nodes in repair at once.
OPERATOR_LIMIT = 10


@dataclass
class Bench:
    """What the runs work with once the operator answers."""

    cluster: Cluster
    client: KubeClient
    agents: StandInAgents
    opts: Options
    op_pid: int
    port: int
    cpu: CpuSampler
    api: ApiSampler
    profiler: ApiserverProfiler | None = None


@dataclass
class RunDone:
    figures: dict[str, Any]
    status: dict[str, Any]  # the validation's status once the run was complete
    completed_at: float  # when that was seen, epoch seconds


async def one_run(bench: Bench, number: int) -> RunDone:
    """Applies the validation of run `number` (a spec change after the first) and waits until
    that run is complete; its figures, timed from the apply, and its final status."""
    agents, opts = bench.agents, bench.opts
    writes_before = operator_writes(bench.port)
    figures: dict[str, Any] = {}
    bench.cpu.sample()
    applied, applied_at, peak = time.monotonic(), time.time(), 0
    first_wave_at: float | None = None
    verdicts_ago: float | None = None
    acting: list[str] = []
    bench.cluster.kubectl("apply", "-f", "-", input=json.dumps(validation(opts, number)))
    while True:
        await asyncio.sleep(0.25)
        now = time.monotonic()
        peak = max(peak, rss_kib(bench.op_pid))
        if not bench.cpu.samples or time.time() - bench.cpu.samples[-1][0] >= 1.0:
            bench.cpu.sample()
        # The API server's counters: at the fabric's first pod, then every 20 s.
        fabric_on = number == 1 and agents.fabric is not None and agents.fabric.pods_created()
        if fabric_on and (not bench.api.samples or time.time() - bench.api.samples[-1][0] >= 20):
            await bench.api.sample()
        if fabric_on and bench.profiler is not None:
            bench.profiler.start()  # once; back to back until the run is complete
        gv = await bench.client.get_or_none(VALIDATION) or {}
        run = (gv.get("status") or {}).get("run") or {}
        current = int(run.get("number") or 0) >= number
        pods = len(agents.pods_of_run.get(run.get("id", ""), ())) if current else 0
        if "firstWaveSeconds" not in figures and pods >= opts.first_wave():
            figures["firstWaveSeconds"] = round(now - applied, 2)
            bench.cpu.sample()
            first_wave_at = time.time()
        fabric_pods = f"  fabric pods {agents.fabric.pods_created():6d}" if agents.fabric else ""
        print(
            f"\r{now - applied:7.1f}s  run {run.get('number')}  pods created {pods:6d}  "
            f"reports completed {agents.reports_written:6d}{fabric_pods}  "
            f"operator RSS {peak / 1024:6.1f} MiB",
            end="",
            file=sys.stderr,
            flush=True,
        )
        if current and verdicts_ago is None and all_verdicts_in(gv):
            verdicts_ago = agents.last_report_ago()
        if current and (progress := acting_message(gv)) is not None:
            acting.append(progress)
        if current and run.get("completedAt"):
            break
    completed_at = time.time()
    # Taken before the samples below (a /metrics read, the last profile's end): they are the
    # benchmark's, not the operator's.
    final_ago = agents.last_report_ago()
    bench.cpu.sample()
    if number == 1 and agents.fabric is not None:
        await bench.api.sample()
    if number == 1 and bench.profiler is not None:
        await bench.profiler.stop()
    print(file=sys.stderr)
    figures["runSeconds"] = round(now - applied, 2)
    if first_wave_at is not None:
        # Who used the two cores on the way to the first wave (CPU seconds by process).
        figures["firstWaveCpuSeconds"] = bench.cpu.between(applied_at, first_wave_at)
    # Upper bounds: the poll interval and one GET are included.
    figures["statusFinalAfterLastReportSeconds"] = round(final_ago, 2)
    # The status had every node's verdict (node actions may still have been under way).
    figures["verdictsInStatusAfterLastReportSeconds"] = round(verdicts_ago or 0.0, 2)
    # What the status said while it applied them (the benchmark polls every 0.25 s).
    figures["nodeActionsProgressSeen"] = list(dict.fromkeys(acting))[:20]
    figures["objectBytes"] = len(json.dumps(gv, separators=(",", ":")))
    figures["verdicts"] = (gv.get("status") or {}).get("nodes") or {}
    figures["runId"] = run.get("id")
    figures["operatorPeakRssMiB"] = round(peak / 1024, 1)
    writes = operator_writes(bench.port) - writes_before
    figures["operatorWritesPerNode"] = round(writes / opts.nodes, 2)
    return RunDone(figures, gv.get("status") or {}, completed_at)


async def wait_learned(bench: Bench, final_at: float) -> dict[str, Any]:
    """After a run's final status (seen at `final_at`, epoch seconds), until the operator has
    learned (status.baseline.learned) or said why it did not (status.baseline.note)."""
    peak = 0
    while True:
        await asyncio.sleep(0.5)
        peak = max(peak, rss_kib(bench.op_pid))
        gv = await bench.client.get_or_none(VALIDATION) or {}
        baseline = (gv.get("status") or {}).get("baseline") or {}
        if baseline.get("learned") or baseline.get("note"):
            return {
                "learnedSecondsAfterFinalStatus": round(time.time() - final_at, 2),
                "learned": baseline.get("learned"),
                "learnNote": baseline.get("note"),
                "operatorPeakRssWhileLearningMiB": round(peak / 1024, 1),
                "objectBytesWithBaseline": len(json.dumps(gv, separators=(",", ":"))),
            }
        if time.time() - final_at > 1800:
            raise TimeoutError("the operator learned nothing within 1800 s of the final status")


async def all_runs(
    bench: Bench,
    names: list[str],
    injected: scale_fabric.Injected | None,
    log_file: Path,
    figures: dict[str, Any],
) -> None:
    """The first run's figures (its fabric's, its learning's), then each later run's as runN,
    into `figures` as each is measured (a benchmark stopped early writes those it has)."""
    opts, fabric = bench.opts, bench.agents.fabric
    first = await one_run(bench, 1)
    figures.update({**first.figures, "firstWavePods": opts.first_wave()})
    if opts.baseline:
        figures.update(await wait_learned(bench, first.completed_at))
    if fabric is not None and injected is not None:
        figures.update(
            await scale_fabric.fabric_figures(
                bench.client,
                fabric,
                injected,
                log=await asyncio.to_thread(log_file.read_text, errors="replace"),
                status=first.status,
                names=names,
                racks=opts.racks,
                limit=opts.first_wave(),
                local_done_at=bench.agents.last_report_at,
                run_completed_at=first.completed_at,
                phase_seconds=opts.phase_seconds,
                cpu=bench.cpu,
                api=bench.api,
                profiler=bench.profiler,
            )
        )
        if opts.fabric_timeline is not None:
            scale_fabric.write_timeline(fabric, opts.fabric_timeline)
    for number in range(2, opts.runs + 1):
        # Judged against what the first run learned, each report carrying its node's history.
        later = await one_run(bench, number)
        if opts.baseline:
            sizes = scale_baseline.baseline_sizes(bench.cluster, str(later.figures["runId"]))
            later.figures.update(sizes)
        figures[f"run{number}"] = later.figures


async def measure(
    cluster: Cluster,
    opts: Options,
    names: list[str],
    injected: scale_fabric.Injected | None,
    figures: dict[str, Any],
) -> None:
    install_crds(cluster)
    cluster.apply(agent_rbac())
    if opts.baseline:
        cluster.apply(scale_baseline.shipped_documents())
    port = free_port()
    log_file = Path(f"/tmp/{cluster.name}-operator.log")
    client = KubeClient(load_credentials(str(cluster.kubeconfig)))
    fabric = None
    if injected is not None:
        sims = {
            n: scale_fabric.simulation(n, scale_fabric.rack_of(i, opts.nodes, opts.racks), injected)
            for i, n in enumerate(names)
        }
        fabric = scale_fabric.StandInFabric(client, sims)
    judged = scale_baseline.Judged(scale_baseline.measured_kinds()) if opts.baseline else None
    janitor = None
    if opts.remediation:
        scale_repairs.install(cluster)
        janitor = scale_repairs.StandInJanitor(
            client, scale_repairs.failing(names, opts.remediation)
        )
    agents = StandInAgents(client, fabric, judged, janitor)
    follower = Follower(
        client,
        f"/api/v1/namespaces/{AGENT_NAMESPACE}/pods",
        "gpuval.dev/validation",
        agents.on_page,
        agents.on_pod,
    )
    follow = asyncio.ensure_future(follower.run())
    janitor_follow = (
        asyncio.ensure_future(scale_repairs.follow(client, janitor).run()) if janitor else None
    )
    figures.update({"nodes": opts.nodes, "maxConcurrent": opts.max_concurrent})
    figures["devices"] = opts.devices
    figures["baseline"] = opts.baseline
    # kwok's stretched heartbeats (scale_options.HEARTBEAT_FACTOR, see main) can lag at 10,000 nodes
    # on this 2-core machine, so nodes read NotReady though nothing is wrong: the operator's
    # NotReady rule (NotRun past GPUVAL_NODE_NOT_READY_SECONDS, tried again 300 s later) would turn
    # that artefact into retry waves. It is tested on the real control plane (test_operator_trust);
    # here it waits an hour, and the figures say so.
    figures["nodeNotReadySeconds"] = NOT_READY_SECONDS
    figures["kwokHeartbeatFactor"] = opts.heartbeat_factor
    figures["kwokPodParallelism"] = opts.kwok_pods
    figures["kwokLeaseParallelism"] = opts.kwok_leases
    figures["controlPlaneGoGc"] = opts.go_gc
    figures["controlPlaneGoMemoryLimit"] = opts.go_memory_limit
    env = {
        str(OperatorEnv.NODE_NOT_READY_SECONDS): str(NOT_READY_SECONDS),
        str(OperatorEnv.MAX_NODES_OUT_OF_SERVICE): str(OPERATOR_LIMIT),
    }
    try:
        with operator_process(
            cluster.kubeconfig, metrics_port=port, log_file=log_file, extra_env=env
        ) as op:
            await asyncio.to_thread(wait_for_metrics, port)
            # Who used the cores (the fabric's figures say it for its phase).
            pids = cluster_pids(cluster.name) | {"operator": op.pid, "benchmark": os.getpid()}
            api = ApiSampler(cluster.kubectl_argv())
            profiler = None
            if opts.apiserver_profile is not None:
                profiler = ApiserverProfiler(
                    cluster.kubectl_argv(), cluster.binaries.kube_apiserver, opts.apiserver_profile
                )
            bench = Bench(
                cluster, client, agents, opts, op.pid, port, CpuSampler(pids), api, profiler
            )
            await all_runs(bench, names, injected, log_file, figures)
            if janitor is not None:
                figures.update(
                    await scale_repairs.measure_repairs(
                        client,
                        janitor,
                        port=port,
                        op_pid=op.pid,
                        nodes=opts.nodes,
                        limit=min(-(-opts.nodes // 10), OPERATOR_LIMIT),
                        writes_before=0,
                    )
                )
            if opts.join:
                figures["gatingBatchSeconds"] = opts.batch_seconds
                figures.update(await measure_join(cluster, opts.join, op.pid))
    finally:
        follow.cancel()
        if janitor_follow is not None:
            janitor_follow.cancel()
        if fabric is not None:
            fabric.close()
        await client.close()


def _published(name: str) -> dict[str, Any]:
    """With --devices dra: a node that advertises no nvidia.com/gpu and publishes its 8 GPUs in a
    ResourceSlice, as NVIDIA's DRA driver does (gpuval_devtools.dra)."""
    uuids = [dra.gpu_uuid(name, i) for i in range(8)]
    return {"gpus": 0, "slices": (dra.resource_slice(name, uuids),)}


def add_fleet(cluster: Cluster, names: list[str], opts: Options) -> None:
    """The simulated GPU nodes, each in its rack with `--fabric`, until all are Ready."""
    labels = {"gpuval.dev/scale": "yes"}
    nodes = [
        GpuNode(
            name=name,
            labels={
                **labels,
                scale_fabric.RACK_LABEL: scale_fabric.rack_of(i, len(names), opts.racks),
            }
            if opts.fabric
            else labels,
            **(_published(name) if opts.devices == DRA else {}),
        )
        for i, name in enumerate(names)
    ]
    # Small batches: one kubectl apply of 500 nodes can outlast its timeout on a busy machine.
    for start in range(0, len(nodes), 100):
        cluster.add_nodes(nodes[start : start + 100], wait_ready=False)
    cluster.wait_nodes_ready(names)


def _stop_on_sigterm() -> None:
    """`kill` ends the benchmark as Ctrl-C does, through the `finally` that stops its control
    plane: killed otherwise, its kube-apiserver and kwok outlive it and load the machine."""

    def stop(signum: int, _frame: object) -> None:
        # Once: a second SIGTERM (uv passes on the one it got too) must not cut the clean-up.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)


def main() -> int:
    opts, json_path = parse_options(description=__doc__.split("\n\n")[0])
    _stop_on_sigterm()
    names = [f"scale-{i:05d}" for i in range(opts.nodes)]
    injected = scale_fabric.inject(names, opts.racks) if opts.fabric else None
    started = time.monotonic()
    # QPS limits lifted and kwok's heartbeats stretched (design.md, "Scale"): otherwise 10,000
    # simulated kubelets' heartbeats are most of what this 2-core machine does. kwokctl scales
    # the node lifecycle controller's grace with the factor (40 s times it): at factor 5 (200 s)
    # heartbeats that lagged behind the busy API server made thousands of healthy stand-ins
    # NotReady and tainted them unreachable (2,946 at once in the 10,000-node fabric run, 5,065
    # in the baseline run), so their pods stayed pending and a second run started on the Ready
    # ones only: an artefact of 10,000 kubelets on 2 cores. At HEARTBEAT_FACTOR (scale_options) the
    # grace is 600 s and there are three times fewer heartbeats. (kwokctl 0.8.0's --extra-args for
    # the controller manager panics, so the grace is not set on its own.) kwok-controller stands in
    # for every node's kubelet but marks pods Running 4 at a time for all of them: at 10,000
    # nodes most of a fabric round is pods waiting in that queue (fabricPodWaitSeconds).
    # --kwok-pod-parallelism lets it start more at once, with --kwok-lease-parallelism so its
    # lease renewals keep up (docs/operator/fabric.md, "How the fabric scales"); kwok's own by
    # default.
    os.environ.update(go_runtime_env(opts))
    cluster = Cluster.start(
        f"gpuval-scale-{os.getpid()}",
        [],
        disable_qps_limits=True,
        extra_args=["--heartbeat-factor", str(opts.heartbeat_factor)],
        kwok_options=kwok_options(opts),
    )
    figures: dict[str, Any] = {}
    code = 0
    try:
        add_fleet(cluster, names, opts)
        figures["clusterAndNodesReadySeconds"] = round(time.monotonic() - started, 1)
        asyncio.run(measure(cluster, opts, names, injected, figures))
    except SystemExit as stop:
        # Killed (SIGTERM) before the end: the figures measured so far are written, marked.
        figures["stoppedBeforeEnd"] = True
        code = stop.code if isinstance(stop.code, int) else 1
    finally:
        cluster.stop()
    print("\n".join(table(figures)))
    if json_path:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps({"format": "gpuval-operator-scale/2", **figures}, indent=2))
    return code


if __name__ == "__main__":
    sys.exit(main())
