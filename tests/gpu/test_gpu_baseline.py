"""The shipped baseline of the GPU model the tests run on (H200 or H100 80GB HBM3; skipped on a
model gpuval ships none for): a healthy burn is compared with it (its ratio in the result); a burn
that shares GPU 0 with a co-running matmul load is not held against the baseline: the GPU was not
tested (GpuInUse names the load's process, issue 17), never BelowBaseline."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpuval_api.baseline.files import shipped

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
LOAD = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_load.py"
MODEL = torch.cuda.get_device_name(0) if torch.cuda.is_available() else ""
# The shipped baselines of this GPU model, by name (the agent prefers the one of its GPU count).
SHIPPED = {b.metadata.name: b.spec for b in shipped() if b.spec.key.gpu_product == MODEL}
NO_BASELINE = f"gpuval ships no baseline for {MODEL or 'this machine (no GPU)'}"


def _burn(tmp_path: Path, seconds: int) -> tuple[int, dict[str, object]]:
    out = tmp_path / "result.json"
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuval_agent.cli",
            "run",
            "--quiet",
            "--checks",
            "driver,burn",
            "--duration",
            str(seconds),
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert "Traceback" not in completed.stderr, completed.stderr
    print(completed.stdout)  # the table, with its BASELINE section, for the run's log
    return completed.returncode, json.loads(out.read_text())


def _burn_ratio(document: dict[str, object]) -> dict[str, object]:
    baseline = document["baseline"]
    assert isinstance(baseline, dict), document.get("baseline")
    return next(f for f in baseline["figures"] if f["figure"] == "burn.bf16")


@pytest.mark.skipif(not SHIPPED, reason=NO_BASELINE)
def test_the_gpu_is_compared_with_the_shipped_baseline_of_its_model(tmp_path: Path) -> None:
    code, document = _burn(tmp_path, 10)

    baseline = document["baseline"]
    assert isinstance(baseline, dict) and baseline["name"] in SHIPPED, baseline
    burn = _burn_ratio(document)
    assert burn["ratio"] is not None and burn["judged"] is True
    assert code == 0 and burn["below"] == 0, burn


@pytest.mark.skipif(not SHIPPED, reason=NO_BASELINE)
def test_a_burn_sharing_its_gpu_with_a_load_names_the_load_and_is_not_below_the_baseline(
    tmp_path: Path,
) -> None:
    load = subprocess.Popen(
        [sys.executable, str(LOAD), "--gpu", "0", "--delay", "4", "--seconds", "30"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        code, document = _burn(tmp_path, 20)
    finally:
        print(load.communicate(timeout=120)[0])

    checks = {c["name"]: c for c in document["checks"]}  # type: ignore[union-attr]
    findings = checks["burn"]["findings"]
    assert code == 3, findings  # not tested
    assert [(f["reason"], f["gpu"]) for f in findings] == [("GpuInUse", 0)], findings
    assert f"PID {load.pid} " in findings[0]["message"]


@pytest.mark.skipif(not SHIPPED, reason=NO_BASELINE)
def test_a_burn_slowed_on_purpose_is_named_below_the_shipped_baseline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GPUVAL_BURN_SLOWDOWN holds the GPU to ~0.8 of its throughput (a spin kernel after each
    # graph's GEMMs), every result still verified: a slow GPU with nothing else on it.
    monkeypatch.setenv("GPUVAL_BURN_SLOWDOWN", "0.8")
    code, document = _burn(tmp_path, 10)

    burn = _burn_ratio(document)
    checks = {c["name"]: c for c in document["checks"]}  # type: ignore[union-attr]
    reasons = {f["reason"] for f in checks["burn"]["findings"]}
    assert code == 1 and burn["below"] >= 1, burn
    assert "BelowBaseline" in reasons, checks["burn"]["findings"]
    assert 0.7 < burn["ratio"] < 0.88, burn  # type: ignore[operator]
