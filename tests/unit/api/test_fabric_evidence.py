"""Evidence for fabric failures (issue 19, part 4): the NCCL log excerpt a fabric agent keeps on
every run (bounded, the lines around each warning or error and the set-up lines), and the bundle
the operator builds for a node the fabric fails, with the agent's figures and log and the run's
floors and pairs, bounded as every bundle is."""

from __future__ import annotations

import random
from datetime import UTC, datetime

from gpuval_agent.fabric.nccllog import CLEAN_CHARS, TROUBLED_CHARS, excerpt
from gpuval_api.evidence import MAX_ENCODED_BYTES, decode_evidence, evidence_status
from gpuval_api.fabric import FabricPair
from gpuval_api.fabric.evidence import GroupFigures, fabric_evidence, read_result
from gpuval_api.reasons import Reason

PREFIX = "gpu-a:4242:4242 [0] NCCL INFO"


def _rank_log(channels: int = 400) -> list[str]:
    lines = [
        f"{PREFIX} NCCL version 2.28.9+cuda13.0",
        f"{PREFIX} Bootstrap: Using eth0:10.0.0.1<0>",
        f"{PREFIX} NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB eth0:10.0.0.1<0>",
        f"{PREFIX} Using network IB",
    ]
    lines += [
        f"{PREFIX} Channel {c:02d}/0 : 0[0] -> 1[0] [send] via NET/IB/{c % 2}/GDRDMA"
        for c in range(channels)
    ]
    lines.append(f"{PREFIX} comm 0x55 rank 0 nRanks 16 nNodes 2 localRanks 8 - Init COMPLETE")
    return lines


def test_a_clean_run_keeps_the_set_up_lines_and_one_line_per_transport() -> None:
    kept = excerpt([("rank0", _rank_log())], troubled=False)
    assert kept is not None and len(kept) <= CLEAN_CHARS
    assert "NCCL version 2.28.9" in kept and "Using network IB" in kept
    assert "NET/IB : Using [0]mlx5_0:1/IB" in kept and "Init COMPLETE" in kept
    assert kept.count("via NET/IB/0/GDRDMA") == 1 and kept.count("via NET/IB/1/GDRDMA") == 1
    assert "[... 398 lines left out]" in kept


def test_a_failure_keeps_each_warning_with_the_lines_around_it_within_its_bound() -> None:
    lines = _rank_log()
    lines[200:200] = [
        f"{PREFIX} before the failure",
        "gpu-a:4242:4242 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.2 with error 12",
        f"{PREFIX} after the failure",
    ]
    kept = excerpt(
        [("rank0", lines), ("rank1", ["RuntimeError: NCCL error: remote process"])], True
    )
    assert kept is not None and len(kept) <= TROUBLED_CHARS
    text = kept.splitlines()
    warn = next(i for i, line in enumerate(text) if "NCCL WARN" in line)
    assert "before the failure" in text[warn - 1] and "after the failure" in text[warn + 1]
    assert "--- rank1 ---" in text and "RuntimeError: NCCL error: remote process" in kept


def test_many_warnings_stay_within_the_bound_warnings_first() -> None:
    rng = random.Random(7)
    lines = [
        f"{PREFIX} NCCL WARN error {rng.getrandbits(64):x} " + "x" * 300 if i % 3 == 0 else PREFIX
        for i in range(5000)
    ]
    kept = excerpt([("rank0", lines)], troubled=True)
    assert kept is not None and len(kept) <= TROUBLED_CHARS
    assert all(len(line) <= 240 for line in kept.splitlines())
    assert "NCCL WARN" in kept.splitlines()[1]


def test_no_lines_keep_nothing() -> None:
    assert excerpt([("rank0", [])], troubled=True) is None


def _pairs() -> tuple[FabricPair, ...]:
    return (
        FabricPair(round=1, a="n0", b="n1", bytes=1 << 30, busbw_gbps=40.0),
        FabricPair(round=1, a="n2", b="n3", bytes=1 << 30, busbw_gbps=20.0),
        FabricPair(round=2, a="n1", b="n2", bytes=1 << 30, busbw_gbps=19.5),
        FabricPair(round=2, a="n3", b="n0", bytes=1 << 30, busbw_gbps=40.1),
    )


def test_the_operators_bundle_holds_the_agents_figures_and_log_and_the_runs_floors() -> None:
    result = {
        "agentVersion": "0.1.0",
        "backend": "simulated",
        "group": "g1",
        "rank": 2,
        "transport": "IB/GDRDMA",
        "transportLines": ["... via NET/IB/0/GDRDMA"],
        "pairs": [p.model_dump(mode="json", by_alias=True) for p in _pairs()],
        "ncclLog": "--- rank0 ---\nNCCL INFO Using network IB",
        "verdict": "Passed",
    }
    group = GroupFigures("g1", ("n0", "n1", "n2", "n3"), 30.0, 27.0, False, _pairs())
    bundle = fabric_evidence(
        "n2",
        Reason.FABRIC_SLOW_NODE,
        "slow in every pair it was in",
        read_result({"result": result}),
        [group],
        median_pair_gbps=30.0,
        pair_floor_gbps=27.0,
        now=datetime(2026, 12, 1, tzinfo=UTC),
    )
    document = decode_evidence(evidence_status(bundle))
    assert (document["node"], document["reason"], document["check"]) == (
        "n2",
        "FabricSlowNode",
        "fabric",
    )
    assert document["agentVersion"] == "0.1.0" and bundle.cut == []
    sections = document["sections"]
    assert sections["fabric"]["agent"]["verdict"] == "Passed"  # its agent passed it
    assert sections["fabric"]["agent"]["transport"] == "IB/GDRDMA"
    assert "pairs" not in sections["fabric"]["agent"]
    assert sections["fabric"]["run"]["pairFloorGBps"] == 27.0
    assert sections["fabric"]["run"]["groups"][0]["nodes"] == ["n0", "n1", "n2", "n3"]
    # The node's own pairs first, then the rest of its group's.
    assert [(p["a"], p["b"], p["withThisNode"]) for p in sections["pairs"]] == [
        ("n2", "n3", True),
        ("n1", "n2", True),
        ("n0", "n1", False),
        ("n3", "n0", False),
    ]
    assert sections["ncclLog"].endswith("Using network IB")
    assert sections["logTail"] is None


def test_a_node_without_an_agents_result_still_gets_the_runs_figures_and_a_huge_log_is_cut() -> (
    None
):
    group = GroupFigures("g1", ("n0", "n1"), None, None, False, _pairs())
    bare = fabric_evidence(
        "n1",
        Reason.NCCL_TIMEOUT,
        "hung",
        None,
        [group],
        median_pair_gbps=None,
        pair_floor_gbps=0.0,
        now=datetime(2026, 12, 1, tzinfo=UTC),
    )
    document = decode_evidence(evidence_status(bare))
    assert document["sections"]["fabric"]["agent"] is None
    assert len(document["sections"]["pairs"]) == 4

    noise = "".join(f"{random.Random(i).getrandbits(128):032x}\n" for i in range(20000))
    huge = fabric_evidence(
        "n1",
        Reason.NCCL_TIMEOUT,
        "hung",
        {"ncclLog": noise, "logTail": noise},
        [group],
        median_pair_gbps=None,
        pair_floor_gbps=0.0,
        now=datetime(2026, 12, 1, tzinfo=UTC),
    )
    assert huge.encoded_bytes <= MAX_ENCODED_BYTES
    assert huge.cut and huge.cut[0].startswith("logTail: ")
    kept = decode_evidence(evidence_status(huge))["sections"]
    assert len(kept["pairs"]) == 4  # the pairs outrank the logs
