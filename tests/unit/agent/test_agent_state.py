"""The state check on recorded sysfs trees and NVML answers (tests/fixtures/state), and on the
simulated backend's injected faults: each faulty case gives its named reason and the catalogue's
hint; what a node does not have is said by name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuval_agent.backends.simulated.backend import SimulatedBackend, SimulationConfig
from gpuval_agent.record import RunRecord
from gpuval_agent.runner import run_checks
from gpuval_agent.state import kernellog, sysfs
from gpuval_agent.state.counters import growth
from gpuval_agent.state.xids import XidAction, lookup
from gpuval_api.checks import CheckName, ChecksConfig, parse_checks
from gpuval_api.reasons import REASONS, Reason, Severity
from gpuval_api.result import AgentResult, CheckResult, Finding, Metric, Verdict
from tests.support.statetree import RecordedBackend, load
from tests.unit.agent.test_agent_checks import Recorder

STATE_ONLY = ChecksConfig().only([CheckName.STATE])
STATE_AND_BURN = parse_checks('{"burn": {"durationSeconds": 1}}').only(
    [CheckName.STATE, CheckName.BURN]
)


def _state(result: AgentResult) -> CheckResult:
    state = result.check(CheckName.STATE)
    assert state is not None
    return state


def _recorded(
    name: str, tmp_path: Path, config: ChecksConfig = STATE_ONLY, record: RunRecord | None = None
) -> CheckResult:
    backend = RecordedBackend(load(name, tmp_path))
    try:
        result = run_checks(config, backend, Recorder(), sample_interval=0.01, record=record)  # type: ignore[arg-type]
    finally:
        backend.close()
    return _state(result)


def _finding(check: CheckResult, reason: Reason) -> Finding:
    found = [f for f in check.findings if f.reason is reason]
    assert found, f"no {reason} among {[(f.reason, f.message) for f in check.findings]}"
    return found[0]


def _simulated(faults: list[dict[str, object]], gpus: int = 4) -> AgentResult:
    document = {"gpus": gpus, "timeScale": 0.001, "faults": faults}
    backend = SimulatedBackend(SimulationConfig.parse(json.dumps(document)))
    try:
        return run_checks(ChecksConfig(), backend, Recorder(), sample_interval=0.01)  # type: ignore[arg-type]
    finally:
        backend.close()


def test_a_healthy_hgx_recording_passes_and_reads_every_gpu_and_port(tmp_path: Path) -> None:
    state = _recorded("hgx-healthy", tmp_path)
    assert state.verdict is Verdict.PASSED, state.findings
    assert state.findings == []
    assert state.metrics["ibPorts"] == 2 and state.metrics["nvswitches"] == 4
    assert [g.metrics["nvlinksActive"] for g in state.gpus] == [18, 18]
    assert "kernel log: /dev/kmsg" in state.message
    assert state.not_read == ["GPUs 0-1: retired pages: not supported"]


def test_a_downtrained_pcie_link_of_a_gpu_and_of_a_nic_is_named_with_its_hint(
    tmp_path: Path,
) -> None:
    state = _recorded("hgx-downtrained", tmp_path)
    assert state.verdict is Verdict.FAILED and state.reason is Reason.PCIE_LINK_DOWNTRAINED
    messages = [f.message for f in state.findings if f.reason is Reason.PCIE_LINK_DOWNTRAINED]
    assert "GPU 1: PCIe link x8 of x16 (gen 5 of 5)" in messages
    assert any(m.startswith("network adapter mlx5_1 (0000:9b:00.0): PCIe link") for m in messages)
    assert state.hint == REASONS[Reason.PCIE_LINK_DOWNTRAINED].hint
    assert [g.verdict for g in state.gpus] == [Verdict.PASSED, Verdict.FAILED]


def test_a_port_that_went_down_three_times_is_flapping(tmp_path: Path) -> None:
    state = _recorded("hgx-port-flapping", tmp_path)
    finding = _finding(state, Reason.IB_LINK_FLAPPING)
    assert finding.severity is Severity.ERROR
    assert finding.message.startswith("mlx5_0 port 1: link went down 3 times")
    assert finding.hint == REASONS[Reason.IB_LINK_FLAPPING].hint
    assert state.verdict is Verdict.FAILED


def test_a_pending_row_remap_fails_its_gpu(tmp_path: Path) -> None:
    state = _recorded("hgx-remap-pending", tmp_path)
    finding = _finding(state, Reason.ROW_REMAP_PENDING)
    assert finding.gpu == 0 and finding.severity is Severity.ERROR
    assert finding.hint == REASONS[Reason.ROW_REMAP_PENDING].hint
    assert "1 rows remapped for uncorrectable errors" in finding.message
    assert state.gpus[0].verdict is Verdict.FAILED and state.gpus[1].verdict is Verdict.PASSED


def test_nvlink_errors_that_grew_during_the_burn_are_named_with_the_burn(tmp_path: Path) -> None:
    record = RunRecord()
    state = _recorded("hgx-nvlink-growth", tmp_path, STATE_AND_BURN, record)
    grew = [f for f in state.findings if f.reason is Reason.ERROR_COUNTERS_GREW]
    assert sorted(f.message for f in grew) == [
        "GPU 1 NVLink 3: crcFlit errors +1,200 during burn (0 -> 1,200)",
        "GPU 1 NVLink 3: replay errors +14 during burn (0 -> 14)",
    ]
    assert all(f.gpu == 1 and f.hint == REASONS[Reason.ERROR_COUNTERS_GREW].hint for f in grew)
    assert state.verdict is Verdict.FAILED and state.reason is Reason.ERROR_COUNTERS_GREW
    assert state.metrics["afterReadings"] == 1
    assert [label for label, _ in record.counters] == ["before the load checks", "after burn"]


def test_xids_since_boot_are_mapped_to_nvidias_action_per_gpu(tmp_path: Path) -> None:
    state = _recorded("hgx-kernel-xids", tmp_path)
    reboot = _finding(state, Reason.KERNEL_XID_REBOOT)
    assert reboot.gpu == 1 and reboot.severity is Severity.ERROR
    assert "XID 79 (ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS)" in reboot.message
    restart = _finding(state, Reason.KERNEL_XID_RESTART_APP)
    assert restart.gpu == 0 and restart.severity is Severity.WARNING
    # XID 63 (a row marked for remapping) is IGNORE in NVIDIA's catalogue: no finding.
    assert not any("XID 63" in f.message for f in state.findings)
    assert state.metrics["kernelXids"] == 3


def test_ignored_xids_are_not_reported(tmp_path: Path) -> None:
    config = parse_checks('{"state": {"ignoreXids": [79, 13]}}').only([CheckName.STATE])
    state = _recorded("hgx-kernel-xids", tmp_path, config)
    assert state.verdict is Verdict.PASSED and state.findings == []


def test_an_unreadable_kernel_log_is_said_by_name_never_clean(tmp_path: Path) -> None:
    recording = load("hgx-healthy", tmp_path)
    (recording.root / "dev/kmsg").unlink()
    backend = RecordedBackend(recording)
    result = run_checks(STATE_ONLY, backend, Recorder(), sample_interval=0.01)  # type: ignore[arg-type]
    backend.close()
    state = _state(result)
    finding = _finding(state, Reason.KERNEL_LOG_UNREADABLE)
    assert finding.severity is Severity.WARNING and "dev/kmsg" in finding.message
    assert "kernel log: not readable" in state.message
    assert any(line.startswith("kernel log: ") for line in state.not_read)


def test_what_a_one_gpu_vm_lacks_is_named_and_is_no_failure(tmp_path: Path) -> None:
    state = _recorded("vm-one-gpu", tmp_path)
    assert state.verdict is Verdict.PASSED, state.findings
    not_read = "\n".join(state.not_read)
    assert "InfiniBand/RoCE: no /sys/class/infiniband (no RDMA devices)" in not_read
    assert "NVSwitch: none on the PCI bus" in not_read
    assert "GPU 0: NVLink: not supported on any of 18 links" in not_read
    assert "no aer_dev_correctable, aer_dev_nonfatal, aer_dev_fatal in sysfs" in not_read


@pytest.mark.parametrize(
    ("action", "severity"), [("Warn", Severity.WARNING), ("Fail", Severity.ERROR)]
)
def test_each_state_reason_is_configurable_warn_or_fail(
    tmp_path: Path, action: str, severity: Severity
) -> None:
    config = parse_checks(json.dumps({"state": {"actions": {"IbLinkFlapping": action}}}))
    state = _recorded("hgx-port-flapping", tmp_path, config.only([CheckName.STATE]))
    assert _finding(state, Reason.IB_LINK_FLAPPING).severity is severity
    assert state.verdict is (Verdict.FAILED if severity is Severity.ERROR else Verdict.PASSED)


def test_an_ignored_reason_is_not_reported(tmp_path: Path) -> None:
    config = parse_checks('{"state": {"actions": {"IbLinkFlapping": "Ignore"}}}')
    state = _recorded("hgx-port-flapping", tmp_path, config.only([CheckName.STATE]))
    assert state.findings == [] and state.verdict is Verdict.PASSED


def test_a_port_below_the_expected_rate_is_named(tmp_path: Path) -> None:
    config = parse_checks('{"state": {"network": {"expectedRateGbitPerSecond": 800}}}')
    state = _recorded("hgx-healthy", tmp_path, config.only([CheckName.STATE]))
    finding = _finding(state, Reason.IB_PORT_RATE_LOW)
    assert finding.message.startswith("mlx5_0 port 1: rate 400 Gb/sec (4X NDR), expected 800")


def test_the_configured_nvlink_count_is_the_expectation(tmp_path: Path) -> None:
    config = parse_checks('{"state": {"expectedNvlinks": 4}}')
    assert _recorded("vm-one-gpu", tmp_path, config.only([CheckName.STATE])).reason is (
        Reason.NVLINK_DOWN
    )


@pytest.mark.parametrize(
    ("fault", "reason", "message"),
    [
        ({"kind": "pcie-degraded", "gpu": 2}, Reason.PCIE_LINK_DOWNTRAINED, "GPU 2: PCIe link x8"),
        (
            {"kind": "ib-link-flapping", "gpu": 1},
            Reason.IB_LINK_FLAPPING,
            "mlx5_1 port 1: link went down 3 times",
        ),
        ({"kind": "row-remap-pending", "gpu": 2}, Reason.ROW_REMAP_PENDING, "GPU 2: a row remap"),
        (
            {"kind": "nvlink-errors-grow", "gpu": 3, "link": 3},
            Reason.ERROR_COUNTERS_GREW,
            "GPU 3 NVLink 3: crcFlit errors +1,200 during burn",
        ),
        ({"kind": "nvlink-down", "gpu": 1, "link": 5}, Reason.NVLINK_DOWN, "link 5 down"),
        ({"kind": "ib-port-down", "gpu": 0}, Reason.IB_PORT_DOWN, "mlx5_0 port 1: state DOWN"),
        ({"kind": "kernel-xid", "gpu": 2, "xid": 79}, Reason.KERNEL_XID_REBOOT, "GPU 2: XID 79"),
        (
            {"kind": "ib-errors-grow", "gpu": 2},
            Reason.ERROR_COUNTERS_GREW,
            "mlx5_2 port 1: symbol_error +40 during burn",
        ),
        ({"kind": "ecc-uncorrectable", "gpu": 1}, Reason.ECC_UNCORRECTABLE, "(DRAM 2)"),
    ],
)
def test_the_simulated_backend_injects_each_state_fault(
    fault: dict[str, object], reason: Reason, message: str
) -> None:
    result = _simulated([fault])
    state = _state(result)
    finding = _finding(state, reason)
    assert message in finding.message
    assert finding.hint == REASONS[reason].hint
    assert result.verdict is Verdict.FAILED


def test_a_healthy_simulated_node_passes_its_state_and_says_what_it_lacks() -> None:
    one = _state(_simulated([], gpus=1))
    assert one.verdict is Verdict.PASSED
    assert "InfiniBand/RoCE: no /sys/class/infiniband (no RDMA devices)" in one.not_read
    eight = _state(_simulated([], gpus=8))
    assert eight.verdict is Verdict.PASSED and eight.metrics["ibPorts"] == 8
    assert eight.metrics["afterReadings"] == 3  # after burn, bandwidth and NCCL


def test_nvidias_catalogue_gives_each_xid_its_action() -> None:
    assert lookup(79)[1] is XidAction.REBOOT
    assert lookup(48)[1] is XidAction.RESET_GPU
    assert lookup(13)[1] is XidAction.RESTART_APP
    assert lookup(63)[1] is XidAction.IGNORE
    assert lookup(999) == ("not in gpuval's catalogue", XidAction.CONTACT_SUPPORT)


def test_xid_lines_are_found_in_kmsg_and_dmesg_forms() -> None:
    lines = [
        "[ 8640.123] NVRM: Xid (PCI:0000:3b:00): 48, pid=1, name=x, DBE (0x1) has been detected",
        "NVRM: Xid (PCI:0000:18:00): 94, pid=4242, Contained: SM (0x1).",
        "NVRM: loading NVIDIA UNIX x86_64 Kernel Module",
    ]
    found = kernellog.parse_xids(lines)
    assert [(x.xid, x.pci, x.line) for x in found] == [(48, "0000:3b:00", 0), (94, "0000:18:00", 1)]
    assert kernellog.gpu_of(found[1], {0: "0000:18:00.0", 1: "0000:3b:00.0"}) == 0


def test_nvml_bus_ids_are_spelled_as_sysfs_does() -> None:
    assert sysfs.pci_address("00000000:9A:00.0") == "0000:9a:00.0"


def test_only_counters_that_grew_are_named() -> None:
    before = {"a": 1, "b": 5}
    assert growth(before, {"a": 1, "b": 7, "c": 2}) == {"b": 2, "c": 2}
    assert growth(before, {"a": 0, "b": 5}) == {}


def test_the_h200_machine_recorded_this_session_replays_as_it_read(tmp_path: Path) -> None:
    # benchmarks/state_probe.py on the 1-GPU H200 (results in benchmarks/results/h200-state-*):
    # its NVML answers and sysfs files; its kernel log was not recorded.
    state = _recorded("h200-vm-recorded", tmp_path)
    assert state.verdict is Verdict.PASSED
    assert [f.reason for f in state.findings] == [Reason.KERNEL_LOG_UNREADABLE]
    assert state.gpus[0].metrics["pcieWidth"] == 16 and state.gpus[0].metrics["pcieGeneration"] == 5
    not_read = "\n".join(state.not_read)
    for lacking in (
        "GPU 0: NVLink: not supported on any of 36 links",
        "GPU 0: retired pages: not supported",
        "InfiniBand/RoCE: no /sys/class/infiniband",
        "PCIe AER of 0000:00:06.0: no aer_dev_correctable, aer_dev_nonfatal, aer_dev_fatal",
        "NVSwitch: none on the PCI bus",
    ):
        assert lacking in not_read


def test_xids_older_than_the_configured_age_no_longer_count(tmp_path: Path) -> None:
    # The recording's XID 79 was logged 86.4 s after boot, its XID 13 at 90.0 s; the machine is
    # up 91 s: only the XID 13 is younger than 2 s.
    recording = load("hgx-kernel-xids", tmp_path)
    recording.write("proc/uptime", "91.00 180.00\n")
    config = parse_checks('{"state": {"xidMaxAgeSeconds": 2}}').only([CheckName.STATE])
    backend = RecordedBackend(recording)
    result = run_checks(config, backend, Recorder(), sample_interval=0.01)  # type: ignore[arg-type]
    backend.close()
    state = _state(result)
    assert [f.reason for f in state.findings] == [Reason.KERNEL_XID_RESTART_APP]
    assert "in the kernel log of the last 2 s (state.xidMaxAgeSeconds)" in state.findings[0].message


def test_an_xid_the_burn_saw_heads_the_report_and_the_kernel_log_growth_backs_it() -> None:
    # The driver's XID event during the burn is the diagnosis; the state check's re-read finds
    # the same XID's line new in the kernel log (a counter that grew under the burn).
    result = _simulated([{"kind": "xid", "gpu": 0}], gpus=1)

    assert result.verdict is Verdict.FAILED and result.reason is Reason.XID_ERROR
    state = _state(result)
    assert state.reason is Reason.ERROR_COUNTERS_GREW
    assert result.message.startswith("burn: ") and "state: " in result.message


def test_the_state_check_counts_links_down_and_counters_grown_per_load_check() -> None:
    faults: list[dict[str, object]] = [
        {"kind": "nvlink-down", "gpu": 1, "link": 5},
        {"kind": "ib-port-down", "gpu": 0},
        {"kind": "nvlink-errors-grow", "gpu": 3, "link": 3},
        {"kind": "ib-errors-grow", "gpu": 2},
    ]
    metrics = _state(_simulated(faults)).metrics
    assert (metrics[Metric.NVLINKS_DOWN], metrics[Metric.IB_PORTS_DOWN]) == (1, 1)
    grown = {k: v for k, v in metrics.items() if k.startswith(f"{Metric.COUNTERS_GROWN}.")}
    assert grown == {"countersGrown.burn": 2, "countersGrown.bandwidth": 0, "countersGrown.nccl": 0}
    healthy = _state(_simulated([])).metrics
    assert (healthy[Metric.NVLINKS_DOWN], healthy[Metric.IB_PORTS_DOWN]) == (0, 0)
