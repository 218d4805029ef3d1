"""The baseline rules: a figure below (1 - fraction) x its baseline is BelowBaseline, named with
figure, value, baseline and fraction; a run whose nodes are mostly below on one figure is
systemic; what does not compare (another GPU count, other settings) is said, not judged."""

from __future__ import annotations

from gpuval_agent.baseline import judge
from gpuval_api.baseline import rules, samples
from gpuval_api.baseline.learn import learn
from gpuval_api.baseline.samples import Sample
from gpuval_api.baselinecomparison import Match
from gpuval_api.baselinemodel import BaselineKey, FigureBaseline, GpuBaselineSpec
from gpuval_api.checks import ChecksConfig
from gpuval_api.figures import FABRIC_PAIR, Unit
from gpuval_api.reasons import Reason
from gpuval_api.result import AgentResult, Verdict
from tests.support.baselines import GPUS, measured, node_figures, slowed

KEY = BaselineKey(
    gpu_product="NVIDIA H200", gpu_count=GPUS, power_limit_watts=700, pcie_link="gen5x16"
)


def learned_baseline() -> GpuBaselineSpec:
    learned = learn(
        [node_figures(measured(f"healthy-{i}")) for i in range(8)], KEY, fraction=0.1, min_nodes=5
    )
    assert learned.spec is not None
    return learned.spec


def below_reasons(result: AgentResult) -> list[tuple[str, str]]:
    return [
        (check.name, finding.message)
        for check in result.checks
        for finding in check.findings
        if finding.reason is Reason.BELOW_BASELINE
    ]


def test_a_uniform_fifteen_percent_slowdown_fails_every_node_below_baseline_and_is_systemic() -> (
    None
):
    baseline = [("fleet", learned_baseline())]
    # A driver regression: every GPU of every node at 0.85, still above every absolute threshold.
    slowed_fleet = [measured(f"gpu-node-{i}", slowed(0.85)) for i in range(8)]
    assert all(r.verdict is Verdict.PASSED for r in slowed_fleet)

    judged = [judge(r, baseline, fraction=0.1) for r in slowed_fleet]

    assert all(r.verdict is Verdict.FAILED for r in judged)
    assert {r.reason for r in judged} == {Reason.BELOW_BASELINE}
    named = below_reasons(judged[0])
    assert (
        "burn",
        "GPU 0: burn.bf16 659.6 TFLOP/s is 0.85 of the H200 baseline 776.0 "
        "(below 0.90 of it: fraction 0.1)",
    ) in named
    found = rules.systemic_below(
        ((r.node or "", r.baseline) for r in judged), systemic_fraction=0.5
    )
    assert "burn.bf16" in [s.figure for s in found]
    burn = next(s for s in found if s.figure == "burn.bf16")
    assert burn.below == tuple(f"gpu-node-{i}" for i in range(8)) and burn.judged == 8
    assert round(burn.median_ratio, 2) == 0.85
    assert "8 of 8 judged nodes are below their baseline on burn.bf16" in burn.message


def test_one_slow_node_is_below_its_baseline_but_not_systemic() -> None:
    baseline = [("fleet", learned_baseline())]
    fleet = [measured(f"n{i}", slowed(0.85, [2]) if i == 5 else ()) for i in range(8)]

    judged = [judge(r, baseline, fraction=0.1) for r in fleet]

    assert [r.node for r in judged if r.reason is Reason.BELOW_BASELINE] == ["n5"]
    slow = judged[5]
    burn = slow.check("burn")
    assert burn is not None and burn.verdict is Verdict.FAILED
    assert [g.index for g in burn.gpus if g.verdict is Verdict.FAILED] == [2]
    assert rules.systemic_below(((r.node or "", r.baseline) for r in judged), 0.5) == []


def test_a_node_of_another_gpu_count_is_judged_on_per_gpu_figures_only() -> None:
    baseline = [("fleet", learned_baseline())]
    two = measured("two-gpus", gpus=2)

    comparison, below = rules.compare(
        samples.result_samples(two),
        samples.node_key(two.environment)[0],
        baseline,
        0.1,
    )

    assert comparison.match is Match.GPU and below == []
    by_figure = {f.figure: f for f in comparison.figures}
    assert by_figure["burn.bf16"].ratio == 1.0 and by_figure["burn.bf16"].judged
    assert by_figure["p2p"].ratio is None
    assert "per-GPU figures only" in by_figure["p2p"].note
    assert by_figure["nccl.4GiB"].centre is None


def test_figures_measured_with_other_settings_are_not_compared() -> None:
    baseline = [("fleet", learned_baseline())]
    config = ChecksConfig.model_validate({"burn": {"matrixSize": 8192}})
    other = measured("other", config=config)

    comparison, _ = rules.compare(samples.result_samples(other), KEY, baseline, 0.1)

    burn = next(f for f in comparison.figures if f.figure == "burn.bf16")
    assert burn.ratio is None
    assert burn.note == "measured with matrixSize=8192; the baseline with matrixSize=16384"


def test_nccl_below_one_gib_is_kept_for_the_picture_but_not_judged() -> None:
    baseline = learned_baseline()
    slow = measured("slow-nccl", slowed(0.5))

    comparison, below = rules.compare(samples.result_samples(slow), KEY, [("b", baseline)], 0.1)

    by_figure = {f.figure: f for f in comparison.figures}
    assert not by_figure["nccl.512MiB"].judged and by_figure["nccl.512MiB"].below == 0
    assert by_figure["nccl.1GiB"].judged and by_figure["nccl.1GiB"].below == 1
    assert "nccl.512MiB" not in {b.figure for b in below}


def test_no_baseline_for_a_node_says_which_there_are() -> None:
    other = KEY.model_copy(update={"gpu_product": "NVIDIA B200", "power_limit_watts": 1000})
    result = measured("n")

    comparison, below = rules.compare(
        samples.result_samples(result), other, [("h200", learned_baseline())], 0.1
    )

    assert comparison.name is None and below == []
    assert comparison.note.startswith("no baseline for NVIDIA B200 x4, 1000 W, PCIe gen5x16")
    assert "NVIDIA H200 x4, 700 W, PCIe gen5x16" in comparison.note


def test_the_first_matching_candidate_wins_and_an_exact_key_beats_a_gpu_match() -> None:
    spec = learned_baseline()
    two = spec.model_copy(update={"key": KEY.model_copy(update={"gpu_count": 2})})

    assert rules.choose(KEY, [("two", two), ("four", spec)]) == (("four", spec), Match.EXACT)
    assert rules.choose(KEY, [("two", two)]) == (("two", two), Match.GPU)
    assert rules.choose(KEY.model_copy(update={"pcie_link": "gen4x16"}), [("four", spec)]) is None


def test_a_stopped_run_gets_its_comparison_but_no_baseline_finding() -> None:
    stopped = measured("n", slowed(0.5)).model_copy(update={"reason": Reason.AGENT_STOPPED})

    judged = judge(stopped, [("b", learned_baseline())], 0.1)

    assert judged.baseline is not None and judged.baseline.below > 0
    assert below_reasons(judged) == [] and judged.reason is Reason.AGENT_STOPPED


def test_a_node_is_below_the_fabric_baseline_only_when_its_best_pair_is() -> None:
    spec = learned_baseline()
    measured_with = "pairBytes=1073741824,transport=IB/GDRDMA"
    fabric = FigureBaseline(
        figure=FABRIC_PAIR.baseline,
        unit=Unit.GBPS,
        centre=380.0,
        spread=2.0,
        nodes=8,
        samples=8,
        measured_with=measured_with,
    )
    spec.figures.append(fabric)

    def pairs(*values: float) -> list[Sample]:
        return [
            Sample(FABRIC_PAIR.baseline, v, measured_with, peer_node=f"p{i}")
            for i, v in enumerate(values)
        ]

    assert rules.fabric_below(pairs(380.0, 200.0), spec, 0.1) is None  # a slow link, not the node
    below = rules.fabric_below(pairs(300.0, 250.0), spec, 0.1)
    assert below is not None and below.value == 300.0
    assert below.message == (
        "with p0: fabric.pair 300.0 GB/s is 0.79 of the H200 baseline 380.0 "
        "(below 0.90 of it: fraction 0.1)"
    )
    other = [
        Sample(FABRIC_PAIR.baseline, 9.0, "pairBytes=1073741824,transport=Socket", peer_node="p")
    ]
    assert rules.fabric_below(other, spec, 0.1) is None
