"""What benchmarks/operator_scale.py reads of the operator (its resident memory, its own count of
API writes, its health endpoint) and the table of figures against ../shared/targets.md."""

from __future__ import annotations

import json
import re
import time
import urllib.request
from pathlib import Path
from typing import Any

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


TARGETS = {
    "firstWaveSeconds": ("<= 60 s at 10,000 nodes (120 s at 25,000)", 60),
    "statusFinalAfterLastReportSeconds": ("<= 10 s", 10),
    "operatorPeakRssMiB": ("<= 300 MiB at 10,000 nodes (500 MiB at 25,000)", 300),
    "objectBytes": ("<= 262144 (256 KiB)", 262_144),
    "reportBytesMax": ("<= 262144 (256 KiB)", 262_144),
    "fabricOperatorSecondsPerRoundMax": ("<= 60 s", 60),
    "fabricMaxRoundsPerGroup": ("<= 4", 4),
    # Baselines and history: object sizes and memory within the rows above.
    "operatorPeakRssWhileLearningMiB": ("<= 300 MiB at 10,000 nodes", 300),
    "objectBytesWithBaseline": ("<= 262144 (256 KiB)", 262_144),
    "reportBytes": ("<= 262144 (256 KiB)", 262_144),
    # The repair hand-over (--remediation): never more nodes in repair than the breaker allows (the
    # operator-wide limit of 10 here, below the validation's 10 %), one request per failure.
    "repairMostInRepairAtOnce": ("<= the breaker (10)", 10),
    "repairMostOutOfServiceAtOnce": ("<= the breaker (10)", 10),
    "repairMostObjectsAtOnce": ("<= the breaker (10)", 10),
    "repairRequestsPerFailingNodeMax": ("one request per failure (each repair helps here)", 1),
    "operatorPeakRssDuringRepairsMiB": ("<= 300 MiB at 10,000 nodes", 300),
}
# The targets past 10,000 nodes, up to 25,000 (../shared/targets.md, "25,000 nodes").
AT_25K = {"firstWaveSeconds": 120, "operatorPeakRssMiB": 500}
LATER_RUN = re.compile(r"run\d+")


def table(figures: dict[str, Any], prefix: str = "", nodes: int | None = None) -> list[str]:
    """The figures against their targets (those of its fleet's size), one a line; a later run's
    as runN.<figure>."""
    nodes = nodes if nodes is not None else int(figures.get("nodes") or 0)
    lines = []
    for key, value in figures.items():
        if LATER_RUN.fullmatch(key) and isinstance(value, dict):
            lines += table(value, f"{key}.", nodes)
            continue
        target, limit = TARGETS.get(key, ("", None))
        if nodes > 10_000 and key in AT_25K:
            limit = AT_25K[key]
        verdict = "" if limit is None else ("met" if value <= limit else "MISSED")
        shown = value if not isinstance(value, (dict, list)) else json.dumps(value)
        lines.append(f"{prefix + key:44} {shown!s:>12}  {target} {verdict}")
    return lines
