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
from gpuval_api.figures import Figure, PerGpu, RegistryError, Shown, Unit

ROOT = Path(__file__).resolve().parents[2]

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
    lower = Figure(
        id="stepTime",
        label="Step time",
        unit=Unit.SECONDS,
        check=CheckName.BURN,
        description="x",
        read=PerGpu(),
        better=figures.Better.LOWER,
        shown=Shown(distribution=True),
    )
    with pytest.raises(RegistryError, match="higher-better"):
        figures.declare(lower)
    assert figures.by_key("stepTimeSeconds") is None


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
