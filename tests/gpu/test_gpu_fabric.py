"""`gpuval-agent fabric` on real GPUs: two agents, one GPU each, act as two nodes.

Each test starts the real command twice (CUDA_VISIBLE_DEVICES=0 and =1) meeting over loopback,
then checks the verdicts, and that no rank process of the group is left behind.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from gpuval_api.fabric import FabricResult, Transport
from gpuval_api.reasons import Reason
from gpuval_api.result import Verdict

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
GPUS = torch.cuda.device_count()
SOCKETS = {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "NCCL_NET": "Socket"}
SMALL = {"maxBytes": 64 << 20, "pairBytes": 64 << 20, "iterations": 5}


def _ports() -> int:
    """A port with the five after it free (the coordinator and the rank processes' stores)."""
    for _ in range(100):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base: int = probe.getsockname()[1]
        try:
            for port in range(base, base + 6):
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
    raise RuntimeError("no run of six free ports")


def _leftover_ranks(group: str) -> list[str]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "gpuval_agent.backends.rankprocess" in text and f"--group {group} " in text:
            found.append(text[:200])
    return found


def _two_nodes(
    tmp_path: Path,
    config: dict[str, Any],
    env: dict[str, str] | None = None,
    hang: str | None = None,
) -> tuple[list[FabricResult], str]:
    port, group = _ports(), f"gpu-test-{uuid.uuid4().hex[:8]}"
    (tmp_path / "fabric.json").write_text(json.dumps(config))
    processes = []
    for rank in (0, 1):
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
            group,
            "--gpus",
            "1",
            "--config",
            str(tmp_path / "fabric.json"),
            "--json",
            str(tmp_path / f"rank{rank}.json"),
        ]
        if hang is not None and rank == 1:
            command += ["--test-hang", hang]
        environ = dict(os.environ) | (env or {}) | {"CUDA_VISIBLE_DEVICES": str(rank)}
        processes.append(
            subprocess.Popen(
                command, env=environ, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
        )
    outputs = [p.communicate(timeout=400)[0] for p in processes]
    for output in outputs:
        assert "Traceback" not in output, output
    results = [
        FabricResult.model_validate_json((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)
    ]
    return results, group


@pytest.mark.skipif(GPUS < 2, reason="needs 2 GPUs")
def test_two_nodes_over_sockets_pass_and_say_socket(tmp_path: Path) -> None:
    results, group = _two_nodes(tmp_path, SMALL, env=SOCKETS)
    for result in results:
        assert result.verdict is Verdict.PASSED, (result.message, result.log_tail)
        assert result.transport is Transport.SOCKET
        assert any("via NET/Socket" in line for line in result.transport_lines)
        assert result.nccl_env["NCCL_NET"] == "Socket" and result.nccl_env["NCCL_ALGO"] == "Ring"
    first = results[0]
    assert [s.bytes for s in first.sizes] == [(1 << 20) << i for i in range(7)]
    assert first.busbw_gbps is not None and first.busbw_gbps > 0
    [pair] = first.pairs
    assert (pair.a, pair.b, pair.round) == ("gpu0", "gpu1", 1) and pair.busbw_gbps
    assert _leftover_ranks(group) == []


@pytest.mark.skipif(GPUS < 2, reason="needs 2 GPUs")
@pytest.mark.skipif(
    any(Path("/sys/class/infiniband").glob("*")), reason="this machine has InfiniBand"
)
def test_nccl_net_ib_without_ib_is_a_transport_fallback_not_a_crash_or_a_pass(
    tmp_path: Path,
) -> None:
    config = SMALL | {
        "expectedTransport": "IB",
        "ncclEnv": [{"name": "NCCL_NET", "value": "IB"}],
        "timeouts": {"initSeconds": 60, "phaseSeconds": 60},
    }
    results, group = _two_nodes(tmp_path, config)
    for result in results:
        assert (result.verdict, result.reason) == (
            Verdict.FAILED,
            Reason.FABRIC_TRANSPORT_FALLBACK,
        ), (result.message, result.log_tail)
        assert "network IB" in result.message
    assert _leftover_ranks(group) == []


@pytest.mark.skipif(GPUS < 2, reason="needs 2 GPUs")
def test_a_rank_that_never_joins_is_a_timeout_and_every_process_exits(tmp_path: Path) -> None:
    config = SMALL | {"timeouts": {"initSeconds": 30, "phaseSeconds": 30}}
    results, group = _two_nodes(tmp_path, config, hang="check")
    for result in results:
        assert (result.verdict, result.reason) == (Verdict.FAILED, Reason.NCCL_TIMEOUT), (
            result.message
        )
        assert "no result within 30 s (fabric.timeouts.initSeconds)" in result.message
    assert results[0].log_tail is not None and "NCCL INFO" in results[0].log_tail
    assert _leftover_ranks(group) == []
