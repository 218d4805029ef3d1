"""A fabric agent's verdict in its termination message: compact, bounded, read back exactly."""

from __future__ import annotations

import json

from gpuval_api.fabric import (
    FabricResult,
    Transport,
    build_fabric_status,
    build_fabric_termination_message,
    parse_fabric_termination_message,
)
from gpuval_api.reasons import Reason
from gpuval_api.report import build_termination_message
from gpuval_api.result import Verdict
from gpuval_api.termination import TERMINATION_MESSAGE_LIMIT


def _status(message: str = "slow in every pair", log_tail: str = "") -> dict[str, object]:
    result = FabricResult(
        agent_version="0.1.0",
        backend="simulated",
        group="g-1",
        node="n3",
        rank=3,
        nodes=["n0", "n1", "n2", "n3"],
        gpus_per_node=8,
        transport=Transport.IB_GDRDMA,
        busbw_gbps=361.2,
        verdict=Verdict.FAILED,
        reason=Reason.FABRIC_SLOW_NODE,
        message=message,
        log_tail=log_tail,
    )
    return build_fabric_status(result)


def test_the_fabric_verdict_comes_back_without_the_result_document() -> None:
    status = _status(log_tail="NCCL INFO " * 2000)
    text = build_fabric_termination_message(status)
    assert len(text.encode()) <= TERMINATION_MESSAGE_LIMIT
    assert parse_fabric_termination_message(text) == {
        "group": "g-1",
        "rank": 3,
        "world": 4,
        "verdict": "Failed",
        "reason": "FabricSlowNode",
        "message": "slow in every pair",
        "busbwGBps": 361.2,
        "transport": "IB/GDRDMA",
    }


def test_a_long_message_is_cut_to_fit() -> None:
    text = build_fabric_termination_message(_status(message="é" * 1024))
    assert len(text.encode()) <= TERMINATION_MESSAGE_LIMIT
    parsed = parse_fabric_termination_message(text)
    assert parsed is not None and str(parsed["message"]).endswith("…")


def test_what_is_not_a_fabric_verdict_reads_as_none() -> None:
    node_report = build_termination_message(
        {"phase": "Completed", "verdict": "Passed", "message": "ok"}
    )
    assert parse_fabric_termination_message(node_report) is None
    assert parse_fabric_termination_message("Error: segfault") is None
    assert parse_fabric_termination_message(None) is None
    no_verdict = json.dumps({"fabric": {"group": "g", "rank": 0, "world": 2}})
    assert parse_fabric_termination_message(no_verdict) is None
    bad_reason = json.dumps(
        {"fabric": {"group": "g", "rank": 0, "world": 2, "verdict": "Failed", "reason": "Nope"}}
    )
    assert parse_fabric_termination_message(bad_reason) is None
