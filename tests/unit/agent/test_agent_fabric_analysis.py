"""One node's fabric verdict from the group's gathered reports (gpuval_agent.fabric.analysis)."""

from __future__ import annotations

import pytest

from gpuval_agent.fabric.analysis import (
    Conclusion,
    GroupRecord,
    PairRecord,
    conclude,
    group_record,
    pair_record,
    undisturbed,
)
from gpuval_agent.fabric.steps import PairFigure, StepReport, StepStatus, failed
from gpuval_agent.fabric.transport import TransportReading
from gpuval_api.fabric import (
    ExpectedTransport,
    FabricConfig,
    FabricPair,
    FabricThresholds,
    Transport,
)
from gpuval_api.reasons import Reason
from gpuval_api.result import NcclSize, Verdict

NODES = ["a", "b", "c", "d"]
GIB = 1 << 30
IB = TransportReading()
HEALTHY_GROUP = GroupRecord(
    StepStatus.OK,
    sizes=[NcclSize(bytes=GIB, time_seconds=0.01, algbw_gbps=100.0, busbw_gbps=190.0)],
)
HUNG = "no result within 120 s (fabric.timeouts.phaseSeconds): hung"


def _ring(figures: dict[tuple[str, str], float | None]) -> list[PairRecord]:
    """Rounds 1 and 2 of a 4-node group (a-b, c-d; b-c, d-a), healthy unless given."""
    records = []
    for number, (x, y) in ((1, ("a", "b")), (1, ("c", "d")), (2, ("b", "c")), (2, ("d", "a"))):
        busbw = figures.get((x, y), 46.0)
        status = StepStatus.OK if busbw is not None else StepStatus.TIMEOUT
        pair = FabricPair(round=number, a=x, b=y, bytes=GIB, busbw_gbps=busbw)
        if busbw is None:
            pair.error = f"{x}, {y}: {HUNG}"
        records.append(PairRecord(pair, status))
    return records


def test_every_nodes_group_figures_merge_into_the_slowest_per_size() -> None:
    reports = [
        StepReport(sizes=[(1 << 20, 0.001), (GIB, 0.010)]),
        StepReport(sizes=[(1 << 20, 0.002), (GIB, 0.008)]),
    ]
    record = group_record(reports, ["a", "b"], ranks=16)
    assert record.status is StepStatus.OK
    figures = [(s.bytes, s.time_seconds) for s in record.sizes or []]
    assert figures == [(1 << 20, 0.002), (GIB, 0.01)]
    largest = (record.sizes or [])[-1]
    assert largest.busbw_gbps == pytest.approx(GIB / 0.01 / 1e9 * 2 * 15 / 16, rel=1e-3)


def test_a_group_that_hung_names_the_nodes_by_what_they_said() -> None:
    reports = [failed(StepStatus.TIMEOUT, HUNG)] * 3 + [failed(StepStatus.ERROR, "worker died")]
    record = group_record(reports, NODES, ranks=32)
    assert record.status is StepStatus.ERROR and record.sizes is None
    assert record.summary == f"a, b, c: {HUNG}; d: worker died"


def test_a_pair_takes_the_slower_end_and_counts_both_nodes_gpus() -> None:
    reports = [
        StepReport(pairs=[PairFigure(a=0, b=1, seconds=0.02)]),
        StepReport(pairs=[PairFigure(a=0, b=1, seconds=0.025)]),
    ]
    record = pair_record(1, (0, 1), reports=reports, nodes=["a", "b"], gpus=[8, 8], nbytes=GIB)
    assert record.status is StepStatus.OK
    assert record.pair.busbw_gbps == pytest.approx(GIB / 0.025 / 1e9 * 2 * 15 / 16, rel=1e-3)


def test_a_pair_with_a_silent_node_fails_naming_it() -> None:
    reports = [StepReport(), StepReport.from_payload(None)]
    record = pair_record(2, (1, 0), reports=reports, nodes=["a", "b"], gpus=[8, 8], nbytes=GIB)
    assert record.status is StepStatus.ABSENT and record.pair.busbw_gbps is None
    assert record.pair.a == "b" and record.pair.error == "b: its agent sent no report"


def test_a_node_slow_with_both_partners_fails_and_its_partners_pass() -> None:
    pairs = _ring({("a", "b"): 30.0, ("d", "a"): 31.0})
    pairs.append(
        PairRecord(FabricPair(round=0, a="a", b="c", bytes=GIB, busbw_gbps=30.5), StepStatus.OK)
    )
    slow = conclude("a", FabricConfig(), HEALTHY_GROUP, pairs, IB)
    assert (slow.verdict, slow.reason) == (Verdict.FAILED, Reason.FABRIC_SLOW_NODE)
    assert "b, d" in slow.message
    partner = conclude("b", FabricConfig(), HEALTHY_GROUP, pairs, IB)
    assert partner.verdict is Verdict.PASSED and "the pairs name a" in partner.message


def test_a_node_whose_pairs_hung_is_a_timeout_and_a_hung_group_does_not_fail_the_others() -> None:
    pairs = _ring({("c", "d"): None, ("b", "c"): None})
    group = GroupRecord(StepStatus.TIMEOUT, summary=f"a, b, c, d: {HUNG}")
    hung = conclude("c", FabricConfig(), group, pairs, IB)
    assert (hung.verdict, hung.reason) == (Verdict.FAILED, Reason.NCCL_TIMEOUT)
    assert HUNG in hung.message
    other = conclude("a", FabricConfig(), group, pairs, IB)
    assert other.verdict is Verdict.PASSED and "the group all-reduce failed" in other.message


def test_a_hung_group_that_no_pair_explains_fails_every_node() -> None:
    group = GroupRecord(StepStatus.TIMEOUT, summary=f"a, b, c, d: {HUNG}")
    for node in NODES:
        found = conclude(node, FabricConfig(), group, _ring({}), IB)
        assert (found.verdict, found.reason) == (Verdict.FAILED, Reason.NCCL_TIMEOUT)
        assert "no pair named a node" in found.message


def test_a_transport_fallback_comes_before_what_the_pairs_say() -> None:
    pairs = _ring({("a", "b"): 3.0, ("d", "a"): 3.1})
    socket = TransportReading(transport=Transport.SOCKET)
    config = FabricConfig(expected_transport=ExpectedTransport.IB)
    found = conclude("a", config, HEALTHY_GROUP, pairs, socket)
    assert found.reason is Reason.FABRIC_TRANSPORT_FALLBACK
    assert conclude("a", FabricConfig(), HEALTHY_GROUP, pairs, socket).reason is (
        Reason.FABRIC_SLOW_NODE
    )


def test_a_uniformly_slow_group_fails_by_the_absolute_threshold_only() -> None:
    slow = FabricConfig(thresholds=FabricThresholds(absolute_busbw_gbps=300.0))
    found = conclude("a", slow, HEALTHY_GROUP, _ring({}), IB)
    assert (found.verdict, found.reason) == (Verdict.FAILED, Reason.NCCL_LOW_BUSBW)
    assert "every pair of the group is below the floor 300.0" in found.message
    group_only = FabricConfig(thresholds=FabricThresholds(absolute_busbw_gbps=40.0))
    assert conclude("a", group_only, HEALTHY_GROUP, _ring({}), IB).verdict is Verdict.PASSED
    strict = FabricConfig(thresholds=FabricThresholds(absolute_busbw_gbps=200.0))
    found = conclude("a", strict, HEALTHY_GROUP, [], IB)
    assert found.reason is Reason.NCCL_LOW_BUSBW and "190.0 GB/s is below" in found.message


def test_a_healthy_group_passes_with_its_figures_and_transport() -> None:
    found = conclude("a", FabricConfig(), HEALTHY_GROUP, _ring({}), IB)
    assert found.verdict is Verdict.PASSED and found.reason is None
    assert found.message == (
        "group busbw 190.0 GB/s at 1024 MiB; pairs 46.0-46.0 GB/s (floor 41.4) via Unknown"
    )


def test_another_process_on_a_groups_gpu_sets_aside_what_it_can_explain_and_nothing_else() -> None:
    shared = {"c": "GPU 0 is in use by PID 531 (python3 train.py, 3.0 GiB)"}
    slow = Conclusion(Verdict.FAILED, Reason.NCCL_LOW_BUSBW, "every pair is below the floor")
    assert undisturbed(slow, "a", shared).reason is Reason.GPU_IN_USE
    assert undisturbed(slow, "a", shared).verdict is Verdict.NOT_RUN
    assert "c: GPU 0 is in use by PID 531" in undisturbed(slow, "a", shared).message
    fallback = Conclusion(Verdict.FAILED, Reason.FABRIC_TRANSPORT_FALLBACK, "sockets")
    assert undisturbed(fallback, "c", shared) is fallback
    passed = Conclusion(Verdict.PASSED, None, "fine")
    assert undisturbed(passed, "a", shared) is passed
    assert undisturbed(passed, "c", shared).verdict is Verdict.NOT_RUN
    assert undisturbed(slow, "a", {}) is slow
