"""Operator at fleet scale: one GpuValidation over N simulated GPU nodes on the local control plane.

Measures the figures of shared/targets.md ("Operator"): apply → every first-wave agent pod created,
last report written → GpuValidation status final, the operator's peak resident memory, the
GpuValidation object's size, and the operator's API writes per node (from its own request counter).
The validation gates nodes (spec.gating), so the operator follows all N nodes with its node watch
the whole time; once the run is complete, `--join` new nodes are added and the time until each has
its verdict on the node (label gpuval.dev/verdict) is measured: detection, the batch window
(`--batch-seconds`), pod, stand-in agent, node action.

The agents are stand-ins here, on purpose: the operator is what is measured, so each agent pod's
report is completed as soon as kwok marks the pod Running, with the admin's credentials and bounded
concurrency. With `--baseline` (spec.baseline: Learn, history kept) a stand-in writes what a real
agent writes: a result document measured once per kind by the real agent code (simulated backend:
healthy 8-GPU H200 nodes at 1.00, 0.99 and 0.98 of the part, one node in 200 slow at 0.85), judged
by the agent's own code against the GpuBaselines its pod was given (GPUVAL_BASELINE); the shipped
H200 baseline (2 GPUs) is applied first, so the first run is judged on per-GPU figures and learns
the 8-GPU baseline after its final status, and a second run (`--runs 2`, a spec change) is judged
against the learned one and carries each node's history in its reports. The real agent runs in the
demo and the integration tests.

    python3 -m uv run python benchmarks/operator_scale.py --nodes 10000 --json out/scale.json
    python3 -m uv run python benchmarks/operator_scale.py --nodes 10000 --baseline --runs 2

Prints a live line while it runs and a table at the end; a benchmark, never a timed test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
import zlib
from pathlib import Path
from typing import Any

from gpuval_agent.baseline import from_env, judge
from gpuval_api.baseline import files
from gpuval_api.env import AgentEnv
from gpuval_api.report import build_report_status
from gpuval_api.result import AgentResult
from gpuval_devtools.controlplane import Cluster, GpuNode, free_port
from gpuval_devtools.launch import agent_rbac, install_crds, operator_process
from gpuval_operator.kube import Follower, KubeClient, load_credentials, q

AGENT_NAMESPACE = "gpuval-system"
WRITE_VERBS = ("POST", "PATCH", "PUT", "DELETE")


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def wait_for_metrics(port: int, timeout: float = 180) -> None:
    """The operator's /metrics answers (start-up on a loaded 2-core machine takes a while)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def operator_writes(port: int) -> int:
    """Writes the operator's own client made, from its /metrics request counter."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith("gpuval_operator_api_requests_total{") and any(
            f'verb="{v}"' in line for v in WRITE_VERBS
        ):
            total += float(line.rsplit(" ", 1)[1])
    return int(total)


def measured_kinds() -> list[AgentResult]:
    """The stand-ins' result documents, measured once each by the real agent (`gpuval-agent run`
    on its simulated backend, no baseline): healthy at three speeds, then slow (see the module
    docstring)."""
    every = range(8)
    factors = (1.0, 0.99, 0.98, 0.85)
    kinds = []
    with tempfile.TemporaryDirectory() as folder:
        for factor in factors:
            faults = [{"kind": "slow-gpu", "gpu": g, "factor": factor} for g in every]
            simulate = {"gpus": 8, "timeScale": 0, "faults": faults if factor < 1 else []}
            out = Path(folder, f"{factor}.json")
            subprocess.run(
                [
                    str(Path(sys.executable).parent / "gpuval-agent"),
                    "run",
                    "--backend",
                    "simulated",
                    "--simulate",
                    json.dumps(simulate),
                    "--duration",
                    "2",
                    "--baseline",
                    "none",
                    "--json",
                    str(out),
                ],
                capture_output=True,
                check=False,
            )
            kinds.append(AgentResult.model_validate_json(out.read_text()))
    return kinds


class Judged:
    """A stand-in's report status per (the baselines its pod was given, kind), made once."""

    def __init__(self, kinds: list[AgentResult]) -> None:
        self.kinds = kinds
        self.made: dict[tuple[str, int], dict[str, Any]] = {}

    def status(self, env: dict[str, str | None], node: str) -> dict[str, Any]:
        spread = zlib.crc32(node.encode())
        kind = len(self.kinds) - 1 if spread % 200 == 0 else spread % (len(self.kinds) - 1)
        text = env.get(AgentEnv.BASELINE) or ""
        found = self.made.get((text, kind))
        if found is None:
            result = self.kinds[kind]
            given = from_env({k: v for k, v in env.items() if v is not None})
            if given is not None:
                result = judge(result, *given)
            found = self.made[(text, kind)] = build_report_status(result)
        return found


class StandInAgents:
    """Completes the report of every agent pod kwok marks Running (see the module docstring)."""

    def __init__(self, client: KubeClient, judged: Judged | None = None) -> None:
        self.client = client
        self.judged = judged
        self.pods_seen: set[str] = set()
        self.pods_of_run: dict[str, set[str]] = {}
        self.done: set[str] = set()
        self.last_report = 0.0
        self.reports_written = 0
        self.sem = asyncio.Semaphore(32)
        self.tasks: set[asyncio.Task[None]] = set()

    async def finish(self, pod: dict[str, Any]) -> None:
        async with self.sem:
            env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0].get("env", [])}
            now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            if self.judged is not None:
                node = pod["metadata"]["annotations"]["gpuval.dev/node"]
                status = {**self.judged.status(env, node), "completedAt": now, "startedAt": now}
            else:
                status = {
                    "phase": "Completed",
                    "verdict": "Passed",
                    "message": "stand-in agent (operator scale benchmark)",
                    "completedAt": now,
                    "summary": {"gpuCount": 8, "burnTflops": 780.0, "h2dGBps": 55.0},
                }
            report = q(str(env["GPUVAL_REPORT_NAME"]))
            await self.client.merge_patch(
                f"/apis/gpuval.dev/v1alpha1/gpunodereports/{report}/status", {"status": status}
            )
            self.last_report = time.monotonic()
            self.reports_written += 1
            pod_name = q(pod["metadata"]["name"])
            await self.client.merge_patch(
                f"/api/v1/namespaces/{AGENT_NAMESPACE}/pods/{pod_name}/status",
                {"status": {"phase": "Succeeded"}},
            )

    def on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        self.pods_seen.add(pod["metadata"]["name"])
        self.pods_of_run.setdefault(pod["metadata"]["labels"].get("gpuval.dev/run", ""), set()).add(
            pod["metadata"]["name"]
        )
        uid = pod["metadata"]["uid"]
        running = (pod.get("status") or {}).get("phase") == "Running"
        if kind != "DELETED" and running and uid not in self.done:
            self.done.add(uid)
            task = asyncio.ensure_future(self.finish(pod))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    def on_page(self, items: list[dict[str, Any]], _first: bool, _last: bool) -> None:
        for pod in items:
            self.on_pod("ADDED", pod)


def node_verdicts(cluster: Cluster, names: list[str]) -> dict[str, str]:
    out = cluster.kubectl(
        "get",
        "nodes",
        *names,
        "-o",
        "jsonpath={range .items[*]}{.metadata.name} {.metadata.labels.gpuval\\.dev/verdict}\n{end}",
    ).stdout
    found = {}
    for line in out.splitlines():
        name, _, verdict = line.partition(" ")
        if verdict:
            found[name] = verdict
    return found


async def measure_join(cluster: Cluster, count: int, op_pid: int) -> dict[str, Any]:
    """Adds `count` nodes to the gated pool and times each one to its verdict on the node."""
    names = [f"scale-join-{i:03d}" for i in range(count)]
    created = time.monotonic()
    cluster.add_nodes(
        [GpuNode(name=n, labels={"gpuval.dev/scale": "yes"}) for n in names], wait_ready=False
    )
    ready_at: dict[str, float] = {}
    done_at: dict[str, float] = {}
    peak = 0
    while len(done_at) < count:
        await asyncio.sleep(0.25)
        now = time.monotonic()
        peak = max(peak, rss_kib(op_pid))
        if len(ready_at) < count:
            out = cluster.kubectl(
                "get",
                "nodes",
                *names,
                "-o",
                "jsonpath={range .items[*]}{.metadata.name} "
                "{.status.conditions[?(@.type=='Ready')].status}\n{end}",
            ).stdout
            for line in out.splitlines():
                name, _, status = line.partition(" ")
                if status == "True":
                    ready_at.setdefault(name, now)
        for name in node_verdicts(cluster, names):
            done_at.setdefault(name, now)
        print(
            f"\r{now - created:7.1f}s  joining nodes Ready {len(ready_at)}/{count}  "
            f"with a verdict {len(done_at)}/{count}",
            end="",
            file=sys.stderr,
            flush=True,
        )
        if now - created > 600:
            missing = sorted(set(names) - set(done_at))
            raise TimeoutError(f"joining nodes without a verdict after 600 s: {missing}")
    print(file=sys.stderr)
    from_create = sorted(done_at[n] - created for n in names)
    from_ready = sorted(done_at[n] - ready_at.get(n, created) for n in names)
    return {
        "joinNodes": count,
        "joinVerdictFromCreateSecondsMedian": round(from_create[count // 2], 2),
        "joinVerdictFromCreateSecondsMax": round(from_create[-1], 2),
        "joinVerdictFromReadySecondsMedian": round(from_ready[count // 2], 2),
        "joinVerdictFromReadySecondsMax": round(from_ready[-1], 2),
        "operatorPeakRssDuringJoinMiB": round(peak / 1024, 1),
    }


def validation_spec(
    max_concurrent: str, batch_seconds: int, baseline: bool, history: int = 3
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "nodeSelector": {"matchLabels": {"gpuval.dev/scale": "yes"}},
        "maxConcurrent": max_concurrent,
        "nodeTimeoutSeconds": 3600,
        "nodeActions": {"label": True},
        "gating": {"join": True, "reboot": True, "batchSeconds": batch_seconds},
        "history": history,
    }
    if baseline:
        spec["baseline"] = {"mode": "Learn", "history": {"runs": 5}}
    return {
        "apiVersion": "gpuval.dev/v1alpha1",
        "kind": "GpuValidation",
        "metadata": {"name": "scale"},
        "spec": spec,
    }


def object_bytes(cluster: Cluster, *args: str) -> int:
    """The JSON size of an object as the API server returns it (0 when there is none)."""
    proc = cluster.kubectl("get", *args, "-o", "json", check=False)
    if proc.returncode != 0:
        return 0
    return len(json.dumps(json.loads(proc.stdout), separators=(",", ":")))


async def one_run(
    cluster: Cluster, agents: StandInAgents, op_pid: int, after: int, first_wave: int
) -> dict[str, Any]:
    """Waits for run number `after + 1` to complete; its figures (and the peak RSS meanwhile)."""
    figures: dict[str, Any] = {}
    started = time.monotonic()
    peak = 0
    while True:
        await asyncio.sleep(0.25)
        now = time.monotonic()
        peak = max(peak, rss_kib(op_pid))
        gv = json.loads(cluster.kubectl("get", "gpuvalidation", "scale", "-o", "json").stdout)
        run = (gv.get("status") or {}).get("run") or {}
        current = int(run.get("number") or 0) > after
        pods = len(agents.pods_of_run.get(run.get("id", ""), ())) if current else 0
        if "firstWaveSeconds" not in figures and pods >= first_wave:
            figures["firstWaveSeconds"] = round(now - started, 2)
        print(
            f"\r{now - started:7.1f}s  run {run.get('number')}  pods created {pods:6d}  "
            f"reports completed {agents.reports_written:6d}  operator RSS {peak / 1024:6.1f} MiB",
            end="",
            file=sys.stderr,
            flush=True,
        )
        if current and run.get("completedAt"):
            figures["runSeconds"] = round(now - started, 2)
            # Upper bound: the poll interval and one kubectl call are included.
            figures["statusFinalAfterLastReportSeconds"] = round(now - agents.last_report, 2)
            figures["objectBytes"] = len(json.dumps(gv, separators=(",", ":")))
            figures["runId"] = run["id"]
            break
    print(file=sys.stderr)
    figures["operatorPeakRssMiB"] = round(peak / 1024, 1)
    return figures


async def wait_learned(cluster: Cluster, op_pid: int) -> dict[str, Any]:
    """After a run's final status, until the operator has learned (status.baseline.learned)."""
    started, peak = time.monotonic(), 0
    while True:
        await asyncio.sleep(0.5)
        peak = max(peak, rss_kib(op_pid))
        gv = json.loads(cluster.kubectl("get", "gpuvalidation", "scale", "-o", "json").stdout)
        baseline = (gv.get("status") or {}).get("baseline") or {}
        if baseline.get("learned") or baseline.get("note"):
            return {
                "learnedSecondsAfterFinalStatus": round(time.monotonic() - started, 2),
                "learned": baseline.get("learned"),
                "learnNote": baseline.get("note"),
                "operatorPeakRssWhileLearningMiB": round(peak / 1024, 1),
                "objectBytesWithBaseline": len(json.dumps(gv, separators=(",", ":"))),
            }
        if time.monotonic() - started > 1800:
            raise TimeoutError("the operator learned nothing within 1800 s of the final status")


def baseline_sizes(cluster: Cluster, run_id: str) -> dict[str, Any]:
    """The objects baselines and history add to: a report of the run (with its history), an
    agent pod (with its GPUVAL_BASELINE), the learned GpuBaseline."""
    selector = f"gpuval.dev/run={run_id}"
    reports = json.loads(
        cluster.kubectl(
            "get", "gpunodereports", "-l", selector, "--chunk-size=50", "-o", "json"
        ).stdout
    )["items"]
    report = reports[0]
    pod = json.loads(
        cluster.kubectl(
            "get", "pods", "-n", AGENT_NAMESPACE, "-l", selector, "--chunk-size=50", "-o", "json"
        ).stdout
    )["items"][0]
    env = {e["name"]: e.get("value") or "" for e in pod["spec"]["containers"][0]["env"]}
    return {
        "reportBytes": len(json.dumps(report, separators=(",", ":"))),
        "reportHistoryEntries": len(report["spec"].get("history") or []),
        "reportHistoryBytes": len(json.dumps(report["spec"].get("history") or [])),
        "podBytes": len(json.dumps(pod, separators=(",", ":"))),
        "podBaselineEnvBytes": len(env.get(AgentEnv.BASELINE, "")),
        "learnedBaselineBytes": object_bytes(cluster, "gpubaseline", "nvidia-h200-x8-700w-gen5x16"),
    }


async def measure(
    cluster: Cluster,
    nodes: int,
    max_concurrent: str,
    join: int,
    batch_seconds: int,
    *,
    baseline: bool = False,
    runs: int = 1,
) -> dict[str, Any]:
    install_crds(cluster)
    cluster.apply(agent_rbac())
    if baseline:
        cluster.apply([files.to_document(b) for b in files.shipped()])
    port = free_port()
    log_file = Path(f"/tmp/{cluster.name}-operator.log")
    client = KubeClient(load_credentials(str(cluster.kubeconfig)))
    agents = StandInAgents(client, Judged(measured_kinds()) if baseline else None)
    follower = Follower(
        client,
        f"/api/v1/namespaces/{AGENT_NAMESPACE}/pods",
        "gpuval.dev/validation",
        agents.on_page,
        agents.on_pod,
    )
    follow = asyncio.ensure_future(follower.run())
    figures: dict[str, Any] = {"nodes": nodes, "maxConcurrent": max_concurrent}
    figures["baseline"] = baseline
    try:
        with operator_process(cluster.kubeconfig, metrics_port=port, log_file=log_file) as op:
            await asyncio.to_thread(wait_for_metrics, port)
            writes_before = operator_writes(port)
            first_wave = (
                -(-nodes * int(max_concurrent[:-1]) // 100)
                if max_concurrent.endswith("%")
                else min(nodes, int(max_concurrent))
            )
            spec = validation_spec(max_concurrent, batch_seconds, baseline)
            cluster.kubectl("apply", "-f", "-", input=json.dumps(spec))
            figures.update(await one_run(cluster, agents, op.pid, 0, first_wave))
            figures["operatorWritesPerNode"] = round(
                (operator_writes(port) - writes_before) / nodes, 2
            )
            figures["firstWavePods"] = first_wave
            if baseline:
                figures.update(await wait_learned(cluster, op.pid))
            for number in range(2, runs + 1):
                # A spec change: a new run, judged against what the last one learned, each
                # report carrying its node's history.
                writes_before = operator_writes(port)
                spec = validation_spec(max_concurrent, batch_seconds, baseline, 3 + number)
                cluster.kubectl("apply", "-f", "-", input=json.dumps(spec))
                found = await one_run(cluster, agents, op.pid, number - 1, first_wave)
                found["operatorWritesPerNode"] = round(
                    (operator_writes(port) - writes_before) / nodes, 2
                )
                figures[f"run{number}"] = found
                if baseline:
                    found.update(baseline_sizes(cluster, found["runId"]))
            if join:
                figures["gatingBatchSeconds"] = batch_seconds
                figures.update(await measure_join(cluster, join, op.pid))
    finally:
        follow.cancel()
        await client.close()
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--max-concurrent", default="25%")
    parser.add_argument("--join", type=int, default=5, help="nodes to add after the run")
    parser.add_argument("--batch-seconds", type=int, default=10, help="spec.gating.batchSeconds")
    parser.add_argument(
        "--baseline", action="store_true", help="spec.baseline on (Learn, history kept)"
    )
    parser.add_argument("--runs", type=int, default=1, help="runs, each after a spec change")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    started = time.monotonic()
    # QPS limits lifted and kwok's heartbeats stretched (design.md, "Scale"): otherwise 10,000
    # simulated kubelets' heartbeats are most of what this 2-core machine does.
    cluster = Cluster.start(
        f"gpuval-scale-{os.getpid()}",
        [],
        disable_qps_limits=True,
        extra_args=["--heartbeat-factor", "5"],
    )
    try:
        nodes = [
            GpuNode(name=f"scale-{i:05d}", labels={"gpuval.dev/scale": "yes"})
            for i in range(args.nodes)
        ]
        cluster.add_nodes(nodes)
        ready = time.monotonic() - started
        figures = asyncio.run(
            measure(
                cluster,
                args.nodes,
                args.max_concurrent,
                args.join,
                args.batch_seconds,
                baseline=args.baseline,
                runs=args.runs,
            )
        )
        figures["clusterAndNodesReadySeconds"] = round(ready, 1)
    finally:
        cluster.stop()
    targets = {
        "firstWaveSeconds": ("<= 60 s at 10,000 nodes", 60),
        "statusFinalAfterLastReportSeconds": ("<= 10 s", 10),
        "operatorPeakRssMiB": ("<= 300 MiB", 300),
        "objectBytes": ("<= 262144 (256 KiB)", 262_144),
    }
    later = {k: v for k, v in figures.items() if isinstance(v, dict)}
    for prefix, found in [("", figures), *((f"{k}.", v) for k, v in later.items())]:
        for key, value in found.items():
            if isinstance(value, dict):
                continue
            target, limit = targets.get(key, ("", None))
            verdict = "" if limit is None else ("met" if value <= limit else "MISSED")
            print(f"{prefix + key:40} {value!s:>12}  {target} {verdict}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"format": "gpuval-operator-scale/1", **figures}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
