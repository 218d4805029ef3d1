"""The figure registry (gpuval_api.figures): one declaration makes a figure appear in every place
that names figures. A figure is declared in a fresh interpreter before the rest of gpuval is
imported (as one in gpuval_api/figures/declared.py is), its measurement is put into results of
the real agent code, and the report summary, the CRDs, the HTML report, the outliers, the
operator's metrics, the baselines, the history and the dashboard are asked what they hold."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpuval_api import figures
from gpuval_api.baselinemodel import FIGURE_PATTERN
from gpuval_api.checks import BandwidthCheck, CheckName
from gpuval_api.figures import Figure, PerGpu, RegistryError, Unit

ROOT = Path(__file__).resolve().parents[3]

# Runs in a fresh interpreter: the declaration, then the consumers.
SCRIPT = r"""
import json, re

from gpuval_api import figures
from gpuval_api.checks import CheckName

NEW = figures.declare(
    figures.Figure(
        id="h2dUnderLoad",
        label="Host to device under load",
        unit=figures.Unit.GBPS,
        check=CheckName.BANDWIDTH,
        description="Lowest host-to-device bandwidth under load, GB/s.",
        read=figures.PerGpu(),
        baseline="h2dUnderLoad",
        history=True,
        per_gpu_metric=True,
        shown=figures.Shown(
            page=True, trend="Host to device under load", distribution=True, column="Load GB/s"
        ),
    )
)

from prometheus_client import generate_latest

from gpuval_api import crdgen
from gpuval_api.baseline import history, learn, rules, samples
from gpuval_api.baselinemodel import FIGURE_PATTERN, HistorySettings
from gpuval_api.checks import ChecksConfig
from gpuval_api.crd import GpuValidation
from gpuval_api.report import build_summary
from gpuval_api.views import figure_outliers, fleet_view
from gpuval_devtools import dashboard
from gpuval_operator.readmodel.metrics import make_registry
from gpuval_operator.readmodel.registry import Registry
from gpuval_operator.readmodel.validation import NodeResult, ValidationState
from gpuval_operator.run.facts import ReportFacts
from gpuval_report.page import render_page
from tests.support.baselines import node_figures
from tests.support.fleets import node_report, simulated_result

found = {}
config = ChecksConfig.model_validate({"burn": {"durationSeconds": 1}})
results = []
for index in range(6):
    result = simulated_result(f"node-{index}", config=config, gpus=2)
    gbps = 20.0 if index == 5 else 40.0 + index  # node-5 is slow under load
    for gpu in result.check(CheckName.BANDWIDTH).gpus:
        gpu.metrics[NEW.metric] = gbps + gpu.index
    results.append(result)

summary = build_summary(results[0])
found["summary"] = summary.get(NEW.key)

crds = crdgen.build_crds()
report_crd = next(v for k, v in crds.items() if "gpunodereports" in k)
version = report_crd["spec"]["versions"][0]
schema = version["schema"]["openAPIV3Schema"]["properties"]
found["crd_summary"] = NEW.key in schema["status"]["properties"]["summary"]["properties"]
history_items = schema["spec"]["properties"]["history"]["items"]["properties"]
found["crd_history"] = NEW.key in history_items
found["column"] = any(
    c["jsonPath"] == f".status.summary.{NEW.key}" for c in version["additionalPrinterColumns"]
)

reports = [node_report("fleet", "1-abcd", r) for r in results]
validation = GpuValidation.model_validate({"metadata": {"name": "fleet"}, "spec": {}})
view = fleet_view(validation, reports)
page = render_page(view)
found["page_plot"] = f'data-figure="{NEW.key}"' in page
found["page_label"] = NEW.label in page
found["outliers"] = [
    (o.figure.id, o.unit) for o in figure_outliers(view.units) if o.figure.id == NEW.id
]

registry = Registry()
state = ValidationState("fleet")
for report in reports:
    facts = ReportFacts.parse(report.model_dump(mode="json", by_alias=True), per_gpu=True)
    state.latest[facts.node] = NodeResult.of(facts)
registry["fleet"] = state
text = generate_latest(make_registry(registry, per_gpu=True)).decode()
series = f"gpuval_node_{NEW.prometheus}"
found["metric_node"] = re.findall(
    rf'^{series}{{node="node-5",validation="fleet"}} (\S+)$', text, re.M
)
found["metric_gpu"] = bool(
    re.search(rf'^gpuval_gpu_{NEW.prometheus}{{gpu="1",node="node-0"', text, re.M)
)

found["pattern"] = bool(re.fullmatch(FIGURE_PATTERN, NEW.baseline))
found["samples"] = sorted(
    {s.figure for s in samples.result_samples(results[0]) if s.figure == NEW.baseline}
)
nodes = [node_figures(r) for r in results[:5]]
learned = learn.learn(nodes, nodes[0].key, fraction=0.1, min_nodes=5)
entry = learned.spec.figure(NEW.baseline) if learned.spec else None
found["learned_centre"] = entry.centre if entry else None
comparison, below = rules.compare(
    samples.result_samples(results[5]), nodes[0].key, [("learned", learned.spec)], 0.1
)
found["below"] = sorted({(b.figure, b.check) for b in below})

past = [history.entry_of_result(f"run-{n}", results[0]) for n in range(3)]
now = history.entry_of_result("run-3", results[5])
drifts = history.drift(past, now, HistorySettings(runs=5))
found["drift"] = [d.figure for d in drifts]

board = dashboard.render()
found["dashboard"] = board.count(f"gpuval_node_{NEW.prometheus}")
found["dashboard_gpu"] = f"gpuval_gpu_{NEW.prometheus}" in board
print(json.dumps(found))
"""


def test_one_declaration_puts_a_figure_everywhere_figures_are_named() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])

    assert found["summary"] == 40.0  # node-0's worst GPU
    assert found["crd_summary"] and found["crd_history"] and found["column"]
    assert found["page_plot"] and found["page_label"]
    assert found["outliers"] == [["h2dUnderLoad", "node-5"]]
    assert [float(v) for v in found["metric_node"]] == [20e9]  # base units: bytes/s
    assert found["metric_gpu"]
    assert found["pattern"]
    assert found["samples"] == ["h2dUnderLoad"]
    assert found["learned_centre"] == pytest.approx(42.5, abs=1.0)
    assert found["below"] == [["h2dUnderLoad", "bandwidth"]]
    assert found["drift"] == ["h2dUnderLoadGBps"]
    assert found["dashboard"] >= 3  # its distribution, slowest nodes and trend panels
    assert found["dashboard_gpu"] is False  # shown.per_gpu was not asked for


def test_the_registry_refuses_a_figure_that_takes_another_ones_name() -> None:
    twin = Figure(
        id="h2d",
        label="again",
        unit=Unit.GBPS,
        check=CheckName.BANDWIDTH,
        description="x",
        read=PerGpu(),
    )
    with pytest.raises(RegistryError, match="its id is 'h2d'"):
        figures.declare(twin)


def test_the_spellings_follow_from_the_id_and_the_unit() -> None:
    assert figures.H2D.key == "h2dGBps" and figures.H2D.prometheus == "h2d_bytes_per_second"
    assert figures.DEVICE_COPY.prometheus == "device_copy_bytes_per_second"
    assert figures.BURN.key == "burnTflops" and figures.BURN.factor == 1e12
    assert figures.BURN.metric == "tflops"
    assert figures.BURN.precision_metric("fp64") == "tflops.fp64"
    assert figures.MAX_TEMPERATURE.prometheus == "max_temperature_celsius"
    assert figures.NCCL_BUSBW.baseline_name(nbytes=4 << 30) == "nccl.4GiB"
    assert figures.of_baseline("burn.tf32") is figures.BURN
    assert figures.of_baseline("nccl.1MiB") is figures.NCCL_BUSBW
    assert not figures.baseline_judged("nccl.1MiB") and figures.baseline_judged("nccl.1GiB")
    assert figures.baseline_pattern() == FIGURE_PATTERN
    with pytest.raises(ValueError, match="no figure a baseline holds"):
        figures.of_baseline("maxTemperature")


def test_the_bandwidth_checks_minimums_are_named_as_the_registry_spells_them() -> None:
    """The check names the setting a figure fell below (bandwidth.minH2dGBps) from the figure,
    never from a hand-written string: the name must be the setting's own."""
    settings = {f.alias for f in BandwidthCheck.model_fields.values()}
    for figure in (figures.H2D, figures.D2H, figures.DEVICE_COPY, figures.P2P):
        assert figure.threshold in settings, figure.threshold
    assert figures.H2D.threshold == "minH2dGBps"


def test_a_lower_is_better_figure_is_worse_above_its_reference() -> None:
    assert figures.MAX_TEMPERATURE.ratio(90.0, 60.0) == pytest.approx(60 / 90)
    assert figures.H2D.ratio(45.0, 50.0) == pytest.approx(0.9)
    assert figures.H2D.ratio(0.0, 50.0) == 0.0


# A lower-is-better figure, declared as documented (docs/contracts.md, "Adding a figure"): a
# per-GPU count from the state check, judged against a ceiling. Healthy simulated GPUs count 0
# PCIe replays (a fleet median of 0); node-5's GPU 3 counts 5,000, node-4's GPU 1 counts 3 (within
# the tolerance).
LOWER_SCRIPT = r"""
import json, re

from gpuval_api import figures
from gpuval_api.checks import CheckName

NEW = figures.declare(
    figures.Figure(
        id="pcieReplays",
        label="PCIe replays",
        unit=figures.Unit.COUNT,
        check=CheckName.STATE,
        description="Most PCIe replays a GPU counted.",
        read=figures.PerGpu(metric="pcieReplays", tested_only=False),
        better=figures.Better.LOWER,
        tolerance=10,
        baseline="pcieReplays",
        history=True,
        per_gpu_metric=True,
        shown=figures.Shown(page=True, trend="PCIe replays", per_gpu=True, distribution=True),
    )
)

from prometheus_client import generate_latest

from gpuval_api.baseline import bands, history, learn, rules, samples
from gpuval_api.baselinemodel import GpuBaselineSpec, HistorySettings
from gpuval_api.checks import ChecksConfig
from gpuval_api.crd import GpuValidation
from gpuval_api.report import build_summary
from gpuval_api.views import figure_outliers, fleet_view
from gpuval_devtools import dashboard
from gpuval_operator.readmodel.metrics import make_registry
from gpuval_operator.readmodel.registry import Registry
from gpuval_operator.readmodel.validation import NodeResult, ValidationState
from gpuval_operator.run.facts import ReportFacts
from tests.support.baselines import node_figures
from tests.support.fleets import node_report, simulated_result

found = {"threshold": NEW.threshold, "worst": str(NEW.worst)}
config = ChecksConfig.model_validate({"burn": {"durationSeconds": 1}})
faults = {4: [{"kind": "pcie-replays", "gpu": 1, "count": 3}],
          5: [{"kind": "pcie-replays", "gpu": 3, "count": 5000}]}
results = [
    simulated_result(f"node-{i}", faults.get(i, []), config=config, gpus=8) for i in range(6)
]
found["verdicts"] = [str(r.verdict) for r in results]
found["summary"] = [build_summary(r).get(NEW.key) for r in results]

# Learning keeps the zeros: the healthy nodes learn a centre of 0.
nodes = [node_figures(r) for r in results[:5]]
found["zeros_kept"] = sum(
    1 for s in nodes[0].samples if s.figure == NEW.baseline and s.value == 0
)
learned = learn.learn(nodes, nodes[0].key, fraction=0.1, min_nodes=5)
entry = learned.spec.figure(NEW.baseline) if learned.spec else None
found["learned"] = [entry.centre, entry.spread] if entry else learned.problem
candidates = [("learned", learned.spec)]

def judged(result):
    comparison, below = rules.compare(
        samples.result_samples(result), nodes[0].key, candidates, 0.1
    )
    mine = next(f for f in comparison.figures if f.figure == NEW.baseline)
    return {
        "value": mine.value, "where": mine.where, "ceiling": mine.ceiling, "floor": mine.floor,
        "ratio": mine.ratio, "below": mine.below, "better": str(mine.better),
        "findings": [(b.figure, b.check, b.message) for b in below if b.figure == NEW.baseline],
    }

found["healthy"] = judged(results[0])
found["within"] = judged(results[4])
found["high"] = judged(results[5])

# Against a centre of 2 replays: 5,000 (2,500x worse) is above the ceiling, 0 (better) is not.
spec = learned.spec.model_copy(deep=True)
for f in spec.figures:
    if f.figure == NEW.baseline:
        f.centre = 2.0
candidates = [("hand", spec)]
found["ceiling_2"] = [judged(results[5])["below"], judged(results[0])["below"]]
band = bands.of_spec("hand", spec, fraction=0.1, precision="bf16", nccl_bytes=None)
mine = band.bands[NEW.key]
found["band"] = [mine.limit, mine.lower, mine.beyond(5000.0), mine.beyond(0.0)]

# Outliers: the fleet's median is 0; only node-5 is one, and it says so.
reports = [node_report("fleet", "1-abcd", r) for r in results]
view = fleet_view(GpuValidation.model_validate({"metadata": {"name": "fleet"}}), reports)
found["outliers"] = [
    (o.unit, o.against_median) for o in figure_outliers(view.units) if o.figure.id == NEW.id
]
# One machine: its GPUs at 0 are no outliers, its GPU 3 is.
from gpuval_api.machine import machine_view
found["machine_outliers"] = [
    (o.unit, o.against_median)
    for o in figure_outliers(machine_view(results[5]).units)
    if o.figure.id == NEW.id
]

# History: a node at 0 for three runs, then 5,000, drifts above; 3 (within the tolerance) does not.
past = [history.entry_of_result(f"run-{n}", results[0]) for n in range(3)]
drifts = history.drift(past, history.entry_of_result("run-3", results[5]), HistorySettings(runs=5))
found["drift"] = [(d.figure, d.message) for d in drifts]
calm = history.drift(past, history.entry_of_result("run-3", results[4]), HistorySettings(runs=5))
found["calm"] = [d.figure for d in calm]

registry = Registry()
state = ValidationState("fleet")
for report in reports:
    facts = ReportFacts.parse(report.model_dump(mode="json", by_alias=True), per_gpu=True)
    state.latest[facts.node] = NodeResult.of(facts)
registry["fleet"] = state
text = generate_latest(make_registry(registry, per_gpu=True)).decode()
found["metric"] = re.findall(
    rf'^gpuval_node_{NEW.prometheus}{{node="node-5",validation="fleet"}} (\S+)$', text, re.M
)
board = dashboard.render()
found["dashboard_highest"] = "topk(15, gpuval_node_pcie_replays{" in board
found["dashboard_slowest"] = "bottomk(15, gpuval_node_pcie_replays{" in board
print(json.dumps(found))
"""


def test_a_lower_is_better_figure_is_judged_against_a_ceiling_everywhere() -> None:
    """Declared through the registry, a count where lower is better: its node value is its
    highest GPU's, zeros are learned, a baseline is a ceiling, a median of 0 makes no healthy
    node an outlier, and every message says "above"."""
    done = subprocess.run(
        [sys.executable, "-c", LOWER_SCRIPT],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])

    assert found["threshold"] == "maxPcieReplaysCount" and found["worst"] == "max"
    assert found["verdicts"] == ["Passed"] * 6  # replays are no finding of the state check
    assert found["summary"] == [0, 0, 0, 0, 3, 5000]  # the highest GPU's
    assert found["zeros_kept"] == 8
    assert found["learned"] == [0.0, 0.0]
    # A ceiling of (1 + 0.1) x 0 + the tolerance 10: the healthy and node-4 are within it.
    assert found["healthy"]["below"] == 0 and found["healthy"]["ceiling"] == 10.0
    assert found["healthy"]["floor"] is None and found["healthy"]["better"] == "lower"
    assert found["healthy"]["findings"] == [] and found["healthy"]["ratio"] == 1.0
    assert found["within"]["below"] == 0 and found["within"]["value"] == 3.0
    high = found["high"]
    assert (high["value"], high["where"], high["below"], high["ratio"]) == (5000.0, "GPU 3", 1, 0.0)
    ((figure, check, message),) = high["findings"]
    assert (figure, check) == ("pcieReplays", "state")
    assert message.startswith("GPU 3: pcieReplays 5000.0 count is above the ")
    assert "ceiling 10.0 (lower is better: at most 1.10 of its centre 0.0 + 10 count" in message
    assert "below" not in message
    assert found["ceiling_2"] == [1, 0]  # 2,500x worse is above; better than the centre is not
    assert found["band"] == [12.2, True, True, False]
    assert found["outliers"] == [["node-5", "above median 0.0"]]
    assert found["machine_outliers"] == [["GPU 3", "above median 0.0"]]
    ((drifted, said),) = found["drift"]
    assert drifted == "pcieReplaysCount" and "above 10.0" in said and "below" not in said
    assert found["calm"] == []
    assert [float(v) for v in found["metric"]] == [5000.0]
    # The dashboard shows its highest nodes above the median, never its "slowest" (lowest).
    assert found["dashboard_highest"] and not found["dashboard_slowest"]


def test_better_is_the_one_switch_and_a_contradicting_worst_is_refused() -> None:
    hot = Figure(
        id="hotSpot",
        label="Hot spot",
        unit=Unit.CELSIUS,
        check=CheckName.BURN,
        description="x",
        read=PerGpu(worst=figures.Worst.MIN),
        better=figures.Better.LOWER,
    )
    with pytest.raises(RegistryError, match=r"figure 'hotSpot': PerGpu\(worst=min\) contradicts"):
        figures.declare(hot)
    assert figures.by_key("hotSpotCelsius") is None
    # The temperature says only better=LOWER: its node value is its hottest GPU's.
    assert figures.MAX_TEMPERATURE.worst is figures.Worst.MAX
    assert figures.MAX_TEMPERATURE.threshold == "maxMaxTemperatureCelsius"
    assert figures.H2D.worst is figures.Worst.MIN and figures.H2D.threshold == "minH2dGBps"
