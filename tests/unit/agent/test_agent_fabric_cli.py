"""`gpuval-agent fabric` by hand: one real agent process per node, meeting over TCP on loopback,
with the simulated backend (the test double) playing the fabric's faults."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gpuval_agent.cli import main
from gpuval_agent.errors import AgentError
from gpuval_agent.fabric.driver import unique_names
from gpuval_agent.fabric.frontend import plan_from_env
from gpuval_api.env import AgentEnv
from gpuval_api.fabric import FabricResult, Transport
from gpuval_api.reasons import Reason
from gpuval_api.result import Verdict
from gpuval_devtools.controlplane import free_port

SHORT = {"timeouts": {"initSeconds": 5, "phaseSeconds": 5}, "maxBytes": 1 << 30}


@dataclass
class Node:
    code: int
    result: FabricResult
    output: str


def _group(
    tmp_path: Path,
    world: int,
    faults: dict[int, list[dict[str, Any]]] | None = None,
    config: dict[str, Any] | None = None,
) -> list[Node]:
    """Every node's agent at once, as a person would start them on `world` machines."""
    port, names = free_port(), [f"node-{chr(ord('a') + r)}" for r in range(world)]
    config_file = tmp_path / "fabric.json"
    config_file.write_text(json.dumps(config or SHORT))
    processes = []
    for rank in range(world):
        simulate = {"gpus": 2, "faults": (faults or {}).get(rank, [])}
        processes.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "gpuval_agent.cli",
                    "fabric",
                    "--backend",
                    "simulated",
                    "--simulate",
                    json.dumps(simulate),
                    "--rank",
                    str(rank),
                    "--world",
                    str(world),
                    "--master",
                    f"127.0.0.1:{port}",
                    "--nodes",
                    ",".join(names),
                    "--group",
                    "g1",
                    "--config",
                    str(config_file),
                    "--json",
                    str(tmp_path / f"rank{rank}.json"),
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    nodes = []
    for rank, process in enumerate(processes):
        output, _ = process.communicate(timeout=120)
        assert "Traceback" not in output, output
        text = (tmp_path / f"rank{rank}.json").read_text()
        nodes.append(Node(process.returncode, FabricResult.model_validate_json(text), output))
    return nodes


def _verdicts(nodes: list[Node]) -> dict[str, tuple[Verdict, Reason | None]]:
    return {n.result.node: (n.result.verdict, n.result.reason) for n in nodes}


def test_a_healthy_group_passes_on_every_node_with_every_pair_and_the_transport(
    tmp_path: Path,
) -> None:
    nodes = _group(tmp_path, 4)
    assert [n.code for n in nodes] == [0, 0, 0, 0]
    first = nodes[0].result
    assert first.backend == "simulated" and first.nodes == ["node-a", "node-b", "node-c", "node-d"]
    assert first.transport is Transport.IB_GDRDMA
    assert any("via NET/IB/0/GDRDMA" in line for line in first.transport_lines)
    assert [(p.round, p.a, p.b) for p in first.pairs] == [
        (1, "node-a", "node-b"),
        (1, "node-c", "node-d"),
        (2, "node-b", "node-c"),
        (2, "node-d", "node-a"),
    ]
    assert [s.bytes for s in first.sizes] == [1 << (20 + i) for i in range(11)]
    assert first.busbw_gbps is not None and first.busbw_gbps > 300
    assert first.nccl_env["NCCL_ALGO"] == "Ring" and first.nccl_env["NCCL_DEBUG"] == "INFO"
    assert all(n.result.pairs == first.pairs for n in nodes), "every node holds the evidence"
    assert "PASSED: group busbw" in nodes[2].output and "ROUND" in nodes[2].output
    # A passing node keeps its NCCL log too (the run may still fail it), set-up lines only.
    assert first.nccl_log is not None and "NCCL INFO Using network IB" in first.nccl_log
    assert first.log_tail is None


def test_one_slow_node_of_eight_is_named_and_its_partners_pass(tmp_path: Path) -> None:
    nodes = _group(tmp_path, 8, {5: [{"kind": "fabric-slow-node"}]})
    verdicts = _verdicts(nodes)
    assert verdicts.pop("node-f") == (Verdict.FAILED, Reason.FABRIC_SLOW_NODE)
    assert set(verdicts.values()) == {(Verdict.PASSED, None)}
    slow = nodes[5]
    assert slow.code == 1 and "its partners node-e, node-g were fine" in slow.result.message
    [confirmation] = [p for p in slow.result.pairs if p.round == 0]
    assert "node-f" in (confirmation.a, confirmation.b)
    assert "FAIL FabricSlowNode" in slow.output and "hint: check the node's NICs" in slow.output


def test_a_slow_link_names_its_two_nodes_and_no_other(tmp_path: Path) -> None:
    nodes = _group(tmp_path, 6, {2: [{"kind": "fabric-slow-link", "peer": "node-d"}]})
    verdicts = _verdicts(nodes)
    assert (
        verdicts.pop("node-c")
        == verdicts.pop("node-d")
        == (
            Verdict.FAILED,
            Reason.FABRIC_SLOW_LINK,
        )
    )
    assert set(verdicts.values()) == {(Verdict.PASSED, None)}
    assert "the link to node-d is slow" in nodes[2].result.message
    assert "the link to node-c is slow" in nodes[3].result.message


def test_a_node_that_cannot_reach_rank_0_says_where_and_the_others_are_not_run(
    tmp_path: Path,
) -> None:
    nodes = _group(tmp_path, 3, {1: [{"kind": "fabric-unreachable"}]})
    unreachable = nodes[1].result
    assert (unreachable.verdict, unreachable.reason) == (
        Verdict.FAILED,
        Reason.FABRIC_UNREACHABLE,
    )
    assert "could not reach rank 0's rendezvous at 127.0.0.1:" in unreachable.message
    assert "ConnectionRefusedError" in unreachable.message
    for other in (nodes[0], nodes[2]):
        assert (other.result.verdict, other.result.reason) == (
            Verdict.NOT_RUN,
            Reason.FABRIC_UNREACHABLE,
        )
        assert "node-b (rank 1) never reached rank 0's rendezvous" in other.result.message
        assert other.code == 3  # not tested
    assert nodes[1].code == 1


def test_a_hang_ends_in_its_timeout_names_the_hung_node_and_keeps_ncclinfo(tmp_path: Path) -> None:
    nodes = _group(tmp_path, 4, {2: [{"kind": "fabric-hang"}]})
    hung = nodes[2].result
    assert (hung.verdict, hung.reason) == (Verdict.FAILED, Reason.NCCL_TIMEOUT)
    assert "no result within 5 s (fabric.timeouts.phaseSeconds): hung" in hung.message
    assert hung.log_tail is not None and "NCCL INFO" in hung.log_tail
    assert hung.nccl_log is not None and "fabric-hang: the collective never ends" in hung.nccl_log
    assert hung.busbw_gbps is None and hung.sizes == []
    others = [n.result for n in nodes if n.result.node != "node-c"]
    assert {(r.verdict, r.reason) for r in others} == {(Verdict.PASSED, None)}
    assert all("the pairs name node-c" in r.message for r in others)


def test_sockets_where_ib_is_expected_fail_that_node_only(tmp_path: Path) -> None:
    config = SHORT | {"expectedTransport": "IB"}
    nodes = _group(tmp_path, 4, {3: [{"kind": "fabric-socket-fallback"}]}, config)
    fallback = nodes[3].result
    assert (fallback.verdict, fallback.reason) == (
        Verdict.FAILED,
        Reason.FABRIC_TRANSPORT_FALLBACK,
    )
    assert fallback.transport is Transport.SOCKET
    assert any("via NET/Socket/0" in line for line in fallback.transport_lines)
    assert {_verdicts(nodes)[n] for n in ("node-a", "node-b", "node-c")} == {(Verdict.PASSED, None)}


def test_nccl_net_ib_without_an_hca_fails_at_init_as_a_fallback_not_a_crash(tmp_path: Path) -> None:
    config = SHORT | {"expectedTransport": "IB", "ncclEnv": [{"name": "NCCL_NET", "value": "IB"}]}
    nodes = _group(tmp_path, 2, {1: [{"kind": "fabric-socket-fallback"}]}, config)
    broken = nodes[1].result
    assert (broken.verdict, broken.reason) == (Verdict.FAILED, Reason.FABRIC_TRANSPORT_FALLBACK)
    assert "could not start network IB" in broken.message
    assert broken.nccl_env["NCCL_NET"] == "IB"
    # Two nodes make one pair: nothing tells the healthy end from the broken one, so it is not
    # passed either; its own reason is the failed all-reduce.
    assert (nodes[0].result.verdict, nodes[0].result.reason) == (
        Verdict.FAILED,
        Reason.NCCL_ERROR,
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--world", "2", "--master", "h:1"], "--rank needed"),
        (["--rank", "2", "--world", "2", "--master", "h:1"], "the rank 0 to world-1"),
        (["--rank", "0", "--world", "2", "--master", "nohost"], "is not ADDR:PORT"),
        (["--rank", "0", "--world", "2", "--master", "h:1", "--nodes", "a"], "give 2 names"),
        (
            [
                "--rank",
                "0",
                "--world",
                "1",
                "--master",
                "h:1",
                "--max-size",
                "1K",
                "--pair-size",
                "2",
            ],
            "pairBytes: Input should be greater than or equal to 4",
        ),
    ],
)
def test_a_wrong_flag_is_named_without_a_traceback(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["fabric", "--backend", "simulated", *args]) == 2
    assert message in capsys.readouterr().err


def test_machines_sharing_a_hostname_get_their_rank_appended() -> None:
    assert unique_names(["gpu", "gpu", "other"]) == ["gpu-0", "gpu-1", "other"]


def test_the_pod_mode_reads_its_plan_and_names_a_wrong_variable() -> None:
    env = {
        AgentEnv.FABRIC_RANK: "1",
        AgentEnv.FABRIC_NODES: '["gpu-a", "gpu-b", "gpu-c"]',
        AgentEnv.FABRIC_MASTER: "10.244.0.7:29500",
        AgentEnv.FABRIC_GROUP: "fleet-1-g0",
        AgentEnv.FABRIC_CONFIG: '{"expectedTransport": "IB"}',
    }
    plan = plan_from_env(env)
    assert (plan.rank, plan.world, plan.node, plan.master) == (1, 3, "gpu-b", ("10.244.0.7", 29500))
    assert plan.group == "fleet-1-g0" and plan.config.expected_transport == "IB"
    with pytest.raises(AgentError, match="GPUVAL_FABRIC_RANK=3 is not a rank of"):
        plan_from_env(env | {AgentEnv.FABRIC_RANK: "3"})
    with pytest.raises(AgentError, match="GPUVAL_FABRIC_CONFIG is invalid: iterations"):
        plan_from_env(env | {AgentEnv.FABRIC_CONFIG: '{"iterations": 0}'})
    with pytest.raises(AgentError, match=r"GPUVAL_FABRIC_MASTER='10\.244\.0\.7' is not ADDR:PORT"):
        plan_from_env(env | {AgentEnv.FABRIC_MASTER: "10.244.0.7"})


def test_the_pod_mode_outside_a_pod_says_what_is_missing(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(AgentEnv.REPORT_NAME, raising=False)
    assert main(["fabric", "--cluster"]) == 2
    assert "GPUVAL_REPORT_NAME is not set" in capsys.readouterr().err


def test_a_node_whose_gpu_is_in_use_when_the_group_meets_stops_the_group_untested(
    tmp_path: Path,
) -> None:
    nodes = _group(tmp_path, 3, {1: [{"kind": "foreign-memory", "gpu": 1}]})
    assert [n.code for n in nodes] == [3, 3, 3]  # not tested
    for node in nodes:
        assert (node.result.verdict, node.result.reason) == (Verdict.NOT_RUN, Reason.GPU_IN_USE)
        assert "node-b: GPU 1 is in use by PID 5000001 (python3 hold.py" in node.result.message
        assert "the group measured nothing" in node.result.message
        assert node.result.sizes == [] and node.result.pairs == []


def test_a_process_sharing_a_gpu_mid_fabric_makes_its_node_untested_and_blames_no_one(
    tmp_path: Path,
) -> None:
    nodes = _group(tmp_path, 4, {2: [{"kind": "foreign-compute", "gpu": 0, "during": "fabric"}]})
    verdicts = _verdicts(nodes)
    # The shared node was slow in both its pairs (the double halves its figures, as sharing a
    # GPU does): the fabric would have named it FabricSlowNode.
    assert verdicts["node-c"] == (Verdict.NOT_RUN, Reason.GPU_IN_USE)
    assert "FabricSlowNode" in nodes[2].result.message
    assert "GPU 0 is in use by PID 5000000" in nodes[2].result.message
    assert [n.code for n in nodes] == [0, 0, 3, 0]
    assert all(verdicts[n] == (Verdict.PASSED, None) for n in ("node-a", "node-b", "node-d"))


def test_a_rank_waiting_for_its_group_says_who_it_waits_for_and_the_time_left(
    tmp_path: Path,
) -> None:
    port = free_port()
    config = tmp_path / "fabric.json"
    config.write_text(json.dumps({"timeouts": {"initSeconds": 7}}))
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuval_agent.cli",
            "fabric",
            "--backend",
            "simulated",
            *("--rank", "0", "--world", "2", "--master", f"127.0.0.1:{port}"),
            *("--nodes", "gpu-a,gpu-b", "--group", "g2", "--config", str(config)),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 3
    waits = [line for line in completed.stderr.splitlines() if "waits for" in line]
    assert waits, completed.stderr
    assert waits[0].startswith(
        f"gpuval-agent: fabric group g2: rank 0 waits for rank 1 (gpu-b); joined: rank 0 "
        f"(gpu-a, 127.0.0.1:{port}); "
    )
    assert waits[0].endswith(" s left of fabric.timeouts.initSeconds")
