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


def test_the_full_profile_runs_every_check_but_dcgm_and_prints_the_training_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "result.json"
    simulate = '{"gpus": 2, "timeScale": 0.0005}'
    args = ["run", "--backend", "simulated", "--simulate", simulate, "--profile", "full"]
    code = main([*args, "--json", str(out)])
    assert code == 0
    result = AgentResult.model_validate_json(out.read_text())
    assert [c.name for c in result.checks][-2:] == ["nccl", "train"]
    assert "memory" in [c.name for c in result.checks]
    assert result.checks_config.profile == "full"
    captured = capsys.readouterr()
    assert "gpuval: train: step 65/65, 153,260 tok/s, loss " in captured.err
    assert "train      Passed" in captured.out


def test_checks_train_alone_runs_the_training_step_and_a_profile_with_a_config_file_merges(
    tmp_path: Path,
) -> None:
    config = tmp_path / "checks.json"
    config.write_text('{"train": {"steps": 7, "warmupSteps": 1}, "memory": {"enabled": false}}')
    out = tmp_path / "result.json"
    base = ["run", "--backend", "simulated", "--simulate", HEALTHY, "--quiet", "--json", str(out)]
    assert main([*base, "--checks", "train", "--config", str(config)]) == 0
    result = AgentResult.model_validate_json(out.read_text())
    assert [c.name for c in result.checks] == ["train"]
    train = result.check("train")
    assert train is not None and train.training is not None and len(train.training.losses) == 8
    assert main([*base, "--profile", "full", "--config", str(config)]) == 0
    names = [c.name for c in AgentResult.model_validate_json(out.read_text()).checks]
    assert "train" in names and "memory" not in names


def test_a_bad_profile_is_refused_naming_the_choices(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["run", "--backend", "simulated", "--profile", "fast"])
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert "--profile" in error and "'fast'" in error and "full" in error
