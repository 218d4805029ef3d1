"""One machine's result (`gpuval-agent run`) as a FleetView whose units are its GPUs, so
`gpuval-agent run --html` draws the same page as `kubectl gpuval report`. Pure."""

from __future__ import annotations

from dataclasses import replace

from gpuval_api import figureread, figures
from gpuval_api.baseline import bands
from gpuval_api.checks import CheckName
from gpuval_api.mig import unit_name
from gpuval_api.reasons import Severity
from gpuval_api.result import AgentResult, Finding
from gpuval_api.stateview import MAX_LINES_PER_UNIT, not_read, not_read_by_what, state_lines
from gpuval_api.views import (
    FAILED,
    PASSED,
    FailureView,
    FleetView,
    UnitView,
    distinct,
    nccl_curve,
)


def _gpu_environment(result: AgentResult) -> dict[int, dict[str, str]]:
    out: dict[int, dict[str, str]] = {}
    for gpu in result.environment.gpus:
        link = gpu.pcie
        raw: dict[str, object] = {
            "gpuProduct": gpu.name,
            "vbios": gpu.vbios,
            "pcieLink": (
                f"gen{link.current_gen}/{link.max_gen} x{link.current_width}/{link.max_width}"
                if link.current_gen is not None
                else None
            ),
            "eccEnabled": distinct([gpu.ecc_enabled]),
            "persistenceMode": distinct([gpu.persistence_mode]),
            "migMode": distinct([gpu.mig_mode]),
            "powerLimitWatts": gpu.power_limit_watts,
        }
        out[gpu.index] = {k: str(v) for k, v in raw.items() if v is not None}
    return out


def _gpu_figures(result: AgentResult) -> dict[int, dict[str, float]]:
    """Each GPU's value of every page figure of the registry measured per GPU (a peer pair
    counts for its source GPU)."""
    found: dict[int, dict[str, float]] = {}
    for figure in figures.page_figures():
        for gpu, value in figureread.gpu_values(figure, result).items():
            found.setdefault(gpu, {})[figure.key] = value
    return found


def _unit_names(result: AgentResult) -> dict[int, str]:
    """Each unit's name ('GPU 3', 'MIG 1g.18gb instance 6 of GPU 0': gpuval_api.mig.unit_name)."""
    return {
        g.index: unit_name(g.index, g.mig.profile, g.mig.parent_index)
        if g.mig is not None
        else unit_name(g.index)
        for g in result.environment.gpus
    }


def _machine_failures(result: AgentResult, host: str) -> list[FailureView]:
    names = _unit_names(result)
    return [
        FailureView(
            names.get(f.gpu, unit_name(f.gpu)) if f.gpu is not None else host,
            check.name,
            str(f.reason),
            " ".join(f.message.split()),
            f.hint,
            f.gpu,
        )
        for check in result.checks
        for f in check.findings
        if f.severity is Severity.ERROR
    ]


def machine_view(result: AgentResult) -> FleetView:
    """One machine's result (`gpuval-agent run`) as a view whose units are its GPUs."""
    host = result.node or result.environment.hostname or "this machine"
    failures = _machine_failures(result, host)
    failed_gpus = {f.gpu for f in failures if f.gpu is not None}
    for check in result.checks:
        failed_gpus.update(g.index for g in check.gpus if g.verdict == FAILED)
    environment = _gpu_environment(result)
    figures = _gpu_figures(result)
    indices = sorted(set(environment) | set(figures))
    names = _unit_names(result)
    profiles = {g.index: g.mig.profile for g in result.environment.gpus if g.mig is not None}
    units = tuple(
        UnitView(
            name=names.get(index, unit_name(index)),
            verdict=FAILED if index in failed_gpus else PASSED,
            figures=figures.get(index, {}),
            environment=environment.get(index, {}),
            failures=tuple(f for f in failures if f.gpu == index),
            kind=f"MIG {profiles[index]}" if index in profiles else "",
        )
        for index in indices
    )
    curve = nccl_curve(result.check("nccl"))
    state = tuple(
        replace(line, unit=names.get(f.gpu, unit_name(f.gpu)) if f.gpu is not None else host)
        for line, f in zip(state_lines(result, host), _state_findings(result), strict=True)
    )
    baseline = None
    if result.baseline is not None:
        precision = str(result.checks_config.burn.precisions[0])
        largest = curve[-1][0] if curve else None
        baseline = bands.of_comparison(result.baseline, precision, largest)
    return FleetView(
        title=f"{host}: {result.verdict}" + (f" ({result.reason})" if result.reason else ""),
        kind="machine",
        unit_label="GPU",
        phase=str(result.verdict),
        units=units,
        failures=tuple(failures),
        nccl_curves=((host, curve),) if curve else (),
        state=state,
        not_read=tuple(not_read_by_what([(host, not_read(result))])),
        baseline=baseline,
    )


def _state_findings(result: AgentResult) -> list[Finding]:
    check = result.check(CheckName.STATE)
    return list(check.findings[:MAX_LINES_PER_UNIT]) if check is not None else []
