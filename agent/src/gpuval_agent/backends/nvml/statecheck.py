"""The state check's NVML reads (nvidia-ml-py): ECC by location, row remapping and its histogram,
retired pages, NVLink links and their error counters, PCIe, clock-event reasons, power limits and
the GPU fabric info. A query the GPU does not support is left None and named in `not_read`."""

from __future__ import annotations

from collections.abc import Callable
from ctypes import ArgumentError, byref
from typing import Any, TypeVar

import pynvml  # type: ignore[import-untyped,unused-ignore]

from gpuval_agent.state.model import (
    COMPLETED,
    CORRECTED_AGGREGATE,
    CORRECTED_VOLATILE,
    FABRIC_SUCCESS,
    NOT_SUPPORTED,
    UNCORRECTED_AGGREGATE,
    UNCORRECTED_VOLATILE,
    GpuFabric,
    GpuState,
    NvLink,
)

T = TypeVar("T")

_ECC_COUNTERS = (
    (UNCORRECTED_VOLATILE, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", "NVML_VOLATILE_ECC"),
    (CORRECTED_VOLATILE, "NVML_MEMORY_ERROR_TYPE_CORRECTED", "NVML_VOLATILE_ECC"),
    (UNCORRECTED_AGGREGATE, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", "NVML_AGGREGATE_ECC"),
    (CORRECTED_AGGREGATE, "NVML_MEMORY_ERROR_TYPE_CORRECTED", "NVML_AGGREGATE_ECC"),
)
# nvmlMemoryLocation_t, as nvidia-smi -q -d ECC names them (nvml.h).
_LOCATIONS = {
    0: "L1 cache",
    1: "L2 cache",
    2: "DRAM",
    3: "register file",
    4: "texture memory",
    5: "texture shared memory",
    6: "CBU",
    7: "SRAM",
}
_NVLINK_COUNTERS = {"replay": 0, "recovery": 1, "crcFlit": 2, "crcData": 3}
_FABRIC_STATES = {0: NOT_SUPPORTED, 1: "NOT_STARTED", 2: "IN_PROGRESS", 3: COMPLETED}
_NOT_SUPPORTED = {
    pynvml.NVML_ERROR_NOT_SUPPORTED,
    pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
}
# nvmlDeviceGetFieldValues: the speed of one link (scope = the link), Mbps.
# A binding older or newer than this code (a struct or call it lacks, another signature) fails
# one query, never the whole reading.
_BINDING_ERRORS = (TypeError, ValueError, AttributeError, ArgumentError)
_FI_NVLINK_SPEED = getattr(pynvml, "NVML_FI_DEV_NVLINK_GET_SPEED", 164)
_MAX_LINKS = getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18)


class _Reader:
    """Queries of one GPU that record what did not answer."""

    def __init__(self, state: GpuState) -> None:
        self.state = state
        self._failed: dict[str, str] = {}

    def query(self, what: str, call: Callable[..., T], *args: Any) -> T | None:
        try:
            return call(*args)
        except pynvml.NVMLError as error:
            if what not in self._failed:
                why = "not supported" if error.value in _NOT_SUPPORTED else str(error)
                self._failed[what] = why
            return None

    def finish(self) -> None:
        self.state.not_read.extend(f"{what}: {why}" for what, why in self._failed.items())


def read_gpu_state(index: int, handle: Any) -> GpuState:
    """Everything the state check asks NVML about one GPU."""
    nv = pynvml
    state = GpuState(index=index)
    reader = _Reader(state)
    q = reader.query
    name = q("name", lambda: nv.nvmlDeviceGetName(handle))
    state.name = _text(name) if name is not None else None
    pci = q("PCI info", lambda: nv.nvmlDeviceGetPciInfo(handle))
    state.bus_id = _text(pci.busId) if pci is not None else None
    ecc = q("ECC mode", lambda: nv.nvmlDeviceGetEccMode(handle))
    state.ecc_enabled = bool(ecc[0]) if ecc is not None else None
    if state.ecc_enabled:
        _read_ecc(reader, handle)
    remapped = q("row remapping", lambda: nv.nvmlDeviceGetRemappedRows(handle))
    if remapped is not None:
        state.remapped_correctable, state.remapped_uncorrectable = (
            int(remapped[0]),
            int(remapped[1]),
        )
        state.remap_pending, state.remap_failed = bool(remapped[2]), bool(remapped[3])
        histogram = q(
            "row remapper histogram", lambda: nv.nvmlDeviceGetRowRemapperHistogram(handle)
        )
        if histogram is not None:
            state.remap_histogram = {
                key: int(getattr(histogram, key))
                for key in ("max", "high", "partial", "low", "none")
            }
    _read_retired_pages(reader, handle)
    state.nvlinks = _read_nvlinks(reader, handle)
    state.pcie_gen = q("PCIe generation", lambda: nv.nvmlDeviceGetCurrPcieLinkGeneration(handle))
    state.pcie_max_gen = q(
        "PCIe max generation", lambda: nv.nvmlDeviceGetMaxPcieLinkGeneration(handle)
    )
    state.pcie_width = q("PCIe width", lambda: nv.nvmlDeviceGetCurrPcieLinkWidth(handle))
    state.pcie_max_width = q("PCIe max width", lambda: nv.nvmlDeviceGetMaxPcieLinkWidth(handle))
    state.pcie_replays = q("PCIe replay counter", lambda: nv.nvmlDeviceGetPcieReplayCounter(handle))
    state.clocks_event_bits = q("clocks event reasons", lambda: clock_event_bits(handle))
    limit = q("power limit", lambda: nv.nvmlDeviceGetEnforcedPowerLimit(handle))
    default = q("default power limit", lambda: nv.nvmlDeviceGetPowerManagementDefaultLimit(handle))
    state.power_limit_watts = limit / 1000 if limit is not None else None
    state.default_power_limit_watts = default / 1000 if default is not None else None
    try:
        state.fabric = q("GPU fabric info", lambda: _fabric(handle))
    except _BINDING_ERRORS as error:
        state.not_read.append(f"GPU fabric info: {type(error).__name__}: {error}")
    reader.finish()
    return state


def _read_ecc(reader: _Reader, handle: Any) -> None:
    nv = pynvml
    state = reader.state
    for key, error_type, counter_type in _ECC_COUNTERS:
        kind, counter = getattr(nv, error_type), getattr(nv, counter_type)
        total = reader.query("ECC counters", nv.nvmlDeviceGetTotalEccErrors, handle, kind, counter)
        if total is not None:
            state.ecc[key] = int(total)
        for location, label in _LOCATIONS.items():
            value = _quiet(nv.nvmlDeviceGetMemoryErrorCounter, handle, kind, counter, location)
            if value is not None:
                state.ecc_locations.setdefault(label, {})[key] = int(value)
    if state.ecc and not state.ecc_locations:
        state.not_read.append("ECC by location: not supported")


def _read_retired_pages(reader: _Reader, handle: Any) -> None:
    nv = pynvml
    state = reader.state
    single = reader.query(
        "retired pages",
        lambda: nv.nvmlDeviceGetRetiredPages(
            handle, nv.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
        ),
    )
    if single is None:
        return
    double = reader.query(
        "retired pages",
        lambda: nv.nvmlDeviceGetRetiredPages(
            handle, nv.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
        ),
    )
    state.retired_pages = {"singleBit": len(single), "doubleBit": len(double or [])}
    pending = reader.query(
        "retired pages pending", lambda: nv.nvmlDeviceGetRetiredPagesPendingStatus(handle)
    )
    state.retired_pending = pending == nv.NVML_FEATURE_ENABLED if pending is not None else None


def _read_nvlinks(reader: _Reader, handle: Any) -> list[NvLink]:
    nv = pynvml
    links: list[NvLink] = []
    unsupported = 0
    for link in range(_MAX_LINKS):
        try:
            active = nv.nvmlDeviceGetNvLinkState(handle, link) == nv.NVML_FEATURE_ENABLED
        except pynvml.NVMLError as error:
            if error.value == pynvml.NVML_ERROR_INVALID_ARGUMENT:
                break  # past the GPU's last link
            unsupported += 1
            continue
        entry = NvLink(link=link, active=active)
        if active:
            remote = _quiet(nv.nvmlDeviceGetNvLinkRemotePciInfo, handle, link)
            entry.remote_bus_id = _text(remote.busId) if remote is not None else None
        for name, counter in _NVLINK_COUNTERS.items():
            value = _quiet(nv.nvmlDeviceGetNvLinkErrorCounter, handle, link, counter)
            if value is not None:
                entry.errors[name] = int(value)
        links.append(entry)
    if links:
        fields = [(_FI_NVLINK_SPEED, entry.link) for entry in links]
        speeds = _quiet(nv.nvmlDeviceGetFieldValues, handle, fields)
        for entry, value in zip(links, speeds or [], strict=False):
            if value.nvmlReturn == nv.NVML_SUCCESS:
                entry.speed_mbps = int(_field_value(value))
    if unsupported and not links:
        reader.state.not_read.append(f"NVLink: not supported on any of {unsupported} links")
    return links


def _field_value(value: Any) -> float:
    """The number in an nvmlFieldValue_t, whatever its type (nvmlValueType_t)."""
    member = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal"}
    return float(getattr(value.value, member.get(int(value.valueType), "ullVal")))


def _fabric(handle: Any) -> GpuFabric:
    """The GPU fabric info: the versioned call with its struct (v2), else the first form."""
    nv = pynvml
    try:
        info: Any = nv.c_nvmlGpuFabricInfoV_t()
        nv.nvmlDeviceGetGpuFabricInfoV(handle, byref(info))
    except (AttributeError, pynvml.NVMLError_FunctionNotFound):
        info = nv.c_nvmlGpuFabricInfo_t()
        nv.nvmlDeviceGetGpuFabricInfo(handle, byref(info))
    state = _FABRIC_STATES.get(int(info.state), f"unknown ({int(info.state)})")
    fabric = GpuFabric(state=state, health_mask=getattr(info, "healthMask", None))
    if state != NOT_SUPPORTED:
        status = int(info.status)
        fabric.status = (
            FABRIC_SUCCESS if status == nv.NVML_SUCCESS else str(pynvml.NVMLError(status))
        )
        fabric.clique_id = int(info.cliqueId)
        fabric.cluster_uuid = bytes(info.clusterUuid).hex()
    return fabric


def clock_event_bits(handle: Any) -> int:
    """The current clock-event (throttle) reason bits; older bindings name the call Throttle."""
    getter = (
        getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        or pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
    )
    return int(getter(handle))


def _quiet(call: Callable[..., T], *args: Any) -> T | None:
    """A per-location or per-link query: many GPUs support only some, which is not news."""
    try:
        return call(*args)
    except (pynvml.NVMLError, *_BINDING_ERRORS):
        return None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
