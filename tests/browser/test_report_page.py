"""The HTML report as a person sees it: written by the real report code from real agent results
(simulated backend), opened in headless chromium with the network refused, and judged by what the
browser drew: every plot present and sized, one point per node coloured by its verdict, the slow
and the wrong node labelled on the burn plot, the baseline's band on each figure and each node's
trend line, the failures with their hints, a verdict this version does not know (NotRun) counted
on its own; the fabric section's pairs with the slow node's bars red; a 1,000-node run readable:
failures grouped per node, nodes that share a value named by one label, no two labels drawn over
each other. The screenshots are kept: with
GPUVAL_SCREENSHOT_DIR set (make report-screenshot) they are copied there for the README and
docs/see.md."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from itertools import combinations
from pathlib import Path
from typing import Any

import pytest

from gpuval_api.reasons import REASONS, Reason
from gpuval_report import write_page
from tests.support.browser import look_at
from tests.support.fleets import fabric_fleet, large_fleet, sample_fleet, varied_fleet

pytestmark = pytest.mark.browser

FAILED_RED = "rgb(198, 40, 40)"  # gpuval_report.figures: Failed is #c62828
PASSED_GREEN = "rgb(46, 125, 50)"  # and Passed #2e7d32
BAND_TEAL = "rgb(0, 137, 123)"  # the baseline's band and centre line, #00897b
FIGURE_PLOTS = [
    "plot-burnTflops",
    "plot-h2dGBps",
    "plot-d2hGBps",
    "plot-deviceCopyGBps",
    "plot-p2pGBps",
    "plot-ncclBusbwGBps",
    "plot-nccl-sweep",
]


def keep(screenshot: Path, name: str) -> None:
    target = os.environ.get("GPUVAL_SCREENSHOT_DIR")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(screenshot, Path(target) / name)


def test_the_fleet_report_draws_every_plot_offline_and_names_the_faulty_nodes(
    tmp_path: Path,
) -> None:
    view, roles = sample_fleet(healthy=5, baseline=True)
    page = write_page(view, tmp_path / "fleet.html")

    seen = look_at(page, tmp_path / "fleet.png", count=("#history svg.trend",))

    assert seen.refused == [], "the page asked for the network"
    assert seen.errors == []
    assert [p["id"] for p in seen.plots] == FIGURE_PLOTS
    for plot in seen.plots:
        assert plot["width"] > 600 and plot["height"] > 250, plot
    burn = seen.plot("plot-burnTflops")
    # 7 nodes measured (the untested one has no figures), the 2 failed ones drawn red.
    assert len(burn["fills"]) == 7
    assert burn["fills"].count(FAILED_RED) == 2
    assert f"{roles['slow']} (60% of median)" in burn["annotations"]
    assert f"{roles['wrong']} (BurnMismatch)" in burn["annotations"]
    assert seen.plot("plot-nccl-sweep")["lines"] == 7
    assert "Failed: 2" in seen.text and "NotRun: 1" in seen.text
    assert REASONS[Reason.BURN_MISMATCH].hint in seen.text
    assert roles["untested"] in seen.text
    # The baseline learned from the healthy nodes: a band and a named centre on every figure.
    for plot in seen.plots[:-1]:
        assert any(shape["fill"] == BAND_TEAL for shape in plot["shapes"]), plot["id"]
        assert any(shape["stroke"] == BAND_TEAL for shape in plot["shapes"]), plot["id"]
    assert "H200 baseline 776.0" in burn["annotations"]
    assert "0.60 of the H200 baseline" in seen.text  # the slow node, in the baseline section
    # A trend line per tested node and figure; the node losing 3 % a run first after the slow one.
    assert seen.counts["#history svg.trend"] == 7 * 6
    history = seen.text.split("History", 1)[1]
    assert (
        history.index(roles["slow"])
        < history.index(roles["decliner"])
        < history.index("gpu-node-0")
    )
    assert (tmp_path / "fleet.png").stat().st_size > 50_000
    keep(tmp_path / "fleet.png", "fleet-report.png")


def test_gpuval_agent_run_html_gives_the_same_page_for_one_machine(tmp_path: Path) -> None:
    page = tmp_path / "machine.html"
    simulation = '{"timeScale": 0.001, "faults": [{"kind": "thermal-slowdown", "gpu": 5}]}'
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuval_agent.cli",
            "run",
            "--backend",
            "simulated",
            "--simulate",
            simulation,
            "--quiet",
            "--html",
            str(page),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr  # a check failed: GPU 5 throttles

    seen = look_at(page, tmp_path / "machine.png")

    assert seen.refused == [] and seen.errors == []
    burn = seen.plot("plot-burnTflops")
    assert len(burn["fills"]) == 8
    assert burn["fills"].count(FAILED_RED) == 1
    assert "GPU 5 (60% of median)" in burn["annotations"]
    assert "ThermalSlowdown" in seen.text
    assert seen.plot("plot-nccl-sweep")["lines"] == 1
    # The shipped H200 baseline (measured on 2 GPUs) bands the per-GPU figures of 8 GPUs.
    assert any(shape["fill"] == BAND_TEAL for shape in burn["shapes"])
    assert "H200 baseline 706.4" in burn["annotations"]
    assert not any(s["fill"] == BAND_TEAL for s in seen.plot("plot-p2pGBps")["shapes"])
    assert "0.66 of the H200 baseline" in seen.text and "BelowBaseline" in seen.text


def test_the_fabric_section_draws_every_pair_and_names_the_slow_node(tmp_path: Path) -> None:
    # Four nodes measured by the real fabric agent code (simulated executor) over loopback;
    # gpu-node-1's network runs at 0.6 of the rest.
    view, slow = fabric_fleet(size=4, slow=1)
    page = write_page(view, tmp_path / "fabric.html")

    seen = look_at(page, tmp_path / "fabric.png", element="#fabric")

    assert seen.refused == [] and seen.errors == []
    pairs = seen.plot("plot-fabric-pairs")
    # Rounds 1 and 2 of four nodes (a ring of four edges) and one confirmation of the suspect.
    assert len(pairs["bars"]) == 5
    red = [
        tick
        for tick, fill in zip(pairs["xticks"], pairs["bars"], strict=True)
        if fill == FAILED_RED
    ]
    # Every red bar has the slow node at one end, and it is in all of its pairs' bars.
    assert red and all(slow in tick for tick in red), red
    assert sorted(red) == sorted(t for t in pairs["xticks"] if slow in t)
    assert pairs["bars"].count(PASSED_GREEN) == 2
    assert "FabricSlowNode" in seen.text
    assert "IB/GDRDMA" in seen.text
    assert "1 failed of 4" in seen.text
    # A fleet without a fabric phase has no fabric section.
    plain, _ = sample_fleet(healthy=1)
    assert 'id="fabric"' not in write_page(plain, tmp_path / "plain.html").read_text()
    keep(tmp_path / "fabric.png", "fabric-report.png")


def _overlapping(boxes: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [
        (a["text"], b["text"])
        for a, b in combinations(boxes, 2)
        if a["left"] < b["right"]
        and b["left"] < a["right"]
        and a["top"] < b["bottom"]
        and b["top"] < a["bottom"]
    ]


def test_a_1000_node_report_groups_failures_per_node_and_keeps_its_labels_apart(
    tmp_path: Path,
) -> None:
    view, roles = large_fleet(1000)
    page = write_page(view, tmp_path / "fleet-1000.html")

    seen = look_at(page, tmp_path / "fleet-1000.png", full_page=True)

    assert seen.refused == [] and seen.errors == []
    assert "Passed: 976" in seen.text and "Failed: 14" in seen.text and "NotRun: 10" in seen.text
    # One row per node, check and reason: a bandwidth node's 16 findings are one row, a slow
    # node's burn two (LowThroughput, ThermalSlowdown), a wrong one's one.
    assert seen.failure_rows == 6 * 1 + 5 * 2 + 3 * 1
    assert "14 failing nodes" in seen.text
    for plot in seen.plots:
        assert _overlapping(plot["annotationBoxes"]) == [], plot["id"]
        for label in plot["annotationBoxes"]:
            inside = plot["box"]
            assert inside["left"] <= label["left"] and label["right"] <= inside["right"], label
            assert inside["top"] <= label["top"] and label["bottom"] <= inside["bottom"], label
    bandwidth = sorted(roles["bandwidth"])
    h2d = seen.plot("plot-h2dGBps")["annotations"]
    assert f"{bandwidth[0]}, {bandwidth[1]} and 4 more (50% of median)" in h2d
    slow = sorted(roles["slow"])
    assert (
        f"{slow[0]}, {slow[1]} and 3 more (60% of median)"
        in seen.plot("plot-burnTflops")["annotations"]
    )
    wrong = sorted(roles["wrong"])
    assert (
        f"{wrong[0]}, {wrong[1]} and 1 more (BurnMismatch)"
        in seen.plot("plot-burnTflops")["annotations"]
    )
    keep(tmp_path / "fleet-1000.png", "fleet-1000-report.png")


def test_labels_of_outliers_with_different_values_and_long_names_never_overlap(
    tmp_path: Path,
) -> None:
    # Ten nodes each slow by its own factor: each is a label of its own on every figure's plot,
    # its point drawn at its own height in the row (the rows' points are spread up and down).
    view, roles = varied_fleet(1000)
    page = write_page(view, tmp_path / "fleet-varied.html")

    seen = look_at(page, tmp_path / "fleet-varied.png", full_page=True)

    assert seen.refused == [] and seen.errors == []
    slow = roles["slow"]
    for plot in seen.plots[:-1]:  # every figure's distribution (the NCCL sweep has no labels)
        labels = plot["annotationBoxes"]
        assert _overlapping(labels) == [], plot["id"]
        for label in labels:
            inside = plot["box"]
            assert inside["left"] <= label["left"] and label["right"] <= inside["right"], label
            assert inside["top"] <= label["top"] and label["bottom"] <= inside["bottom"], label
        # The slowest nodes, each named on its own label with its own share of the median.
        texts = plot["annotations"]
        assert all(any(t.startswith(f"{node} (") for t in texts) for node in slow[:4]), texts
