"""benchmarks/scale_options.py: the operator scale benchmark's options, each bad value refused with
its flag and value, and what the control plane and the GpuValidation are given."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

# The benchmarks import one another by name, as they run: from their own folder.
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
scale_options = importlib.import_module("scale_options")


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--runs", "0"], "--runs 0"),
        (["--kwok-pod-parallelism", "0"], "--kwok-pod-parallelism 0"),
        (["--kwok-lease-parallelism", "-3"], "--kwok-lease-parallelism -3"),
        (["--control-plane-gogc", "fast"], "--control-plane-gogc fast"),
        (["--control-plane-gogc", "0"], "--control-plane-gogc 0"),
        (["--control-plane-memory-limit", "6 gigs"], "--control-plane-memory-limit 6 gigs"),
        (["--heartbeat-factor", "0"], "--heartbeat-factor 0"),
        (["--fabric-timeline", "t.json"], "--fabric-timeline t.json"),
        (["--apiserver-profile", "prof"], "--apiserver-profile prof"),
        (["--remediation", "0.9"], "--remediation 0.9"),
    ],
)
def test_a_bad_value_is_refused_with_its_flag_and_value(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        scale_options.parse_options(argv)
    assert stopped.value.code == 2
    assert named in capsys.readouterr().err


def test_the_defaults_start_kwok_and_go_as_they_come() -> None:
    opts, json_path = scale_options.parse_options([])
    assert json_path is None
    assert (opts.nodes, opts.max_concurrent, opts.fabric, opts.runs) == (10_000, "25%", False, 1)
    assert opts.first_wave() == 2_500
    assert scale_options.kwok_options(opts) is None
    assert scale_options.go_runtime_env(opts) == {}


def test_options_given_reach_kwok_the_go_runtime_and_the_spec(tmp_path: Path) -> None:
    argv = [
        "--nodes", "1000", "--max-concurrent", "300", "--fabric", "--racks", "10",
        "--kwok-pod-parallelism", "32", "--kwok-lease-parallelism", "16",
        "--control-plane-gogc", "400", "--control-plane-memory-limit", "6GiB",
        "--fabric-timeline", str(tmp_path / "t.json"), "--json", str(tmp_path / "f.json"),
    ]  # fmt: skip
    opts, json_path = scale_options.parse_options(argv)
    assert json_path == tmp_path / "f.json"
    assert opts.first_wave() == 300
    assert scale_options.kwok_options(opts) == {
        "podPlayStageParallelism": 32,
        "nodeLeaseParallelism": 16,
    }
    assert scale_options.go_runtime_env(opts) == {"GOGC": "400", "GOMEMLIMIT": "6GiB"}
    first, second = scale_options.validation(opts, 1), scale_options.validation(opts, 2)
    assert first["spec"]["fabric"]["topologyKey"] == "topology.gpuval.dev/rack"
    assert first["spec"]["maxConcurrent"] == "300"
    # Each later run is a spec change: its history differs.
    assert (first["spec"]["history"], second["spec"]["history"]) == (3, 5)


def test_remediation_fails_a_share_of_the_nodes_and_hands_them_to_rebootnodes() -> None:
    opts, _ = scale_options.parse_options(["--nodes", "1000", "--remediation", "0.05"])
    spec = scale_options.validation(opts)["spec"]
    assert spec["remediation"]["mode"] == "Template"
    assert spec["remediation"]["template"]["kind"] == "RebootNode"
    assert spec["nodeActions"]["taint"] == {"effect": "NoSchedule"}, "a node in repair is out"
    scale_repairs = importlib.import_module("scale_repairs")
    names = [f"scale-{i:05d}" for i in range(1000)]
    assert len(scale_repairs.failing(names, 0.05)) == 50
    assert "remediation" not in scale_options.validation(scale_options.parse_options([])[0])["spec"]
