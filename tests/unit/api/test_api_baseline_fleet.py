"""What the operator and `kubectl gpuval baseline learn` do with baselines over a run's
GpuNodeReports, as pure functions: learn per key from passing nodes, the run's bounded status with
its systemic figures, the history entry a node's next report carries, the agent pod's baseline
env."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gpuval_agent.baseline import from_env, judge
from gpuval_api.baseline import fleet
from gpuval_api.baseline.files import to_yaml
from gpuval_api.baselinemodel import BaselineSettings
from gpuval_api.crd import GpuNodeReportStatus
from gpuval_api.env import AgentEnv
from gpuval_api.fabric import build_fabric_status
from gpuval_api.reasons import Reason
from gpuval_api.report import StatusKey
from tests.support.baselines import measured, slowed
from tests.support.fleets import fabric_results, node_report

SETTINGS = BaselineSettings(min_nodes=3)
AT = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def test_a_run_learns_one_baseline_per_key_from_its_passing_nodes_only() -> None:
    reports = [node_report("fleet", "1-abcd", measured(f"n{i}")) for i in range(5)]
    reports.append(node_report("fleet", "1-abcd", measured("slow", slowed(0.85))))
    reports.append(node_report("fleet", "1-abcd", measured("wrong", [{"kind": "nan", "gpu": 0}])))
    reports += [node_report("fleet", "1-abcd", measured(f"two{i}", gpus=2)) for i in range(3)]

    outcomes = fleet.learn_run(reports, SETTINGS, validation="fleet", run="1-abcd", at=AT)

    four, two = outcomes
    assert four.key.gpu_count == 4 and two.key.gpu_count == 2
    assert [e.node for e in four.excluded] == ["slow"] and four.failed == ("wrong",)
    assert four.spec is not None and four.spec.source.run == "1-abcd"
    assert four.spec.source.learned_at == "2026-12-01T12:00:00Z"
    made = fleet.learned_object(four)
    assert made is not None and made.metadata.name == "nvidia-h200-x4-700w-gen5x16"
    # A key that already has a baseline is not learned again (mode Learn: learn where none is).
    again = fleet.learn_run(
        reports, SETTINGS, validation="fleet", run="2-beef", at=AT, existing=[four.spec]
    )
    assert [o.key.gpu_count for o in again] == [2]


def test_the_run_status_counts_the_judged_and_says_systemic() -> None:
    reports = [node_report("fleet", "1-abcd", measured(f"n{i}")) for i in range(5)]
    (outcome,) = fleet.learn_run(reports, SETTINGS, validation="fleet", run="1-abcd", at=AT)
    assert outcome.spec is not None
    baseline = [("learned", outcome.spec)]
    regressed = [judge(measured(f"n{i}", slowed(0.85)), baseline, 0.1) for i in range(5)]
    later = [node_report("fleet", "2-beef", r) for r in regressed]

    status = fleet.run_status(later, SETTINGS, learned=["learned"])

    assert (status.judged, status.below) == (5, 5)
    assert "burn.bf16" in [s.figure for s in status.systemic]
    burn = next(s for s in status.systemic if s.figure == "burn.bf16")
    assert (burn.below, burn.judged, burn.median_ratio) == (5, 5, 0.85)
    assert status.learned == ["learned"]
    assert all(r.reason is Reason.BELOW_BASELINE for r in regressed)


def test_a_finished_report_gives_its_history_entry_with_its_lowest_fabric_pair() -> None:
    nodes = ["a", "b", "c", "d"]
    outcomes = fabric_results(nodes, {"c": [{"kind": "fabric-slow-node", "factor": 0.6}]})
    report = node_report("fleet", "3-cafe", measured("a"))
    assert report.status is not None
    status = report.status.model_dump(by_alias=True)
    status[StatusKey.FABRIC] = build_fabric_status(outcomes[0])
    report.status = GpuNodeReportStatus.model_validate(status)

    entry = fleet.history_entry(report)

    assert entry is not None and entry.run == "3-cafe"
    assert entry.burn_tflops == 776.0 and entry.h2d_gbps == 53.35
    # a's pairs in the ring a-b-c-d are with b and with d; c's slow pairs are not a's.
    mine = [p.busbw_gbps or 0.0 for p in outcomes[0].pairs if p.round >= 1 and "a" in (p.a, p.b)]
    slowest = min(p.busbw_gbps or 0.0 for p in outcomes[0].pairs)
    assert len(mine) == 2 and entry.fabric_pair_gbps == min(mine) > slowest


def test_the_agent_pod_reads_its_baselines_from_the_env_and_refuses_bad_ones() -> None:
    (outcome,) = fleet.learn_run(
        [node_report("fleet", "1", measured(f"n{i}")) for i in range(3)],
        SETTINGS,
        validation="fleet",
        run="1",
        at=AT,
    )
    made = fleet.learned_object(outcome)
    assert made is not None
    text = to_yaml([made])

    found = from_env({AgentEnv.BASELINE: text, AgentEnv.BASELINE_FRACTION: "0.05"})

    assert found is not None and found[1] == 0.05 and found[0][0][1] == made.spec
    assert from_env({}) is None
    with pytest.raises(ValueError, match="GPUVAL_BASELINE_FRACTION='2'"):
        from_env({AgentEnv.BASELINE: text, AgentEnv.BASELINE_FRACTION: "2"})
    with pytest.raises(ValueError, match="GPUVAL_BASELINE: not YAML"):
        from_env({AgentEnv.BASELINE: "a: : b"})
