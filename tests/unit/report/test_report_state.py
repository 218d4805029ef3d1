"""The report's hardware-state section without a browser: a machine's state findings on their GPU
or on the host, with hints; what was not read, once; a fleet's nodes the same way."""

from __future__ import annotations

import json
from html import escape

from gpuval_agent.backends.simulated.backend import SimulatedBackend, SimulationConfig
from gpuval_agent.runner import run_checks
from gpuval_api.checks import CheckName, ChecksConfig
from gpuval_api.machine import machine_view
from gpuval_api.reasons import REASONS, Reason
from gpuval_api.result import AgentResult
from gpuval_api.stateview import not_read_by_what
from gpuval_report.state import state_section
from tests.unit.agent.test_agent_checks import Recorder


def _result(gpus: int, faults: list[dict[str, object]]) -> AgentResult:
    document = {"gpus": gpus, "timeScale": 0.001, "faults": faults}
    backend = SimulatedBackend(SimulationConfig.parse(json.dumps(document)))
    try:
        config = ChecksConfig().only([CheckName.STATE])
        return run_checks(config, backend, Recorder(), sample_interval=0.01)  # type: ignore[arg-type]
    finally:
        backend.close()


def test_a_machines_state_findings_sit_on_their_gpu_or_the_host_with_hints() -> None:
    result = _result(
        4, [{"kind": "row-remap-pending", "gpu": 2}, {"kind": "ib-port-down", "gpu": 1}]
    )
    view = machine_view(result)
    units = {(line.unit, line.reason) for line in view.state}
    host = result.environment.hostname
    assert units == {("GPU 2", "RowRemapPending"), (host, "IbPortDown")}
    page = state_section(view)
    assert "<h2>Hardware state</h2>" in page
    assert escape(REASONS[Reason.IB_PORT_DOWN].hint) in page
    assert "mlx5_1 port 1: state DOWN" in page


def test_what_was_not_read_is_listed_once_with_its_units() -> None:
    view = machine_view(_result(1, []))
    assert view.state == ()
    page = state_section(view)
    assert "The state check found nothing" in page
    assert "InfiniBand/RoCE: no /sys/class/infiniband (no RDMA devices)" in page
    rows = not_read_by_what([("a", ("x", "y")), ("b", ("x",))])
    assert rows == [("x", ("a", "b")), ("y", ("a",))]


def test_a_view_without_a_state_check_has_no_section() -> None:
    result = _result(2, [])
    result.checks = []
    assert state_section(machine_view(result)) == ""
