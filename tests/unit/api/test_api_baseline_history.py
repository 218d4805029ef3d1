"""A node's own history: its last runs' key figures, carried from report to report, and
DriftFromHistory for a slow decline the fleet median hides."""

from __future__ import annotations

import json
from typing import Any

from gpuval_api.baseline.history import (
    KEY_FIGURES,
    MIN_RUNS,
    drift,
    entry,
    entry_of_result,
    next_history,
)
from gpuval_api.baselinemodel import DriftAction, HistoryEntry, HistorySettings
from gpuval_api.figures import BURN, TRAIN_MFU, TRAIN_TOKENS
from gpuval_api.reasons import Severity
from gpuval_api.views import UnitView, figure_outliers
from tests.support.baselines import measured, slowed


def test_a_node_losing_three_percent_a_run_is_named_at_the_fraction_while_above_the_median() -> (
    None
):
    settings = HistorySettings(runs=5, drift_fraction=0.05)
    # Six runs of one node, each 3 % slower than the one before (real agent, simulated GPUs).
    runs = [
        entry_of_result(f"run-{n}", measured("decliner", slowed(0.97**n) if n else ()))
        for n in range(6)
    ]
    history: list[HistoryEntry] = []
    named = {}
    for record in runs:
        named[record.run] = drift(history, record, settings)
        history = next_history(history, record, settings.runs)

    # Run 3 is 0.97^3 = 0.913 of run 0: 0.94 of the median of runs 0-2, below 0.95: named.
    assert [run for run, found in named.items() if found] == ["run-3", "run-4", "run-5"]
    assert [d.figure for d in named["run-3"]] == [
        "burnTflops",
        "h2dGBps",
        "d2hGBps",
        "deviceCopyGBps",
        "p2pGBps",
        "ncclBusbwGBps",
    ]
    burn = next(d for d in named["run-5"] if d.figure == "burnTflops")
    assert burn.severity is Severity.WARNING and burn.runs == 5
    assert burn.message.startswith("burnTflops 666.4 TFLOP/s is 0.91 of this node's median 730.1")
    # The rest of the fleet is a little slower still: the median rule sees nothing wrong with it.
    fleet = [UnitView(f"n{i}", "Passed", figures={BURN.key: 640.0 + i}) for i in range(7)]
    decliner = UnitView("decliner", "Passed", figures={BURN.key: burn.value})
    assert figure_outliers([*fleet, decliner], [BURN]) == []
    assert burn.value > 643.0  # above the run's median


def test_drift_fails_the_node_when_the_spec_says_fail() -> None:
    settings = HistorySettings(runs=5, drift_fraction=0.05, action=DriftAction.FAIL)
    past = [entry(f"r{i}", None, {"burnTflops": 700.0}) for i in range(3)]

    (found,) = drift(past, entry("now", None, {"burnTflops": 650.0}), settings)

    assert found.severity is Severity.ERROR and round(found.ratio, 3) == 0.929


def test_fewer_than_three_past_runs_or_history_off_name_nothing() -> None:
    past = [entry(f"r{i}", None, {"burnTflops": 700.0}) for i in range(MIN_RUNS - 1)]
    now = entry("now", None, {"burnTflops": 100.0})

    assert drift(past, now, HistorySettings()) == []
    assert (
        drift([*past, past[0].model_copy(update={"run": "r9"})], now, HistorySettings(runs=0)) == []
    )


def test_the_history_keeps_the_last_n_runs_and_a_retried_run_once() -> None:
    history: list[HistoryEntry] = []
    for n in range(8):
        history = next_history(history, entry(f"r{n}", None, {"burnTflops": float(n)}), 5)
    history = next_history(history, entry("r7", None, {"burnTflops": 99.0}), 5)

    assert [h.run for h in history] == ["r3", "r4", "r5", "r6", "r7"]
    assert history[-1].burn_tflops == 99.0


def test_an_entry_holds_the_key_figures_only_and_stays_small() -> None:
    result = measured("n")
    record = entry_of_result("12-abcd", result)
    with_fabric = entry(
        "12-abcd",
        "2026-11-30T20:18:21Z",
        record.model_dump(by_alias=True),
        fabric_pair_gbps=265.152,
    )
    document = json.dumps(with_fabric.model_dump(mode="json", by_alias=True, exclude_none=True))

    # Every key figure the default run measures (the training step is not in it).
    trained = {TRAIN_TOKENS.key, TRAIN_MFU.key}
    assert set(with_fabric.model_dump(by_alias=True, exclude_none=True)) == {
        "run",
        "completedAt",
        *(key for key in KEY_FIGURES if key not in trained),
    }
    # 10,000 nodes x 5 runs: about 11 MB spread over 10,000 reports, 1.2 KB each.
    assert len(document) <= 256, len(document)


def test_new_gpus_start_a_new_history_and_are_not_judged_against_the_old_ones() -> None:
    settings = HistorySettings(runs=5, drift_fraction=0.05, action=DriftAction.FAIL)
    old = [entry_of_result(f"r{n}", measured("n1")) for n in range(3)]
    # The node's GPUs replaced (new UUIDs and serials) by ones 10 % slower: no drift, a new chain.
    swapped = entry_of_result("r3", measured("n1", slowed(0.9), gpuSet=1))
    assert old[0].gpu_identity is not None and len(old[0].gpu_identity) == 16
    assert swapped.gpu_identity not in (None, old[0].gpu_identity)

    assert drift(old, swapped, settings) == []
    history = next_history(old, swapped, settings.runs)
    assert [h.run for h in history] == ["r3"]
    # Entries written before gpuval kept an identity are not other GPUs.
    unknown = [h.model_copy(update={"gpu_identity": None}) for h in old]
    assert [d.figure for d in drift(unknown, swapped, settings)][:1] == ["burnTflops"]
    assert [h.run for h in next_history(unknown, swapped, 5)] == ["r0", "r1", "r2", "r3"]


def test_a_mig_nodes_history_survives_its_instances_being_created_again() -> None:
    settings = HistorySettings(runs=5, drift_fraction=0.05, action=DriftAction.FAIL)

    def on_mig(run: str, boot: int, profiles: list[str], *faults: dict[str, Any]) -> HistoryEntry:
        uuids = [f"MIG-boot{boot}-{k}" for k in range(len(profiles))]
        layout = [{"gpu": 0, "profiles": profiles, "uuids": uuids}]
        return entry_of_result(run, measured("n1", list(faults), gpus=1, mig=layout))

    seven = ["1g.18gb"] * 7
    # Three runs, then a reboot: the same GPU and layout, new instance UUIDs, 10 % slower.
    old = [on_mig(f"r{n}", n, seven) for n in range(3)]
    rebooted = on_mig("r3", 3, seven, *slowed(0.9, [0]))

    # Before: each boot's instance UUIDs were other GPUs, and the history started again.
    assert len({h.gpu_identity for h in [*old, rebooted]}) == 1
    assert [d.figure for d in drift(old, rebooted, settings)][:1] == ["burnTflops"]
    assert [h.run for h in next_history(old, rebooted, 5)] == ["r0", "r1", "r2", "r3"]
    # Another layout is other units: its history starts again.
    relaid = on_mig("r4", 4, ["3g.71gb", "4g.71gb"])
    assert relaid.gpu_identity not in (None, old[0].gpu_identity)
    assert [h.run for h in next_history(old, relaid, 5)] == ["r4"]
