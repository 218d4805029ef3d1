"""The operator's part of baselines and history, as pure code: what it keeps of a report's
comparison and of a node's past runs (compact, never models), the baselines an agent pod is
given, DriftFromHistory, a node's fabric pairs against its baseline, and the run's status.baseline
with its systemic finding and WithinBaseline condition. Reports are what the real agent code
writes with its simulated backend."""

from __future__ import annotations

import json
import sys
import tracemalloc
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from gpuval_agent.baseline import judge as agent_judge
from gpuval_api.baseline import files, fleet
from gpuval_api.baseline.history import KEY_FIGURES
from gpuval_api.baselinemodel import (
    BaselineMode,
    BaselineSettings,
    DriftAction,
    GpuBaselineSpec,
    HistoryEntry,
    HistorySettings,
    SourceKind,
)
from gpuval_api.crd import GpuBaseline
from gpuval_api.env import AgentEnv
from gpuval_api.fabric import FabricPair
from gpuval_api.reasons import Reason
from gpuval_api.result import AgentResult, Verdict
from gpuval_operator import names
from gpuval_operator.baseline import judge
from gpuval_operator.baseline.facts import History
from gpuval_operator.control.baseline import driver as baselinedriver
from gpuval_operator.planning import Candidate, build_report
from gpuval_operator.readmodel.validation import ValidationState
from gpuval_operator.run import rollup
from gpuval_operator.run.facts import ReportFacts
from gpuval_operator.run.state import RunState
from tests.support.baselines import measured, node_figures, slowed
from tests.support.fleets import learned_from, node_report

SETTINGS = BaselineSettings(min_nodes=3)


def baseline() -> tuple[str, GpuBaselineSpec]:
    return learned_from([measured(f"n{i}") for i in range(5)])


def report_facts(
    result: AgentResult, run: str = "2-beef", history: Sequence[dict[str, Any]] = ()
) -> ReportFacts:
    body = node_report("fleet", run, result).model_dump(mode="json", by_alias=True)
    if history:
        body["spec"]["history"] = list(history)
    return ReportFacts.parse(body)


def test_a_reports_comparison_is_kept_as_its_judged_ratios_and_which_fell_below() -> None:
    chosen = baseline()
    slow = agent_judge(measured("slow", slowed(0.85, [1])), [chosen], 0.1)

    comparison = report_facts(slow).comparison

    assert comparison is not None
    assert comparison.name == chosen[0] and comparison.exact
    # A slow GPU is slow at everything it does: burn, copies, its pairs, the node's NCCL.
    assert [(f, r, fell) for f, r, fell in comparison.entries()][:5] == [
        ("burn.bf16", 0.85, True),
        ("h2d", 0.85, True),
        ("d2h", 0.85, True),
        ("deviceCopy", 0.85, True),
        ("p2p", 0.85, True),
    ]
    assert comparison.worst() == ("burn.bf16", 0.85)
    # Small-message NCCL is kept for the picture, not judged: it is not among the ratios.
    assert all(not f.startswith("nccl.") or f.endswith("GiB") for f in comparison.figures)
    assert report_facts(measured("none")).comparison is None


def test_a_nodes_history_carries_its_last_runs_and_reads_back_as_history_entries() -> None:
    chain: list[dict[str, Any]] = []
    for n in range(7):
        facts = report_facts(
            measured("decliner", slowed(0.97**n) if n else ()), f"{n + 1}-beef", chain
        )
        history = facts.history()
        assert history.current and history.runs[-1] == f"{n + 1}-beef"
        chain = history.carried(5)

    assert [e["run"] for e in chain] == [f"{n}-beef" for n in range(3, 8)]
    entries = [HistoryEntry.model_validate(e) for e in chain]
    assert entries[-1].burn_tflops is not None and entries[0].burn_tflops is not None
    assert round(entries[-1].burn_tflops / entries[0].burn_tflops, 3) == round(0.97**4, 3)
    report = build_report("fleet", "uid", "8-beef", Candidate("decliner", 4), chain)
    assert report["spec"]["history"] == chain
    assert "history" not in build_report("fleet", "uid", "8-beef", Candidate("n", 4))["spec"]


def test_a_nodes_history_is_kept_in_arrays_of_a_few_hundred_bytes() -> None:
    past = report_facts(measured("n0")).history().carried(1)
    carried = [dict(past[0], run=f"{n}-beef") for n in range(1, 6)]
    facts = report_facts(measured("n0"), "6-beef", carried)
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    kept = {f"node-{i:05d}": facts.history() for i in range(2_000)}
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    size = sum(s.size_diff for s in after.compare_to(before, "filename"))

    assert len(kept["node-00000"].runs) == 6
    # 6 runs of 7 figures per node: under 1 KiB each (the models would be ~6 KiB).
    assert size / 2_000 < 1024, size / 2_000
    print(f"history: {size / 2_000:.0f} bytes per node for 6 runs", file=sys.stderr)


def test_drift_names_a_node_losing_three_percent_a_run_from_its_fourth_run() -> None:
    settings = HistorySettings(runs=5, drift_fraction=0.05)
    chain: list[dict[str, Any]] = []
    named = []
    for n in range(6):
        facts = report_facts(
            measured("decliner", slowed(0.97**n) if n else ()), f"{n + 1}-a", chain
        )
        found = judge.drift(facts.history(), settings)
        named.append(bool(found))
        if n == 3:
            note = judge.drift_note(found, failed=False)
            assert note.figure in KEY_FIGURES and round(note.ratio, 2) == 0.94
            assert "of this node's median" in note.message
        chain = facts.history().carried(settings.runs)

    assert named == [False, False, False, True, True, True]
    assert judge.drift(facts.history(), HistorySettings(runs=0)) == []


def _listed() -> list[tuple[str, GpuBaselineSpec]]:
    shipped = next(b for b in files.shipped() if b.spec.key.gpu_product == "NVIDIA H200")
    learned = baseline()
    other = learned[1].model_copy(
        update={"key": learned[1].key.model_copy(update={"gpu_product": "NVIDIA A100-SXM4-80GB"})}
    )
    return [("z-a100", other), learned, (shipped.metadata.name, shipped.spec)]


def test_names_choose_and_order_the_baselines_and_a_missing_one_is_said() -> None:
    listed = _listed()

    every = judge.start(BaselineSettings(), listed)
    named = judge.start(BaselineSettings(names=["z-a100", "gone", listed[1][0]]), listed)

    # Learned ones first (by name), then shipped: measured on this fleet before elsewhere.
    (shipped,) = [n for n, spec in listed if spec.source.kind == "Shipped"]
    learned = sorted(n for n, spec in listed if spec.source.kind == "Learned")
    assert [n for n, _ in every.candidates] == [*learned, shipped]
    assert [n for n, _ in named.candidates] == ["z-a100", listed[1][0]]
    assert named.missing == ("gone",) and "gone" in named.notes[0]
    assert len(named.existing) == 3


def test_an_agent_pod_gets_the_baselines_of_its_gpu_model_and_the_fraction() -> None:
    runs = judge.start(BaselineSettings(fraction=0.08), _listed())

    h200 = judge.agent_env(runs, "NVIDIA-H200")
    unlabelled = judge.agent_env(runs, "")
    values = {e["name"]: e["value"] for e in h200}

    assert values[AgentEnv.BASELINE_FRACTION] == "0.08"
    given = files.from_yaml(values[AgentEnv.BASELINE], "env")
    assert {b.spec.key.gpu_product for b in given} == {"NVIDIA H200"}
    # What learning left out is no business of the agent's: the variable stays small.
    assert all(b.spec.source.excluded == [] for b in given)
    everything = files.from_yaml(
        {e["name"]: e["value"] for e in unlabelled}[AgentEnv.BASELINE], "e"
    )
    assert len(everything) == 3
    assert judge.agent_env(runs, "NVIDIA-H200") is h200  # made once per GPU model
    # No baseline of a T4: the agent still learns its label (to name GPUs of another model).
    assert judge.agent_env(runs, "Tesla-T4") == [
        {"name": AgentEnv.BASELINE_FRACTION, "value": "0.08"},
        {"name": AgentEnv.NODE_GPU_PRODUCT, "value": "Tesla-T4"},
    ]
    assert AgentEnv.NODE_GPU_PRODUCT not in {e["name"] for e in unlabelled}
    off = judge.start(BaselineSettings(mode=BaselineMode.OFF), _listed())
    assert judge.agent_env(off, "") == []
    assert judge.product_matches("NVIDIA-H200-SHARED", given[0].spec)
    assert not judge.product_matches("NVIDIA-H200NVL", given[0].spec)
    assert not judge.product_matches("NVIDIA-H200-NVL", given[0].spec)  # a PCIe card
    assert judge.product_matches("NVIDIA-H200-MIG-1g.18gb-SHARED", given[0].spec)


def test_a_mig_profiles_baseline_is_given_to_a_node_its_parent_gpus_label_names() -> None:
    shipped = next(b for b in files.shipped() if b.spec.key.gpu_product == "NVIDIA H200")
    key = shipped.spec.key.model_copy(update={"gpu_product": "NVIDIA H200 MIG 1g.18gb"})
    instances = shipped.spec.model_copy(update={"key": key})
    runs = judge.start(BaselineSettings(), [("h200-mig-1g", instances)])

    # Before: the mixed strategy's label (the parent alone) never named the profile's baseline.
    assert judge.product_matches("NVIDIA-H200", instances)
    assert judge.product_matches("NVIDIA-H200-MIG-1g.18gb", instances)  # the single strategy
    assert not judge.product_matches("NVIDIA-H200-MIG-3g.71gb", instances)  # another profile
    assert not judge.product_matches("NVIDIA-H100-80GB-HBM3", instances)
    values = {e["name"]: e["value"] for e in judge.agent_env(runs, "NVIDIA-H200")}
    (given,) = files.from_yaml(values[AgentEnv.BASELINE], "env")
    assert given.metadata.name == "h200-mig-1g"


def test_where_a_learned_and_a_shipped_baseline_share_a_key_the_learned_judges_and_says_so() -> (
    None
):
    shipped = next(b for b in files.shipped() if b.spec.key.gpu_product == "NVIDIA H200")
    mine = shipped.spec.model_copy(
        update={"source": shipped.spec.source.model_copy(update={"kind": SourceKind.LEARNED})}
    )
    # The shipped one first by name: by name alone it would judge.
    listed = [("a-shipped", shipped.spec), ("b-learned", mine)]

    runs = judge.start(BaselineSettings(), listed)
    named = judge.start(BaselineSettings(names=["a-shipped", "b-learned"]), listed)

    assert [n for n, _ in runs.candidates] == ["b-learned", "a-shipped"]
    (note,) = runs.notes
    assert note.startswith(
        "GpuBaselines b-learned and a-shipped share the key NVIDIA H200 x2, 700 W, PCIe gen5x16: "
        "b-learned judges (Learned before Shipped: measured on this fleet"
    )
    assert "spec.baseline.names chooses another" in note
    assert named.notes == [
        "GpuBaselines a-shipped and b-learned share the key NVIDIA H200 x2, 700 W, PCIe "
        "gen5x16: a-shipped judges (named first in spec.baseline.names); spec.baseline.names "
        "chooses another"
    ]
    # The agent takes the first that matches: the one the note says.
    (given, _) = [e["value"] for e in judge.agent_env(runs, "")]
    assert files.from_yaml(given, "env")[0].metadata.name == "b-learned"
    status = judge.run_status(runs, [])
    assert "b-learned judges" in status.note


def test_an_unlabelled_node_gets_its_own_stacks_baseline_first_within_the_budget() -> None:
    name, spec = baseline()  # learned from 4-GPU H200 nodes
    others = [
        (
            f"a-{i:02d}",
            spec.model_copy(update={"key": spec.key.model_copy(update={"gpu_count": 8})}),
        )
        for i in range(60)
    ]
    runs = judge.start(BaselineSettings(), [*others, (f"z-{name}", spec)])

    def given(**known: Any) -> list[str]:
        env = {e["name"]: e["value"] for e in judge.agent_env(runs, "", **known)}
        return [b.metadata.name for b in files.from_yaml(env[AgentEnv.BASELINE], "env")]

    # Before: by name, the budget ran out long before the node's own (z-...) baseline.
    assert f"z-{name}" not in given()
    assert given(model="NVIDIA H200", gpus=4)[0] == f"z-{name}"
    assert given(model="", gpus=4)[0] == "a-00"  # nothing known of the node's GPUs


def test_the_agent_env_stays_under_its_size_limit_keeping_the_preferred_first() -> None:
    name, spec = baseline()
    many = [(f"{name}-{i:02d}", spec) for i in range(60)]
    runs = judge.start(BaselineSettings(), many)

    (text,) = [e["value"] for e in judge.agent_env(runs, "") if e["name"] == AgentEnv.BASELINE]

    assert len(text.encode()) <= judge.MAX_ENV_BYTES
    kept = [b.metadata.name for b in files.from_yaml(text, "env")]
    assert kept[0] == f"{name}-00" and 1 < len(kept) < 60


def _pairs(slow: str, nodes: Sequence[str], busbw: float, size: int) -> list[FabricPair]:
    rounds = [
        (nodes[0], nodes[1]),
        (nodes[2], nodes[3]),
        (nodes[0], nodes[3]),
        (nodes[1], nodes[2]),
    ]
    return [
        FabricPair(
            round=1 if i < 2 else 2,
            a=a,
            b=b,
            bytes=size,
            busbw_gbps=busbw * (0.6 if slow in (a, b) else 1.0),
        )
        for i, (a, b) in enumerate(rounds)
    ]


def test_a_node_slow_with_every_partner_is_below_its_baselines_fabric_pair() -> None:
    name, spec = baseline()
    pair = spec.figures[0].model_copy(
        update={
            "figure": "fabric.pair",
            "unit": "GB/s",
            "centre": 300.0,
            "spread": 3.0,
            "measured_with": f"pairBytes={1 << 30},transport=IB/GDRDMA",
        }
    )
    spec = spec.model_copy(update={"figures": [*spec.figures, pair]})
    runs = judge.start(BaselineSettings(), [(name, spec)])
    nodes = ["a", "b", "c", "d"]
    pairs = _pairs("c", nodes, 300.0, 1 << 30)
    mine = report_facts(agent_judge(measured("c"), [(name, spec)], 0.1)).comparison

    slow = judge.fabric_below("c", mine, runs, pairs, "IB/GDRDMA")
    partner = judge.fabric_below("b", mine, runs, pairs, "IB/GDRDMA")
    other_size = judge.fabric_below(
        "c", mine, runs, _pairs("c", nodes, 300.0, 1 << 28), "IB/GDRDMA"
    )
    sockets = judge.fabric_below("c", mine, runs, pairs, "Socket")

    assert slow is not None and slow.figure == "fabric.pair"
    assert "0.60 of the H200 baseline" in slow.message
    # b is slow only with c: the link or c, not b; other sizes and transports do not compare.
    assert partner is None and other_size is None and sockets is None


def _judged_run(factor: float, slow_nodes: int, total: int = 6) -> tuple[RunState, ValidationState]:
    chosen = baseline()
    state = ValidationState("fleet")
    run = RunState("fleet", "2-beef", 2, 1, "created", 1000.0)
    run.baseline = judge.start(SETTINGS, [chosen])
    for i in range(total):
        node = f"n{i}"
        faults = slowed(factor) if i < slow_nodes else ()
        facts = report_facts(agent_judge(measured(node, faults), [chosen], 0.1))
        state.remember(facts)
        run.add(node, 4, names.report_name("fleet", "2-beef", node), f"pod-{node}")
        run.apply_report(facts)
    return run, state


def _comparisons(run: RunState, state: ValidationState) -> list[tuple[str, Any]]:
    return [(n, state.latest[n].comparison) for n in run.nodes]


def test_a_fleet_slowed_fifteen_percent_is_systemic_and_within_baseline_turns_false() -> None:
    run, state = _judged_run(0.85, slow_nodes=6)
    assert run.baseline is not None
    assert {r.reason for r in run.nodes.values()} == {Reason.BELOW_BASELINE}

    run.baseline.status = judge.run_status(run.baseline, _comparisons(run, state))
    run.completed_at = 2000.0
    status = rollup.build_run_status(run, previous_conditions=[], now=2000.0)

    assert (status["baseline"]["judged"], status["baseline"]["below"]) == (6, 6)
    burn = next(s for s in status["baseline"]["systemic"] if s["figure"] == "burn.bf16")
    assert (burn["below"], burn["judged"], burn["medianRatio"]) == (6, 6, 0.85)
    within = {c["type"]: c for c in status["conditions"]}["WithinBaseline"]
    assert (within["status"], within["reason"]) == ("False", "SystemicBelowBaseline")
    assert "burn.bf16" in within["message"] and "not the nodes" in within["message"]
    # Every node keeps its own BelowBaseline verdict: the node-action hold rules read those.
    assert [f["reason"] for f in status["failingNodes"]] == ["BelowBaseline"] * 6
    json.dumps(status)


def test_one_slow_node_is_below_but_the_fleet_is_within_its_baseline() -> None:
    run, state = _judged_run(0.85, slow_nodes=1)
    assert run.baseline is not None
    run.baseline.status = judge.run_status(run.baseline, _comparisons(run, state))
    run.completed_at = 2000.0

    status = rollup.build_run_status(run, previous_conditions=[], now=2000.0)

    assert status["baseline"]["below"] == 1 and status["baseline"]["systemic"] == []
    within = {c["type"]: c for c in status["conditions"]}["WithinBaseline"]
    assert (within["status"], within["reason"]) == ("True", "WithinBaseline")


def test_within_baseline_is_unknown_while_running_and_without_a_judged_node() -> None:
    run = RunState("fleet", "1-beef", 1, 1, "created", 1000.0)
    run.add("n0", 8, "report-n0", "pod-n0")
    run.baseline = judge.start(SETTINGS, [])
    running = rollup.build_run_status(run, previous_conditions=[], now=1.0)
    run.baseline.status = judge.run_status(run.baseline, [("n0", None)])
    run.completed_at = 2000.0
    done = rollup.build_run_status(run, previous_conditions=[], now=2.0)

    def within(status: dict[str, Any]) -> tuple[str, str]:
        found = {c["type"]: c for c in status["conditions"]}["WithinBaseline"]
        return found["status"], found["reason"]

    assert within(running) == ("Unknown", "NotCompared") and running["baseline"] is None
    assert within(done) == ("Unknown", "NoBaseline")
    plain = RunState("fleet", "1-beef", 1, 1, "created", 1000.0)
    conditions = rollup.build_run_status(plain, previous_conditions=[], now=1.0)["conditions"]
    assert "WithinBaseline" not in {c["type"] for c in conditions}


def test_drifting_nodes_are_listed_those_that_fell_most_first_and_bounded() -> None:
    runs = judge.start(
        BaselineSettings(history=HistorySettings(action=DriftAction.FAIL)), [baseline()]
    )
    settings = HistorySettings()
    for i in range(60):
        chain = History.of_report(
            [{"run": f"{r}-a", "burnTflops": 700.0} for r in range(1, 4)],
            run="4-a",
            completed_at=None,
            summary={"burnTflops": 600.0 - i},
        )
        runs.drifting[f"n{i:02d}"] = judge.drift_note(judge.drift(chain, settings), failed=True)

    status = judge.run_status(runs, [])

    assert status.drifting == 60 and status.drifting_nodes_omitted == 10
    assert [d.node for d in status.drifting_nodes[:2]] == ["n59", "n58"]
    assert status.drifting_nodes[0].failed and status.drifting_nodes[0].figure == "burnTflops"


def test_the_history_a_node_carries_follows_its_latest_report() -> None:
    state = ValidationState("fleet", keeps_history=True)
    first = report_facts(measured("n0"), "1-a")
    state.remember_history(first)
    second = report_facts(measured("n0", slowed(0.9)), "2-a", first.history().carried(5))
    running = ReportFacts.parse(
        {"spec": {"node": "n0", "run": "3-a", "history": second.history().carried(5)}}
    )

    state.remember_history(second)
    assert state.history["n0"].current and state.history["n0"].worst is not None
    worst = state.history["n0"].worst
    state.remember_history(running)  # run 3's report is made: its verdict is not in yet
    state.remember_history(first)  # an older run's report changes nothing

    chain = state.history["n0"]
    assert chain.run == "3-a" and not chain.current and chain.runs == ("1-a", "2-a")
    assert chain.worst == worst  # the metrics keep the last ratio until run 3's verdict
    assert worst is not None and worst[0] == "burnTflops" and round(worst[1], 2) == 0.9
    assert ValidationState("off").history == {}


def test_the_metrics_export_each_nodes_worst_ratio_to_its_baseline_and_its_history() -> None:
    from prometheus_client import generate_latest  # noqa: PLC0415

    from gpuval_operator.readmodel.metrics import make_registry  # noqa: PLC0415
    from gpuval_operator.readmodel.registry import Registry  # noqa: PLC0415

    chosen = baseline()
    state = ValidationState("fleet", keeps_history=True)
    first = report_facts(agent_judge(measured("n0"), [chosen], 0.1), "1-a")
    second = report_facts(
        agent_judge(measured("n0", slowed(0.9, [2])), [chosen], 0.1),
        "2-a",
        first.history().carried(5),
    )
    for facts in (first, second):
        state.remember(facts)
        state.remember_history(facts)
    registry = Registry()
    registry["fleet"] = state

    text = generate_latest(make_registry(registry)).decode()

    assert 'gpuval_node_baseline_ratio{figure="burn.bf16",node="n0",validation="fleet"} 0.9' in text
    assert 'gpuval_node_history_ratio{figure="burnTflops",node="n0",validation="fleet"} 0.9' in text


def test_a_baseline_for_an_agent_is_a_valid_gpubaseline() -> None:
    name, spec = baseline()
    runs = judge.start(BaselineSettings(), [(name, spec)])
    (text,) = [e["value"] for e in judge.agent_env(runs, "") if e["name"] == AgentEnv.BASELINE]
    (given,) = files.from_yaml(text, "env")
    assert isinstance(given, GpuBaseline) and given.spec.figures == spec.figures
    assert agent_judge(measured("x"), [(given.metadata.name, given.spec)], 0.1).verdict is (
        Verdict.PASSED
    )


def test_learning_keeps_each_nodes_figures_in_a_few_kib_and_one_key_per_gpu_stack() -> None:
    result = measured("n0", gpus=8)
    body = node_report("fleet", "1-beef", result).model_dump(mode="json", by_alias=True)
    pages = [
        [dict(body, spec=dict(body["spec"], node=f"node-{p}-{i}")) for i in range(100)]
        for p in range(5)
    ]
    keys: dict[str, Any] = {}
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    nodes = [n for page in pages for n in baselinedriver._page_figures(page, keys)]
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    size = sum(s.size_diff for s in after.compare_to(before, "filename"))

    assert len(nodes) == 500 and len(keys) == 1
    assert all(n.key is nodes[0].key for n in nodes)  # one key object for the stack
    samples = nodes[0].samples
    assert len(samples) > 100  # 8 GPUs: burn, copies, 56 peer pairs, NCCL sizes
    assert {s.figure for s in samples} >= {"burn.bf16", "h2d", "d2h", "deviceCopy", "p2p"}
    # One array and a shared layout: ~1 KiB a node. A Sample each was ~13 KiB a node, and
    # 10,000 nodes held 129 MiB while learning.
    assert size / 500 < 1536, size / 500
    print(f"learning: {size / 500:.0f} bytes per 8-GPU node", file=sys.stderr)


def test_a_node_whose_gpus_were_replaced_starts_its_history_again_and_says_so() -> None:
    chain: list[dict[str, Any]] = []
    for n in range(3):
        chain = report_facts(measured("n1"), f"{n + 1}-beef", chain).history().carried(5)
    old = chain[0]["gpuIdentity"]
    assert [e["gpuIdentity"] for e in chain] == [old] * 3

    # New GPUs, 10 % slower: against the old ones' figures, DriftFromHistory (Fail) would fail it.
    facts = report_facts(measured("n1", slowed(0.9), gpuSet=1), "4-beef", chain)
    history = facts.history()

    assert history.runs == ("4-beef",) and history.gpus == facts.gpu_identity != old
    assert history.restarted == (old, 3)
    assert judge.drift(history, HistorySettings(action=DriftAction.FAIL)) == []
    assert [e["run"] for e in history.carried(5)] == ["4-beef"]
    assert judge.restart_message("n1", history.restarted, history.gpus) == (
        f"n1: its GPUs changed (GPU identity {old} -> {history.gpus}: new UUIDs or serials): "
        "its history starts again from this run, 3 earlier runs set aside; DriftFromHistory "
        "compares it again once it has 3 runs on these GPUs"
    )
    # Before its verdict is in, the report's own run is not there: nothing is set aside yet.
    pending = report_facts(measured("n1", gpuSet=1), "4-beef", chain)
    pending.phase = "Running"
    assert pending.history().runs == ("1-beef", "2-beef", "3-beef")


def test_a_run_over_a_bimodal_fleet_has_the_bimodal_condition_and_learns_nothing() -> None:
    # Two even halves: before, the middle between them was learned without a word.
    nodes = [measured(f"slow-{i}", slowed(0.9)) for i in range(4)]
    nodes += [measured(f"fast-{i}") for i in range(4)]
    run = RunState("fleet", "1-beef", 1, 1, "created", 1000.0)
    for result in nodes:
        run.add(result.node or "", 4, f"report-{result.node}", f"pod-{result.node}")
    run.baseline = judge.start(SETTINGS, [])
    run.baseline.status = judge.run_status(run.baseline, [])
    run.completed_at = 2000.0
    plain = {
        c["type"]
        for c in rollup.build_run_status(run, previous_conditions=[], now=2.0)["conditions"]
    }
    (outcome,) = fleet.learn_nodes(
        [node_figures(r) for r in nodes],
        SETTINGS,
        validation="fleet",
        run="1-beef",
        at=datetime(2026, 12, 1, tzinfo=UTC),
    )
    run.baseline.bimodal.append(outcome.bimodal)
    run.baseline.status = judge.with_learning(run.baseline.status, run.baseline)

    status = rollup.build_run_status(run, previous_conditions=[], now=3.0)

    assert "Bimodal" not in plain
    bimodal = {c["type"]: c for c in status["conditions"]}["Bimodal"]
    assert (bimodal["status"], bimodal["reason"]) == ("True", "NotLearnedBimodal")
    assert bimodal["message"] == outcome.bimodal == status["baseline"]["bimodal"][0]
    assert "is bimodal: 4 nodes (fast-0, fast-1, fast-2, fast-3) at " in bimodal["message"]
    assert "and 4 nodes (slow-0, slow-1, slow-2, slow-3) at " in bimodal["message"]
    assert outcome.spec is None and fleet.learned_object(outcome) is None
