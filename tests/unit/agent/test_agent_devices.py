"""The devices the agent was given (by UUID) and MIG instances as units: the runner on the
simulated backend, the scaled expectations, and the NVML backend's MIG reading replayed from
recorded answers through a fake NVML module."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest

from gpuval_agent.backends.cuda import cuda_spelling
from gpuval_agent.backends.nvml import reader as nvml_backend
from gpuval_agent.backends.nvml.mig import mig_devices, parent_sm_count, profile_of
from gpuval_agent.backends.simulated.backend import SimulatedBackend, SimulationConfig
from gpuval_agent.devices import keep_given, parse_uuids
from gpuval_agent.errors import AgentError
from gpuval_agent.parts import expected_for, figures_for
from gpuval_agent.runner import run_checks
from gpuval_api.baseline.samples import node_key
from gpuval_api.checks import CheckName, ChecksConfig, Precision
from gpuval_api.machine import machine_view
from gpuval_api.mig import mig_layout, share_of
from gpuval_api.reasons import Reason, Severity
from gpuval_api.result import AgentResult, Environment, GpuInfo, MigInstance, Verdict
from gpuval_api.views import UnitView, figure_outliers
from gpuval_operator.run.facts import environment_fingerprint
from tests.unit.agent.test_agent_checks import Recorder

FULL = ChecksConfig.model_validate(
    {"burn": {"durationSeconds": 1}, "train": {"enabled": True}, "dcgm": {"enabled": True}}
)


def _run(simulation: dict[str, Any], config: ChecksConfig = FULL, **kwargs: Any) -> AgentResult:
    document = {"timeScale": 0.001} | simulation
    backend = SimulatedBackend(SimulationConfig.parse(json.dumps(document)))
    return run_checks(config, backend, Recorder(), sample_interval=0.01, **kwargs)


def _errors(result: AgentResult) -> list[tuple[str, Reason]]:
    return [
        (c.name, f.reason)
        for c in result.checks
        for f in c.findings
        if f.severity is Severity.ERROR
    ]


def test_a_published_gpu_the_node_does_not_show_is_named_by_its_uuid() -> None:
    uuids = [f"GPU-{i:08x}-dead-beef-0000-000000000000" for i in range(8)]
    result = _run(
        {"gpus": 8, "uuids": uuids, "faults": [{"kind": "missing-gpu"}]},
        ChecksConfig.model_validate({"burn": {"durationSeconds": 1}}),
        expected_gpus=8,
        devices=uuids,
    )

    assert result.verdict is Verdict.FAILED and result.reason is Reason.GPU_MISSING
    assert _errors(result) == [("driver", Reason.GPU_MISSING)]  # no GpuCountMismatch beside it
    driver = result.check("driver")
    assert driver is not None and uuids[7] in driver.findings[0].message
    assert [g.uuid for g in result.environment.gpus] == uuids[:7]


def test_only_the_given_devices_are_tested() -> None:
    uuids = [f"U{i}" for i in range(4)]
    result = _run(
        {"gpus": 4, "uuids": uuids},
        ChecksConfig.model_validate({"burn": {"durationSeconds": 1}}),
        devices=["U1", "U3"],
    )

    assert result.verdict is Verdict.PASSED
    burn = result.check("burn")
    assert burn is not None and [g.uuid for g in burn.gpus] == ["U1", "U3"]
    assert result.environment.gpu_count == 2


def test_keep_given_takes_a_mig_device_by_its_own_or_its_parents_uuid() -> None:
    def unit(index: int, uuid: str, parent: str | None) -> GpuInfo:
        mig = None if parent is None else MigInstance(profile="1g.18gb", parent_index=0)
        if mig is not None:
            mig.parent_uuid = parent
        return GpuInfo(index=index, uuid=uuid, mig=mig)

    env = Environment(
        gpus=[unit(0, "MIG-a", "GPU-p"), unit(1, "MIG-b", "GPU-p"), unit(2, "G", None)]
    )
    missing = keep_given(env, ["GPU-p", "GPU-gone"])

    assert [g.uuid for g in env.gpus] == ["MIG-a", "MIG-b"] and missing == ["GPU-gone"]
    assert parse_uuids(" GPU-a,,GPU-b,GPU-a ") == ["GPU-a", "GPU-b"]


def test_every_mig_instance_is_tested_as_a_unit_and_the_gpu_to_gpu_checks_say_why_not() -> None:
    result = _run({"gpus": 1, "mig": [{"gpu": 0, "profiles": ["1g.18gb"] * 7}]}, expected_gpus=7)

    assert result.verdict is Verdict.PASSED, result.message
    units = result.environment.gpus
    assert [(g.uuid, g.mig and g.mig.profile) for g in units] == [
        (f"MIG-sim-{result.environment.hostname}-0-{k}", "1g.18gb") for k in range(7)
    ]
    assert all(g.mig_mode for g in units)
    for name in (CheckName.NCCL, CheckName.TRAIN, CheckName.DCGM):
        check = result.check(name)
        assert check is not None and check.verdict is Verdict.SKIPPED, name
        assert check.reason is Reason.NOT_APPLICABLE and "MIG" in check.message
    burn, bandwidth = result.check("burn"), result.check("bandwidth")
    assert burn is not None and len(burn.gpus) == 7
    assert bandwidth is not None and not bandwidth.pairs
    assert any(f.reason is Reason.NOT_APPLICABLE for f in bandwidth.findings)


def test_a_1g_instance_is_held_to_its_share_and_a_slow_one_still_fails() -> None:
    mig = {"gpus": 1, "mig": [{"gpu": 0, "profiles": ["1g.18gb", "3g.71gb"]}]}
    slow = _run(mig | {"faults": [{"kind": "slow-gpu", "gpu": 1, "factor": 0.5}]})

    assert _run(mig).verdict is Verdict.PASSED
    assert slow.verdict is Verdict.FAILED
    assert {(c, r) for c, r in _errors(slow)} == {
        ("burn", Reason.LOW_THROUGHPUT),
        ("bandwidth", Reason.LOW_BANDWIDTH),
    }


def test_expected_figures_scale_with_the_instances_sms_and_memory() -> None:
    part = figures_for("NVIDIA H200")
    one = GpuInfo(index=0, name="NVIDIA H200", mig=MigInstance(profile="1g.18gb", parent_index=0))
    three = GpuInfo(index=1, name="NVIDIA H200", mig=MigInstance(profile="3g.71gb", parent_index=0))

    small, large = expected_for(part, one), expected_for(part, three)

    assert small.tflops[Precision.BF16] == pytest.approx(800.0 * 16 / 132)
    assert large.tflops[Precision.BF16] == pytest.approx(800.0 * 60 / 132)
    assert small.device_copy_gbps == pytest.approx(2081.0 / 8)
    assert large.device_copy_gbps == pytest.approx(2081.0 / 2)
    assert small.p2p_gbps is None and small.nccl_busbw_gbps is None
    assert expected_for(part, GpuInfo(index=0, name="NVIDIA H200")) is part
    # Measured SMs win over the table; an unknown model falls back on the profile's slices.
    assert share_of("NVIDIA H200", "1g.18gb", sms=20, parent_sms=132).compute == 20 / 132
    assert share_of("Some GPU", "2g.20gb").compute == pytest.approx(2 / 7)


def test_a_mig_layout_reads_the_same_whatever_the_order() -> None:
    assert mig_layout(["1g.18gb", "3g.71gb", "1g.18gb"]) == "1x3g.71gb+2x1g.18gb"
    assert mig_layout(["1g.18gb"] * 7) == "7x1g.18gb"
    assert mig_layout([]) == ""


def test_the_uniformity_fingerprint_and_the_baseline_key_name_the_mig_profile() -> None:
    seven = _run({"gpus": 1, "mig": [{"gpu": 0, "profiles": ["1g.18gb"] * 7}]})
    whole = _run({"gpus": 1})

    assert environment_fingerprint(seven.to_jsonable())["migLayout"] == "7x1g.18gb"
    assert "migLayout" not in environment_fingerprint(whole.to_jsonable())
    key, _ = node_key(seven.environment)
    assert key is not None and key.gpu_product == "NVIDIA H200 MIG 1g.18gb"
    whole_key, _ = node_key(whole.environment)
    assert whole_key is not None and whole_key.gpu_product == "NVIDIA H200"


def test_a_mig_config_that_does_not_fit_is_refused_naming_the_gpu() -> None:
    with pytest.raises(AgentError, match="compute slices"):
        SimulationConfig.parse(
            json.dumps({"gpus": 1, "mig": [{"gpu": 0, "profiles": ["4g.71gb"] * 2}]})
        )
    with pytest.raises(AgentError, match="mig names GPU 3"):
        SimulationConfig.parse(
            json.dumps({"gpus": 2, "mig": [{"gpu": 3, "profiles": ["1g.18gb"]}]})
        )


# -- the NVML backend's MIG reading, replayed --


class _NvmlError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value


class RecordedNvml:
    """NVML's answers recorded for one H200 with MIG on (two 1g.18gb and one 3g.71gb, MIG
    indices 0, 2 and 3 taken: index 1 answers NOT_FOUND, as a destroyed instance does) and one
    H200 with MIG off. Only what the backend asks is answered; anything else raises."""

    NVMLError = _NvmlError
    NVML_ERROR_NOT_FOUND = 6
    NVML_ERROR_NOT_SUPPORTED = 3
    NVML_ERROR_NO_PERMISSION = 4
    NVML_ERROR_FUNCTION_NOT_FOUND = 13
    NVML_DEVICE_MIG_ENABLE = 1
    NVML_GPU_INSTANCE_PROFILE_7_SLICE = 4
    MIG: ClassVar[dict[int, tuple[str, str, int, int, int, int]]] = {
        0: ("MIG-11111111-2222-3333-4444-555555555550", "1g.18gb", 16, 16384, 7, 0),
        2: ("MIG-11111111-2222-3333-4444-555555555552", "1g.18gb", 16, 16384, 8, 0),
        3: ("MIG-11111111-2222-3333-4444-555555555553", "3g.71gb", 60, 71424, 2, 0),
    }

    def nvmlDeviceGetMigMode(self, handle: str) -> tuple[int, int]:  # noqa: N802 (NVML's own names)
        return (1, 1) if handle == "gpu0" else (0, 0)

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: str) -> int:  # noqa: N802 (NVML's own names)
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: str, index: int) -> str:  # noqa: N802 (NVML's own names)
        if index not in self.MIG:
            raise _NvmlError(self.NVML_ERROR_NOT_FOUND)
        return f"{handle}/mig{index}"

    def _mig(self, handle: str) -> tuple[str, str, int, int, int, int]:
        return self.MIG[int(handle.rsplit("mig", 1)[1])]

    def nvmlDeviceGetUUID(self, handle: str) -> str:  # noqa: N802 (NVML's own names)
        return self._mig(handle)[0]

    def nvmlDeviceGetName(self, handle: str) -> bytes:  # noqa: N802 (NVML's own names)
        return f"NVIDIA H200 MIG {self._mig(handle)[1]}".encode()

    def nvmlDeviceGetAttributes(self, handle: str) -> SimpleNamespace:  # noqa: N802 (NVML's own names)
        _, profile, sms, memory, _, _ = self._mig(handle)
        slices = int(profile[0])
        return SimpleNamespace(
            multiprocessorCount=sms, gpuInstanceSliceCount=slices, memorySizeMB=memory
        )

    def nvmlDeviceGetMemoryInfo(self, handle: str) -> SimpleNamespace:  # noqa: N802 (NVML's own names)
        return SimpleNamespace(total=self._mig(handle)[3] << 20)

    def nvmlDeviceGetGpuInstanceId(self, handle: str) -> int:  # noqa: N802 (NVML's own names)
        return self._mig(handle)[4]

    def nvmlDeviceGetComputeInstanceId(self, handle: str) -> int:  # noqa: N802 (NVML's own names)
        return self._mig(handle)[5]

    def nvmlDeviceGetGpuInstanceProfileInfo(self, handle: str, profile: int) -> SimpleNamespace:  # noqa: N802 (NVML's own names)
        assert profile == self.NVML_GPU_INSTANCE_PROFILE_7_SLICE
        return SimpleNamespace(multiprocessorCount=132)


def test_the_nvml_backend_reads_each_mig_device_of_a_gpu_with_mig_on() -> None:
    nv = RecordedNvml()

    found = mig_devices(nv, 0, "gpu0")

    assert [(d.uuid[-1], d.profile, d.sm_count, d.gpu_instance_id) for d in found] == [
        ("0", "1g.18gb", 16, 7),
        ("2", "1g.18gb", 16, 8),
        ("3", "3g.71gb", 60, 2),
    ]
    assert found[2].memory_total_bytes == 71424 << 20
    assert mig_devices(nv, 1, "gpu1") == []  # MIG off: the GPU is one unit
    assert parent_sm_count(nv, "gpu0") == 132
    assert (
        profile_of("NVIDIA H200", SimpleNamespace(gpuInstanceSliceCount=2, memorySizeMB=33280))
        == "2g.32gb"
    )


def test_the_nvml_backend_makes_a_unit_of_each_mig_device_in_its_gpus_place(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(nvml_backend, "pynvml", RecordedNvml())

    units = nvml_backend.units_of(["gpu0", "gpu1"])
    parent = GpuInfo(
        index=0, name="NVIDIA H200", uuid="GPU-parent", memory_total_bytes=143771 << 20
    )
    info = nvml_backend.mig_unit_info(parent, 2, units[2].mig, 132)  # type: ignore[arg-type]

    assert [(u.index, u.parent_index, u.mig and u.mig.profile) for u in units] == [
        (0, 0, "1g.18gb"),
        (1, 0, "1g.18gb"),
        (2, 0, "3g.71gb"),
        (3, 1, None),
    ]
    assert units[3].handle == "gpu1" and units[0].handle == "gpu0/mig0"
    assert info.uuid.startswith("MIG-") and info.name == "NVIDIA H200" and info.mig is not None
    assert (info.mig.parent_uuid, info.mig.sm_count, info.mig.parent_sm_count) == (
        "GPU-parent",
        60,
        132,
    )
    assert expected_for(figures_for("NVIDIA H200"), info).tflops[Precision.BF16] == pytest.approx(
        800 * 60 / 132
    )


def test_a_mig_devices_nvml_uuid_is_looked_up_as_cuda_spells_it() -> None:
    assert cuda_spelling("MIG-11111111-2222-3333-4444-555555555550") == (
        "GPU-11111111-2222-3333-4444-555555555550"
    )
    assert cuda_spelling("GPU-abc") == "GPU-abc"
    assert cuda_spelling("MIG-GPU-abc/1/0") == "MIG-GPU-abc/1/0"  # the pre-R470 form: unmapped


def test_absolute_thresholds_written_for_a_whole_gpu_hold_a_mig_instance_to_its_share() -> None:
    # burn 640 and device copy 1600 suit a whole H200 (776 TFLOP/s bf16, 2,019 GB/s here).
    config = FULL.model_validate(
        FULL.model_dump(by_alias=True)
        | {
            "burn": {"durationSeconds": 1, "minTflops": {"absolute": 640}},
            "bandwidth": {"minDeviceCopyGBps": {"absolute": 1600}},
        }
    )
    mig = {"gpus": 1, "mig": [{"gpu": 0, "profiles": ["1g.18gb"] * 7}]}
    slow = _run(mig | {"faults": [{"kind": "slow-gpu", "gpu": 2, "factor": 0.5}]}, config)

    # Before: every instance failed both (a seventh of a GPU against a whole GPU's minimum).
    assert _run(mig, config).verdict is Verdict.PASSED
    assert _run({"gpus": 1}, config).verdict is Verdict.PASSED
    burn = next(c for c in slow.checks if c.name == "burn")
    (low,) = [f for f in burn.findings if f.reason is Reason.LOW_THROUGHPUT]
    assert low.gpu == 2
    assert low.message.startswith("MIG 1g.18gb instance 2 of GPU 0: bf16 burn reached ")
    assert low.message.endswith(
        "(burn.minTflops; its absolute 640 is a whole GPU's, held at this MIG instance's 0.121)"
    )


def test_a_node_of_whole_gpus_and_mig_instances_counts_and_names_each_kind() -> None:
    mixed = {"gpus": 8, "mig": [{"gpu": 7, "profiles": ["1g.18gb"] * 7}]}
    slow = _run(mixed | {"faults": [{"kind": "slow-gpu", "gpu": 9, "factor": 0.5}]})
    one = _run({"gpus": 1, "mig": [{"gpu": 0, "profiles": ["1g.18gb"] * 7}]})

    messages = {c.name: c.message for c in _run(mixed).checks}
    # Before: "14 MIG instances", and an instance on a 1-GPU node was "GPU 6".
    assert messages["driver"].startswith("7 GPUs and 7 MIG instances, driver ")
    assert messages["health"] == "7 GPUs and 7 MIG instances healthy"
    assert messages["burn"].startswith("7 GPUs and 7 MIG instances verified; ")
    assert {c.name: c.message for c in one.checks}["burn"].startswith("7 MIG instances verified")
    burn = next(c for c in slow.checks if c.name == "burn")
    (low,) = [f for f in burn.findings if f.reason is Reason.LOW_THROUGHPUT]
    assert low.message.startswith("MIG 1g.18gb instance 9 of GPU 7: bf16 burn reached ")
    # The memory test names an instance the same way (it said "GPU 9").
    memory_too = ChecksConfig.model_validate(
        {"burn": {"durationSeconds": 1}, "memory": {"enabled": True}}
    )
    flipped = _run(mixed | {"faults": [{"kind": "memory-flip", "gpu": 9}]}, memory_too)
    memory = next(c for c in flipped.checks if c.name == "memory")
    (bad,) = [f for f in memory.findings if f.reason is Reason.MEMORY_MISCOMPARE]
    assert bad.message.startswith("MIG 1g.18gb instance 9 of GPU 7: pattern ")
    assert {c.name: c.message for c in _run(mixed, memory_too).checks}["memory"].startswith(
        "7 GPUs and 7 MIG instances: "
    )


def test_outliers_compare_mig_instances_with_instances_and_whole_gpus_with_whole_gpus() -> None:
    mixed = {"gpus": 8, "mig": [{"gpu": 7, "profiles": ["1g.18gb"] * 7}]}
    slow = _run(mixed | {"faults": [{"kind": "slow-gpu", "gpu": 9, "factor": 0.5}]})

    # Before: every instance was an outlier against the whole GPUs' median ("12 % of median").
    assert machine_view(_run(mixed)).outliers == []
    found = {(o.unit, o.figure.key) for o in machine_view(slow).outliers}
    assert ("MIG 1g.18gb instance 9 of GPU 7", "burnTflops") in found
    assert {unit for unit, _ in found} == {"MIG 1g.18gb instance 9 of GPU 7"}
    # A fleet: nodes of one MIG layout with each other, whole-GPU nodes with each other.
    whole = [UnitView(f"w{i}", "Passed", figures={"burnTflops": 776.0}) for i in range(3)]
    sevenths = [
        UnitView(f"m{i}", "Passed", figures={"burnTflops": 94.0 * (0.5 if i == 2 else 1)}, kind=k)
        for i, k in enumerate(["7x1g.18gb"] * 3)
    ]
    assert [(o.unit, round(o.ratio, 2)) for o in figure_outliers([*whole, *sevenths])] == [
        ("m2", 0.5)
    ]
