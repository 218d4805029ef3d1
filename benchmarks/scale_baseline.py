"""The baseline side of benchmarks/operator_scale.py (`--baseline`): the stand-in agents' judged
result documents and the sizes baselines and history add to objects.

A stand-in writes what a real agent writes: a result document measured once per kind by the real
agent code (`gpuval-agent run` on its simulated backend, no baseline: healthy 8-GPU H200 nodes at
1.00, 0.99 and 0.98 of the part, one node in 200 slow at 0.85), judged by the agent's own code
(`gpuval_agent.baseline.judge`) against the GpuBaselines its pod was given (GPUVAL_BASELINE), and
turned into a report status by `gpuval_api.report.build_report_status`; each (baselines, kind)
pair is judged once and reused.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path
from typing import Any

from gpuval_agent.baseline import from_env, judge
from gpuval_api.baseline import files
from gpuval_api.env import AgentEnv
from gpuval_api.report import build_report_status
from gpuval_api.result import AgentResult
from gpuval_devtools.controlplane import Cluster
from gpuval_devtools.launch import AGENT_NAMESPACE
from scale_fabric import GROUP_LABEL, RUN_LABEL

# Learn, keeping each node's last 5 runs: the first run learns, the later ones are judged
# against what it learned and carry each node's history in their reports.
BASELINE_SPEC: dict[str, Any] = {"mode": "Learn", "history": {"runs": 5}}
# What the first run learns from the stand-ins' 8-GPU H200 results.
LEARNED = "nvidia-h200-x8-700w-gen5x16"
FACTORS = (1.0, 0.99, 0.98, 0.85)  # the kinds' speed against the part; the last one is slow


def shipped_documents() -> list[dict[str, Any]]:
    """The GpuBaselines shipped with gpuval (H200, 2 GPUs), applied before the first run."""
    return [files.to_document(b) for b in files.shipped()]


def measure_kind(factor: float, out: Path) -> AgentResult:
    """One result document from the real agent on its simulated backend, every GPU at `factor`."""
    faults = [{"kind": "slow-gpu", "gpu": g, "factor": factor} for g in range(8)]
    simulate = {"gpus": 8, "timeScale": 0, "faults": faults if factor < 1 else []}
    agent = str(Path(sys.executable).parent / "gpuval-agent")
    command = [agent, "run", "--backend", "simulated", "--simulate", json.dumps(simulate)]
    command += ["--duration", "2", "--baseline", "none", "--json", str(out)]
    # A slow node's agent exits non-zero on purpose; the document is what counts.
    proc = subprocess.run(command, capture_output=True, text=True, check=False)
    if not out.exists():
        raise RuntimeError(
            f"gpuval-agent run (factor {factor}) wrote no result (exit {proc.returncode}): "
            f"{proc.stderr.strip()[-2000:]}"
        )
    return AgentResult.model_validate_json(out.read_text())


def measured_kinds() -> list[AgentResult]:
    """The stand-ins' result documents, one per factor of FACTORS (see the module docstring)."""
    with tempfile.TemporaryDirectory() as folder:
        return [measure_kind(f, Path(folder, f"{f}.json")) for f in FACTORS]


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


def object_bytes(cluster: Cluster, *args: str) -> int:
    """The JSON size of an object as the API server returns it (0 when there is none)."""
    proc = cluster.kubectl("get", *args, "-o", "json", check=False)
    if proc.returncode != 0:
        return 0
    return len(json.dumps(json.loads(proc.stdout), separators=(",", ":")))


def first_of(cluster: Cluster, kind: str, selector: str, *more: str) -> dict[str, Any]:
    """One object of `kind` with the label `selector` (a page of 50 is read)."""
    got = cluster.kubectl("get", kind, *more, "-l", selector, "--chunk-size=50", "-o", "json")
    items: list[dict[str, Any]] = json.loads(got.stdout)["items"]
    if not items:
        raise RuntimeError(f"no {kind} with {selector}")
    return items[0]


def baseline_sizes(cluster: Cluster, run_id: str) -> dict[str, Any]:
    """The objects baselines and history add to: a report of the run (with its history), an
    agent pod of its local checks (with its GPUVAL_BASELINE; a fabric pod has none), the learned
    GpuBaseline."""
    selector = f"{RUN_LABEL}={run_id}"
    report = first_of(cluster, "gpunodereports", selector)
    pod = first_of(cluster, "pods", f"{selector},!{GROUP_LABEL}", "-n", AGENT_NAMESPACE)
    env = {e["name"]: e.get("value") or "" for e in pod["spec"]["containers"][0]["env"]}
    history = report["spec"].get("history") or []
    return {
        "reportBytes": len(json.dumps(report, separators=(",", ":"))),
        "reportHistoryEntries": len(history),
        "reportHistoryBytes": len(json.dumps(history)),
        "podBytes": len(json.dumps(pod, separators=(",", ":"))),
        "podBaselineEnvBytes": len(env.get(AgentEnv.BASELINE, "")),
        "learnedBaselineBytes": object_bytes(cluster, "gpubaseline", LEARNED),
    }
