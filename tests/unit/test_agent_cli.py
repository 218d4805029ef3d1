"""`gpuval-agent run` with the simulated backend: exit codes, the JSON document, clean errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuval_agent.cli import main
from gpuval_api.result import AgentResult, Verdict

HEALTHY = '{"gpus": 2, "timeScale": 0.001}'


def test_a_healthy_node_exits_zero_and_writes_a_valid_result(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "result.json"
    code = main(
        ["run", "--backend", "simulated", "--simulate", HEALTHY, "--quiet", "--json", str(out)]
    )
    assert code == 0
    result = AgentResult.model_validate_json(out.read_text())
    assert result.verdict is Verdict.PASSED and result.backend == "simulated"
    table = capsys.readouterr().out
    assert "PASSED: 2 GPUs passed state, driver, health, burn, bandwidth, nccl" in table


def test_a_failing_check_exits_one_and_prints_reason_and_hint(
    capsys: pytest.CaptureFixture[str],
) -> None:
    simulate = '{"gpus": 2, "timeScale": 0.001, "faults": [{"kind": "nan", "gpu": 1}]}'
    code = main(["run", "--backend", "simulated", "--simulate", simulate, "--quiet"])
    assert code == 1
    table = capsys.readouterr().out
    assert "FAIL burn: BurnNaN: GPU 1" in table
    assert "hint: the GPU computes wrong results" in table


def test_flags_set_the_checks_and_their_parameters(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    code = main(
        [
            "run",
            "--backend",
            "simulated",
            "--simulate",
            HEALTHY,
            "--quiet",
            "--checks",
            "burn,nccl",
            "--duration",
            "7",
            "--precisions",
            "bf16,fp64",
            "--nccl-max-size",
            "64M",
            "--json",
            str(out),
        ]
    )
    assert code == 0
    result = json.loads(out.read_text())
    assert [c["name"] for c in result["checks"]] == ["burn", "nccl"]
    assert result["checksConfig"]["burn"]["durationSeconds"] == 7
    assert result["checksConfig"]["burn"]["precisions"] == ["bf16", "fp64"]
    assert result["checksConfig"]["nccl"]["maxBytes"] == 64 << 20


def test_no_driver_is_a_clear_message_without_a_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(
        [
            "run",
            "--backend",
            "simulated",
            "--quiet",
            "--simulate",
            '{"faults": [{"kind": "no-driver"}]}',
        ]
    )
    captured = capsys.readouterr()
    assert code == 1
    assert "DriverNotLoaded: NVML: NVML Shared Library Not Found" in captured.out
    assert "lsmod | grep nvidia" in captured.out
    assert "Traceback" not in captured.out + captured.err


def test_an_invalid_value_names_the_field_and_the_value(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", "--backend", "simulated", "--simulate", HEALTHY, "--duration", "-5"])
    err = capsys.readouterr().err
    assert code == 2
    assert "burn.durationSeconds" in err and "-5" in err


def test_an_invalid_simulation_config_names_the_field(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", "--backend", "simulated", "--simulate", '{"faults": [{"kind": "fire"}]}'])
    err = capsys.readouterr().err
    assert code == 2
    assert "faults.0.kind" in err and "fire" in err


def test_an_unknown_check_is_rejected_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["run", "--checks", "burn,smoke"])
    assert caught.value.code == 2
    assert "'smoke' is not a check" in capsys.readouterr().err


def test_the_cluster_mode_outside_a_pod_says_why(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GPUVAL_REPORT_NAME", "run-1-node-a")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert main(["cluster"]) == 2
    assert "KUBERNETES_SERVICE_HOST is not set" in capsys.readouterr().err
