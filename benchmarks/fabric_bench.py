"""Fabric benchmark on one machine with 2 GPUs: two agents act as two nodes over NCCL's network.

    python benchmarks/fabric_bench.py --out fabric.json [--max-size 1G] [--iterations 5]

Two `gpuval-agent fabric` processes, one GPU each (CUDA_VISIBLE_DEVICES=0 and =1), meet over
loopback as rank 0 and rank 1, with NCCL forced onto its network transport
(NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NET=Socket): what two nodes joined by TCP would do.
In the same run, a plain torch.distributed all-reduce over the same transport and the same NCCL
variables (ref_allreduce.py --mode eager, two processes) is the reference. Printed per size >= 1
MiB: the agent's busbw, the reference's, the ratio (target >= 0.97 at >= 256 MiB,
shared/targets.md) and the transport the agent read from NCCL's own lines. JSON format
"gpuval-fabric-bench/1".
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

FORMAT = "gpuval-fabric-bench/1"
MIB = 1 << 20
TARGET, TARGET_FROM = 0.97, 256 * MIB
# Every process of the benchmark, agents and reference alike: the network transport, the ring
# (the agent pins it; the reference must run the same algorithm), multicast off.
NETWORK = {
    "NCCL_P2P_DISABLE": "1",
    "NCCL_SHM_DISABLE": "1",
    "NCCL_NET": "Socket",
    "NCCL_ALGO": "Ring",
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
    "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
}


def _size(text: str) -> int:
    units = {"K": 1 << 10, "M": MIB, "G": 1 << 30}
    return int(float(text[:-1]) * units[text[-1]]) if text[-1] in units else int(text)


def free_ports(count: int) -> int:
    """A port with the `count - 1` after it free too (the agent uses PORT..PORT+5)."""
    for _ in range(200):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base: int = probe.getsockname()[1]
        if base + count >= 65535:
            continue
        try:
            for port in range(base, base + count):
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise RuntimeError("no run of free ports on loopback")


def run_agents(config: dict[str, Any], tmp: Path, timeout: float) -> list[dict[str, Any]]:
    port = free_ports(6)
    config_file = tmp / "fabric.json"
    config_file.write_text(json.dumps(config))
    processes = []
    for rank in (0, 1):
        env = dict(os.environ) | NETWORK | {"CUDA_VISIBLE_DEVICES": str(rank)}
        command = [
            sys.executable,
            "-m",
            "gpuval_agent.cli",
            "fabric",
            "--rank",
            str(rank),
            "--world",
            "2",
            "--master",
            f"127.0.0.1:{port}",
            "--nodes",
            "gpu0,gpu1",
            "--group",
            "fabric-bench",
            "--gpus",
            "1",
            "--config",
            str(config_file),
            "--json",
            str(tmp / f"rank{rank}.json"),
        ]
        log = (tmp / f"rank{rank}.log").open("w")
        processes.append((subprocess.Popen(command, env=env, stdout=log, stderr=log), log))
    results = []
    for rank, (process, log) in enumerate(processes):
        code = process.wait(timeout=timeout)
        log.close()
        print(f"--- agent rank {rank} exited {code} ---", flush=True)
        print((tmp / f"rank{rank}.log").read_text()[-4000:], flush=True)
        written = tmp / f"rank{rank}.json"
        if written.exists():
            results.append(json.loads(written.read_text()))
        else:  # the agent could not run (exit 2): its log above says why
            results.append({"node": f"gpu{rank}", "verdict": f"exit {code}", "sizes": []})
    return results


def run_reference(sizes: list[int], iterations: int, tmp: Path, timeout: float) -> dict[int, float]:
    out = tmp / "reference.json"
    env = dict(os.environ) | NETWORK
    subprocess.run(
        [
            sys.executable,
            str(Path(__file__).with_name("ref_allreduce.py")),
            "--gpus",
            "2",
            "--sizes",
            ",".join(map(str, sizes)),
            "--iterations",
            str(iterations),
            "--mode",
            "eager",
            "--out",
            str(out),
        ],
        env=env,
        check=True,
        timeout=timeout,
    )
    return {r["bytes"]: r["busbwGBps"] for r in json.loads(out.read_text())}


def table(agent: dict[int, float], reference: dict[int, float]) -> list[dict[str, Any]]:
    rows = []
    print(f"{'bytes':>12} {'agent GB/s':>11} {'torch GB/s':>11} {'ratio':>7}  target", flush=True)
    for size in sorted(agent):
        figure, plain = agent[size], reference.get(size)
        ratio = figure / plain if plain else None
        met = None if size < TARGET_FROM or ratio is None else ratio >= TARGET
        rows.append(
            {
                "bytes": size,
                "agentBusbwGBps": figure,
                "referenceBusbwGBps": plain,
                "ratio": ratio,
                "target": TARGET if size >= TARGET_FROM else None,
                "met": met,
            }
        )
        shown = "-" if ratio is None else f"{ratio:.3f}"
        verdict = "" if met is None else ("MET" if met else "MISSED")
        print(f"{size:>12} {figure:>11.2f} {plain or 0:>11.2f} {shown:>7}  {verdict}", flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--max-size", type=_size, default=1 << 30)
    parser.add_argument("--pair-size", type=_size, default=256 * MIB)
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=240)
    args = parser.parse_args()
    started = datetime.now(UTC)
    config = {
        "minBytes": MIB,
        "maxBytes": args.max_size,
        "pairBytes": args.pair_size,
        "iterations": args.iterations,
        "timeouts": {"initSeconds": 120, "phaseSeconds": 180},
    }
    with tempfile.TemporaryDirectory(prefix="fabric-bench-") as name:
        tmp = Path(name)
        results = run_agents(config, tmp, args.timeout)
        sizes = [s["bytes"] for s in results[0].get("sizes", [])]
        reference = run_reference(sizes, args.iterations, tmp, args.timeout) if sizes else {}
    first = results[0]
    agent = {s["bytes"]: s["busbwGBps"] for s in first.get("sizes", [])}
    print(f"transport detected: {first.get('transport')}", flush=True)
    for line in first.get("transportLines", []):
        print(f"  {line}", flush=True)
    print(f"verdicts: {[(r['node'], r['verdict'], r.get('reason')) for r in results]}", flush=True)
    print(f"pairs: {[(p['a'], p['b'], p.get('busbwGBps')) for p in first.get('pairs', [])]}")
    rows = table(agent, reference)
    document = {
        "format": FORMAT,
        "startedAt": started.isoformat(),
        "completedAt": datetime.now(UTC).isoformat(),
        "settings": config,
        "network": NETWORK,
        "transport": first.get("transport"),
        "transportLines": first.get("transportLines"),
        "ncclEnv": first.get("ncclEnv"),
        "agents": results,
        "rows": rows,
    }
    Path(args.out).write_text(json.dumps(document, indent=2) + "\n")
    missed = [r["bytes"] for r in rows if r["met"] is False]
    print(f"wrote {args.out}; sizes >= 256 MiB below {TARGET}: {missed or 'none'}", flush=True)
    return 0 if all(r["verdict"] == "Passed" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
