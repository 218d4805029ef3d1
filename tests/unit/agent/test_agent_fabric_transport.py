"""Reading NCCL's transport from its own INFO lines, and when it is a fallback."""

from __future__ import annotations

import pytest

from gpuval_agent.fabric.ncclenv import fabric_rank_environment, nccl_variables
from gpuval_agent.fabric.transport import fell_back, read_transport
from gpuval_api.fabric import ExpectedTransport, FabricConfig, NcclVar, Transport

PREFIX = "gpu-a:4242:4250 [0] NCCL INFO "
SOCKET = PREFIX + "Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0"
GDR = PREFIX + "Channel 01/0 : 1[1] -> 8[0] [send] via NET/IB/3/GDRDMA"
IB = PREFIX + "Channel 00/0 : 7[7] -> 8[0] [receive] via NET/IB/0"
PXN_SHARED = PREFIX + "Channel 02/1 : 0[0] -> 9[1] [send] via NET/IBext_v8/1(2)/GDRDMA/Shared"
P2P = PREFIX + "Channel 00/0 : 0[0] -> 1[1] via P2P/IPC"
SHM = PREFIX + "Channel 00/0 : 1[1] -> 2[2] via SHM/direct/direct"
IB_MISSING = "gpu-a:4242:4250 [0] NCCL WARN Error: network IB not found."


@pytest.mark.parametrize(
    ("lines", "transport"),
    [
        ([P2P, SOCKET], Transport.SOCKET),
        ([GDR, P2P], Transport.IB_GDRDMA),
        ([IB], Transport.IB),
        ([PXN_SHARED], Transport.IB_GDRDMA),
        ([GDR, IB], Transport.IB),  # one channel without GPUDirect RDMA is what the node does
        ([GDR, SOCKET, IB], Transport.SOCKET),  # one node on sockets: the worst is reported
        ([P2P, SHM], Transport.P2P),
        ([PREFIX + "comm 0x1 rank 0 nRanks 2 nNodes 2", "unrelated output"], Transport.UNKNOWN),
    ],
)
def test_the_worst_network_seen_is_the_transport(lines: list[str], transport: Transport) -> None:
    assert read_transport(lines).transport is transport


def test_the_kept_lines_say_what_crossed_nodes_first_one_per_kind() -> None:
    reading = read_transport([P2P, P2P, SOCKET, SOCKET, SOCKET] + ["noise"] * 100)
    assert reading.lines == [SOCKET, P2P]


def test_a_network_nccl_net_cannot_start_is_a_fallback_only_when_ib_is_expected() -> None:
    reading = read_transport([PREFIX + "NCCL_NET set by environment to IB", IB_MISSING])
    assert reading.missing_net == "IB" and reading.transport is Transport.UNKNOWN
    assert IB_MISSING in reading.lines
    reason = fell_back(ExpectedTransport.IB, reading)
    assert reason is not None and "network IB" in reason and "NCCL_NET=IB" in reason
    assert fell_back(ExpectedTransport.ANY, reading) is None


# NCCL 2.28.9 on the H200 machine, NCCL_NET=IB and no HCA (the GPU test's log).
IB_PLUGIN_FAILED = [
    "vm:1847:1847 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so",
    "vm:1847:1847 [0] NCCL INFO NET/IB : No device found.",
    "vm:1847:1847 [0] NCCL INFO Failed to initialize NET plugin IB",
    "[2026-11-30 18:34:40] vm:1847:1847 [0] plugin/net.cc:379 NCCL WARN Failed to initialize any "
    "NET plugin",
]


def test_nccl_2_28_names_the_network_that_failed_to_initialize() -> None:
    reading = read_transport(IB_PLUGIN_FAILED)
    assert reading.missing_net == "IB"
    why = fell_back(ExpectedTransport.IB, reading)
    assert why is not None and "network IB" in why
    assert fell_back(ExpectedTransport.ANY, reading) is None


def test_only_torchs_last_error_still_counts_as_no_network() -> None:
    error = "ncclInvalidUsage: invalid usage.\nLast error:\nFailed to initialize any NET plugin"
    reading = read_transport(error.splitlines())
    assert reading.missing_net == "any"
    why = fell_back(ExpectedTransport.IB, reading)
    assert why is not None and why.startswith("NCCL could not start any network")


def test_torchs_exception_text_carries_the_missing_network_too() -> None:
    error = "DistBackendError: NCCL error: invalid usage. Last error:\nError: network IB not found."
    assert read_transport(error.splitlines()).missing_net == "IB"


@pytest.mark.parametrize(
    ("expected", "lines", "fallback"),
    [
        (ExpectedTransport.IB, [SOCKET], True),
        (ExpectedTransport.IB, [IB], False),
        (ExpectedTransport.IB, [GDR], False),
        (ExpectedTransport.SOCKET, [GDR], False),
        (ExpectedTransport.ANY, [SOCKET], False),
        (ExpectedTransport.IB, [P2P], False),
    ],
)
def test_sockets_fail_a_node_only_where_ib_is_expected(
    expected: ExpectedTransport, lines: list[str], fallback: bool
) -> None:
    assert (fell_back(expected, read_transport(lines)) is not None) is fallback


def test_fabric_ranks_run_ring_with_info_and_multicast_off_unless_the_spec_sets_the_algorithm() -> (
    None
):
    env = fabric_rank_environment({"PATH": "/bin", "NCCL_NVLS_ENABLE": "1"}, FabricConfig())
    assert env["NCCL_ALGO"] == "Ring" and env["NCCL_DEBUG"] == "INFO"
    assert env["NCCL_NVLS_ENABLE"] == "0" and env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
    assert env["PATH"] == "/bin"
    spec = FabricConfig(
        nccl_env=[
            NcclVar(name="NCCL_ALGO", value="Tree"),
            NcclVar(name="NCCL_DEBUG", value="WARN"),
            NcclVar(name="NCCL_SOCKET_IFNAME", value="eth1"),
        ]
    )
    env = fabric_rank_environment({"NCCL_ALGO": "CollNet"}, spec)
    assert env["NCCL_ALGO"] == "Tree" and env["NCCL_SOCKET_IFNAME"] == "eth1"
    assert env["NCCL_DEBUG"] == "INFO", "the transport is read from INFO lines: never turned off"
    assert fabric_rank_environment({"NCCL_ALGO": "Tree"}, FabricConfig())["NCCL_ALGO"] == "Tree"


def test_graph_mixing_support_is_off_for_the_timed_replays_unless_the_person_sets_it() -> None:
    assert fabric_rank_environment({}, FabricConfig())["NCCL_GRAPH_MIXING_SUPPORT"] == "0"
    kept = fabric_rank_environment({"NCCL_GRAPH_MIXING_SUPPORT": "1"}, FabricConfig())
    assert kept["NCCL_GRAPH_MIXING_SUPPORT"] == "1"


def test_the_recorded_variables_are_every_nccl_one_and_nothing_else() -> None:
    recorded = nccl_variables({"NCCL_B": "2", "PATH": "/bin", "NCCL_A": "1", "XNCCL_C": "3"})
    assert list(recorded.items()) == [("NCCL_A", "1"), ("NCCL_B", "2")]
