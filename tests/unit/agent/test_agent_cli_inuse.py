"""`gpuval-agent run` on a node where another process uses a GPU (simulated backend): the GPU is
named with the process and not tested, never blamed; the run exits 3, "not tested"."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuval_agent.cli import main
from gpuval_agent.outcome import EXIT_NOT_RUN
from gpuval_api.report import build_summary
from gpuval_api.result import AgentResult, Verdict

BLAME = {"LowThroughput", "LowBandwidth", "CheckError", "NcclLowBusbw", "NcclError"}


def _run(
    tmp_path: Path, faults: list[dict[str, Any]], **simulation: Any
) -> tuple[int, AgentResult]:
    out = tmp_path / "result.json"
    simulate = json.dumps({"gpus": 2, "timeScale": 0.001, "faults": faults} | simulation)
    code = main(["run", "--backend", "simulated", "--simulate", simulate, "--json", str(out)])
    return code, AgentResult.model_validate_json(out.read_text())


def _reasons(result: AgentResult) -> set[str]:
    return {str(f.reason) for c in result.checks for f in c.findings}


def test_a_process_computing_on_a_gpu_from_the_start_is_named_and_the_gpu_not_tested(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, result = _run(tmp_path, [{"kind": "foreign-compute", "gpu": 1}])
    assert code == EXIT_NOT_RUN == 3
    assert (result.verdict, result.reason) == (Verdict.NOT_RUN, "GpuInUse")
    assert not _reasons(result) & BLAME
    burn = result.check("burn")
    assert burn is not None and burn.verdict is Verdict.NOT_RUN
    burned = {g.index for g in burn.gpus if "tflops" in g.metrics}
    assert burned == {0}  # the busy GPU was left out, its neighbour tested
    assert [(o.gpu, o.pid, o.when, o.name) for o in burn.occupants] == [
        (1, 5000001, "before", "python3 train.py (simulated)")
    ]
    table = capsys.readouterr().out
    assert "BUSY burn: GpuInUse: GPU 1 is in use by PID 5000001 (python3 train.py" in table
    assert "hint: the message names the GPU, the process" in table
    assert "NOT TESTED: GPU 1 is in use" in table


def test_memory_another_process_takes_during_the_burn_is_in_use_not_torchs_oom(
    tmp_path: Path,
) -> None:
    code, result = _run(tmp_path, [{"kind": "foreign-memory", "gpu": 0, "during": "burn"}])
    assert code == 3 and result.reason == "GpuInUse"
    burn = result.check("burn")
    assert burn is not None
    assert [f.reason for f in burn.findings] == ["GpuInUse"]
    message = burn.findings[0].message
    assert message.startswith("GPU 0 was used by PID 5000000 (python3 hold.py (simulated), 135.0")
    assert "set aside: CheckError" in message and "OutOfMemoryError" not in message
    bandwidth = result.check("bandwidth")
    assert bandwidth is not None and bandwidth.findings[0].message.endswith("left it out")


def test_a_process_sharing_the_gpu_mid_burn_slows_it_yet_the_gpu_is_not_blamed(
    tmp_path: Path,
) -> None:
    code, result = _run(tmp_path, [{"kind": "foreign-compute", "gpu": 1, "during": "burn"}])
    burn = result.check("burn")
    assert burn is not None
    figures = {g.index: g.metrics["tflops"] for g in burn.gpus}
    assert figures[1] < 0.5 * figures[0]  # the double's shared GPU is slow, as the H200 was
    assert code == 3 and not _reasons(result) & BLAME
    assert {g.index: g.verdict for g in burn.gpus} == {0: Verdict.PASSED, 1: Verdict.NOT_RUN}


def test_without_the_hosts_pids_every_candidate_is_named_and_none_by_a_guessed_name(
    tmp_path: Path,
) -> None:
    code, result = _run(
        tmp_path, [{"kind": "foreign-compute", "gpu": 1, "during": "burn"}], hostPid=False
    )
    assert code == 3
    burn = result.check("burn")
    assert burn is not None
    assert {o.pid for o in burn.occupants} >= {5000001}
    assert all(not o.exact and o.name is None for o in burn.occupants)
    assert "without the host's PID namespace (hostPID)" in burn.findings[0].message


def test_a_process_seen_before_the_agent_started_is_named_exactly_without_host_pids(
    tmp_path: Path,
) -> None:
    code, result = _run(tmp_path, [{"kind": "foreign-memory", "gpu": 1}], hostPid=False)
    assert code == 3
    burn = result.check("burn")
    assert burn is not None
    assert [(o.pid, o.exact) for o in burn.occupants] == [(5000001, True)]


def test_evidence_against_another_gpu_still_fails_the_node(tmp_path: Path) -> None:
    code, result = _run(
        tmp_path, [{"kind": "foreign-compute", "gpu": 1}, {"kind": "miscompare", "gpu": 0}]
    )
    assert code == 1
    assert (result.verdict, result.reason) == (Verdict.FAILED, "BurnMismatch")
    assert "GpuInUse" in _reasons(result)


def test_a_gpu_shared_during_the_all_reduce_sets_its_figure_aside(tmp_path: Path) -> None:
    code, result = _run(tmp_path, [{"kind": "foreign-compute", "gpu": 0, "during": "nccl"}])
    nccl = result.check("nccl")
    assert nccl is not None and nccl.verdict is Verdict.NOT_RUN
    assert [f.reason for f in nccl.findings] == ["GpuInUse"]
    assert "set aside: NcclLowBusbw" in nccl.message
    assert code == 3


def test_a_shared_gpus_low_figure_is_no_evidence_for_the_baseline_or_the_summary(
    tmp_path: Path,
) -> None:
    out = tmp_path / "result.json"
    shared = {"kind": "foreign-compute", "gpu": 1, "during": "burn"}
    simulate = json.dumps({"gpus": 2, "timeScale": 0.001, "faults": [shared]})
    # The shipped H200 baseline matches the simulated 2-GPU node; GPU 1's burn figure (~310
    # TFLOP/s beside the other process) is far below it.
    code = main(["run", "--backend", "simulated", "--simulate", simulate, "--json", str(out)])
    result = AgentResult.model_validate_json(out.read_text())
    assert result.baseline is not None and result.baseline.match == "exact"
    assert code == 3 and "BelowBaseline" not in _reasons(result)
    burn = result.check("burn")
    assert burn is not None
    figures = {g.index: g.metrics["tflops"] for g in burn.gpus}
    summary = build_summary(result)
    assert summary["burnTflops"] == round(figures[0], 3) and figures[1] < figures[0] / 2
