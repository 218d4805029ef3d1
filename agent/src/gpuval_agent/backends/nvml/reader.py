"""The environment record and live telemetry from NVML (nvidia-ml-py)."""

from __future__ import annotations

import os
import platform
import socket
import time
from collections.abc import Callable
from typing import Any, TypeVar

import pynvml  # type: ignore[import-untyped,unused-ignore]

from gpuval_agent.backends.base import GpuProcess, GpuUse, TelemetrySample, Throttle, XidEvent
from gpuval_agent.backends.nvml.mig import MigDevice, mig_devices, parent_sm_count
from gpuval_agent.backends.nvml.statecheck import clock_event_bits, read_gpu_state
from gpuval_agent.errors import NoDriverError
from gpuval_agent.state.model import GpuState
from gpuval_api import AgentEnv
from gpuval_api.result import Environment, GpuInfo, MigInstance, PcieLink

T = TypeVar("T")

# Clock-event reason bits (nvml.h nvmlClocksEventReason*), spelled out so an older nvidia-ml-py
# that lacks a constant still decodes the bit.
_THROTTLE_BITS = {
    0x1: Throttle.GPU_IDLE,
    0x2: Throttle.APPLICATIONS_CLOCKS,
    0x4: Throttle.SW_POWER_CAP,
    0x8: Throttle.HW_SLOWDOWN,
    0x10: Throttle.SYNC_BOOST,
    0x20: Throttle.SW_THERMAL_SLOWDOWN,
    0x40: Throttle.HW_THERMAL_SLOWDOWN,
    0x80: Throttle.HW_POWER_BRAKE_SLOWDOWN,
    0x100: Throttle.DISPLAY_CLOCKS,
}
# Per-process SM samples newer than this many seconds (NVML keeps older ones in its buffer).
_PROCESS_SAMPLE_SECONDS = 2.0
_UNSUPPORTED = {
    pynvml.NVML_ERROR_NOT_SUPPORTED,
    pynvml.NVML_ERROR_NO_PERMISSION,
    pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
}


def decode_throttles(bits: int) -> frozenset[Throttle]:
    return frozenset(reason for bit, reason in _THROTTLE_BITS.items() if bits & bit)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _cuda_version(encoded: int) -> str:
    """NVML's 13000 -> '13.0'."""
    return f"{encoded // 1000}.{encoded % 1000 // 10}"


class Unit:
    """What the agent tests as one GPU: a whole GPU, or a MIG device of a GPU with MIG mode on.
    Its telemetry is its parent GPU's (NVML reads clocks, power and temperature per GPU)."""

    __slots__ = ("handle", "index", "mig", "parent", "parent_index")

    def __init__(self, index: int, parent: Any, parent_index: int, mig: MigDevice | None) -> None:
        self.index, self.parent, self.parent_index, self.mig = index, parent, parent_index, mig
        self.handle = mig.handle if mig is not None else parent


def units_of(handles: list[Any]) -> list[Unit]:
    """The units of the GPUs: each GPU, or in its place each of its MIG devices."""
    units: list[Unit] = []
    for parent_index, handle in enumerate(handles):
        migs: list[MigDevice | None] = [*mig_devices(pynvml, parent_index, handle)]
        for mig in migs or [None]:
            units.append(Unit(len(units), handle, parent_index, mig))
    return units


class Nvml:
    """An initialised NVML session; queries that the GPU does not support come back as None.
    `handles` are the physical GPUs; `units` what the checks test (MIG devices on MIG)."""

    def __init__(self) -> None:
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as error:
            raise NoDriverError(f"NVML did not initialise: {error}") from None
        except OSError as error:
            raise NoDriverError(f"the NVML library could not be loaded: {error}") from None
        try:
            self.count = pynvml.nvmlDeviceGetCount()
        except pynvml.NVMLError as error:
            raise NoDriverError(f"NVML could not count GPUs: {error}") from None
        if self.count == 0:
            raise NoDriverError("NVML found 0 GPUs")
        self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(self.count)]
        self.units = units_of(self.handles)
        self.count = len(self.units)
        self._events: Any = None
        self._register_xid_events()

    def _register_xid_events(self) -> None:
        try:
            events = pynvml.nvmlEventSetCreate()
            for handle in self.handles:
                pynvml.nvmlDeviceRegisterEvents(
                    handle, pynvml.nvmlEventTypeXidCriticalError, events
                )
            self._events = events
        except pynvml.NVMLError:
            # Containers without the right capabilities cannot register; XIDs then go unseen,
            # which the environment record says (unsupported 'xidEvents').
            self._events = None

    def close(self) -> None:
        try:
            if self._events is not None:
                pynvml.nvmlEventSetFree(self._events)
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass

    @staticmethod
    def _query(unsupported: list[str], field: str, call: Callable[[], T]) -> T | None:
        try:
            return call()
        except pynvml.NVMLError as error:
            if error.value in _UNSUPPORTED:
                unsupported.append(field)
            else:
                unsupported.append(f"{field} ({error})")
            return None

    def environment(self) -> Environment:
        unsupported: list[str] = []
        q = self._query
        cuda = q(unsupported, "cudaDriverVersion", pynvml.nvmlSystemGetCudaDriverVersion_v2)
        environment = Environment(
            hostname=os.environ.get(AgentEnv.NODE_NAME) or socket.gethostname(),
            kernel=platform.release(),
            driver_version=_text(
                q(unsupported, "driverVersion", pynvml.nvmlSystemGetDriverVersion)
            ),
            cuda_driver_version=_cuda_version(cuda) if cuda else None,
            nvml_version=_text(q(unsupported, "nvmlVersion", pynvml.nvmlSystemGetNVMLVersion)),
            gpu_count=self.count,
            gpus=self._unit_infos(),
            unsupported=unsupported,
        )
        if self._events is None:
            environment.unsupported.append("xidEvents")
        return environment

    def _unit_infos(self) -> list[GpuInfo]:
        """Each unit's record: a whole GPU's own; a MIG device's its parent's, with its own
        index, UUID, memory and MIG description."""
        parents: dict[int, GpuInfo] = {}
        infos = []
        for unit in self.units:
            if unit.mig is None:
                infos.append(self._gpu(unit.index, unit.handle))
                continue
            parent = parents.get(unit.parent_index)
            if parent is None:
                parent = parents[unit.parent_index] = self._gpu(unit.parent_index, unit.parent)
            infos.append(
                mig_unit_info(parent, unit.index, unit.mig, parent_sm_count(pynvml, unit.parent))
            )
        return infos

    def _gpu(self, index: int, handle: Any) -> GpuInfo:
        missing: list[str] = []

        def q(field: str, call: Callable[[], T]) -> T | None:
            return self._query(missing, field, call)

        nv = pynvml
        ecc = q("eccMode", lambda: nv.nvmlDeviceGetEccMode(handle))
        remapped = q("remappedRows", lambda: nv.nvmlDeviceGetRemappedRows(handle))
        mig = q("migMode", lambda: nv.nvmlDeviceGetMigMode(handle))
        persistence = q("persistenceMode", lambda: nv.nvmlDeviceGetPersistenceMode(handle))
        memory = q("memory", lambda: nv.nvmlDeviceGetMemoryInfo(handle))
        pci = q("pciInfo", lambda: nv.nvmlDeviceGetPciInfo(handle))
        limit = q("powerLimit", lambda: nv.nvmlDeviceGetEnforcedPowerLimit(handle))
        default_limit = q(
            "defaultPowerLimit", lambda: nv.nvmlDeviceGetPowerManagementDefaultLimit(handle)
        )
        throttles = q("throttleReasons", lambda: clock_event_bits(handle))
        ecc_on = bool(ecc[0]) if ecc else None

        def ecc_count(counter: int) -> int | None:
            if not ecc_on:
                return None
            return q(
                "eccUncorrectable",
                lambda: nv.nvmlDeviceGetTotalEccErrors(
                    handle, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, counter
                ),
            )

        def threshold(kind: int, field: str) -> float | None:
            value = q(field, lambda: nv.nvmlDeviceGetTemperatureThreshold(handle, kind))
            return float(value) if value is not None else None

        return GpuInfo(
            index=index,
            name=_opt_text(q("name", lambda: nv.nvmlDeviceGetName(handle))),
            uuid=_opt_text(q("uuid", lambda: nv.nvmlDeviceGetUUID(handle))),
            serial=_opt_text(q("serial", lambda: nv.nvmlDeviceGetSerial(handle))),
            vbios=_opt_text(q("vbios", lambda: nv.nvmlDeviceGetVbiosVersion(handle))),
            pci_bus_id=_opt_text(pci.busId) if pci else None,
            memory_total_bytes=int(memory.total) if memory else None,
            pcie=PcieLink(
                current_gen=q(
                    "pcieCurrentGen", lambda: nv.nvmlDeviceGetCurrPcieLinkGeneration(handle)
                ),
                max_gen=q("pcieMaxGen", lambda: nv.nvmlDeviceGetMaxPcieLinkGeneration(handle)),
                current_width=q(
                    "pcieCurrentWidth", lambda: nv.nvmlDeviceGetCurrPcieLinkWidth(handle)
                ),
                max_width=q("pcieMaxWidth", lambda: nv.nvmlDeviceGetMaxPcieLinkWidth(handle)),
            ),
            ecc_enabled=ecc_on,
            ecc_uncorrectable_volatile=ecc_count(nv.NVML_VOLATILE_ECC),
            ecc_uncorrectable_aggregate=ecc_count(nv.NVML_AGGREGATE_ECC),
            remapped_rows_correctable=int(remapped[0]) if remapped else None,
            remapped_rows_uncorrectable=int(remapped[1]) if remapped else None,
            remapped_rows_pending=bool(remapped[2]) if remapped else None,
            remapped_rows_failed=bool(remapped[3]) if remapped else None,
            persistence_mode=bool(persistence) if persistence is not None else None,
            mig_mode=bool(mig[0]) if mig else None,
            power_limit_watts=limit / 1000 if limit is not None else None,
            default_power_limit_watts=default_limit / 1000 if default_limit is not None else None,
            max_sm_clock_mhz=q(
                "maxSmClock", lambda: nv.nvmlDeviceGetMaxClockInfo(handle, nv.NVML_CLOCK_SM)
            ),
            max_memory_clock_mhz=q(
                "maxMemoryClock", lambda: nv.nvmlDeviceGetMaxClockInfo(handle, nv.NVML_CLOCK_MEM)
            ),
            temperature_celsius=_opt_float(
                q(
                    "temperature",
                    lambda: nv.nvmlDeviceGetTemperature(handle, nv.NVML_TEMPERATURE_GPU),
                )
            ),
            slowdown_temperature_celsius=threshold(
                nv.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN, "slowdownTemperature"
            ),
            shutdown_temperature_celsius=threshold(
                nv.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN, "shutdownTemperature"
            ),
            max_operating_temperature_celsius=threshold(
                nv.NVML_TEMPERATURE_THRESHOLD_GPU_MAX, "maxOperatingTemperature"
            ),
            throttle_reasons=sorted(decode_throttles(throttles)) if throttles is not None else [],
            unsupported=sorted(set(missing)),
        )

    def gpu_states(self) -> list[GpuState]:
        return [read_gpu_state(index, handle) for index, handle in enumerate(self.handles)]

    def telemetry(self) -> list[TelemetrySample]:
        samples = []
        for index, handle in ((u.index, u.parent) for u in self.units):
            temperature = _try(pynvml.nvmlDeviceGetTemperature, handle, pynvml.NVML_TEMPERATURE_GPU)
            power = _try(pynvml.nvmlDeviceGetPowerUsage, handle)
            clock = _try(pynvml.nvmlDeviceGetClockInfo, handle, pynvml.NVML_CLOCK_SM)
            bits = _try(clock_event_bits, handle)
            samples.append(
                TelemetrySample(
                    gpu=index,
                    temperature_celsius=_opt_float(temperature),
                    power_watts=power / 1000 if power is not None else None,
                    sm_clock_mhz=_opt_float(clock),
                    throttles=decode_throttles(bits) if bits is not None else frozenset(),
                    pcie_gen=_try(pynvml.nvmlDeviceGetCurrPcieLinkGeneration, handle),
                    pcie_width=_try(pynvml.nvmlDeviceGetCurrPcieLinkWidth, handle),
                )
            )
        return samples

    def gpu_use(self) -> list[GpuUse] | None:
        """Every GPU's compute processes (MPS clients too), memory in use and utilization; None
        when NVML cannot list processes here."""
        since = int((time.time() - _PROCESS_SAMPLE_SECONDS) * 1e6)  # NVML's microseconds
        uses = []
        for index, handle in ((u.index, u.handle) for u in self.units):
            try:
                listed = list(pynvml.nvmlDeviceGetComputeRunningProcesses(handle))
            except pynvml.NVMLError:
                return None
            listed += _try(pynvml.nvmlDeviceGetMPSComputeRunningProcesses, handle) or []
            samples = _try(pynvml.nvmlDeviceGetProcessUtilization, handle, since) or []
            sm = {int(s.pid): int(s.smUtil) for s in samples}
            processes: dict[int, GpuProcess] = {}
            for entry in listed:
                pid = int(entry.pid)
                memory = getattr(entry, "usedGpuMemory", None)
                processes[pid] = GpuProcess(
                    pid=pid,
                    used_memory_bytes=int(memory) if memory is not None else None,
                    sm_percent=sm.get(pid),
                )
            memory_info = _try(pynvml.nvmlDeviceGetMemoryInfo, handle)
            rates = _try(pynvml.nvmlDeviceGetUtilizationRates, handle)
            uses.append(
                GpuUse(
                    gpu=index,
                    processes=tuple(processes.values()),
                    memory_used_bytes=int(memory_info.used) if memory_info else None,
                    memory_total_bytes=int(memory_info.total) if memory_info else None,
                    utilization_percent=int(rates.gpu) if rates else None,
                )
            )
        return uses

    def xid_events(self) -> list[XidEvent]:
        if self._events is None:
            return []
        found: list[XidEvent] = []
        # An XID is its GPU's: on MIG, it is told as its first unit's.
        index_of: dict[int, int] = {}
        uuids: dict[str, int] = {}
        for unit in reversed(self.units):
            index_of[id(unit.parent)] = unit.index
            uuids[self.uuid(unit.parent)] = unit.index
        while True:
            try:
                data = pynvml.nvmlEventSetWait_v2(self._events, 0)
            except pynvml.NVMLError:
                return found
            gpu = index_of.get(id(data.device))
            if gpu is None:
                gpu = uuids.get(self.uuid(data.device), -1)
            found.append(XidEvent(gpu=gpu, xid=int(data.eventData)))

    @staticmethod
    def uuid(handle: Any) -> str:
        try:
            return _text(pynvml.nvmlDeviceGetUUID(handle))
        except pynvml.NVMLError:
            return ""


def mig_unit_info(parent: GpuInfo, index: int, mig: MigDevice, parent_sms: int | None) -> GpuInfo:
    """A MIG device's record: its parent GPU's, with the device's index, UUID and memory."""
    return parent.model_copy(
        update={
            "index": index,
            "uuid": mig.uuid,
            "memory_total_bytes": mig.memory_total_bytes,
            "mig": MigInstance(
                profile=mig.profile,
                parent_index=mig.parent_index,
                parent_uuid=parent.uuid,
                sm_count=mig.sm_count,
                parent_sm_count=parent_sms,
                parent_memory_total_bytes=parent.memory_total_bytes,
                gpu_instance_id=mig.gpu_instance_id,
                compute_instance_id=mig.compute_instance_id,
            ),
        }
    )


def _try(call: Callable[..., Any], *args: Any) -> Any:
    """A telemetry read; None when the GPU does not answer it (never stops the sampling)."""
    try:
        return call(*args)
    except pynvml.NVMLError:
        return None


def _opt_text(value: Any) -> str | None:
    return _text(value) if value is not None else None


def _opt_float(value: Any) -> float | None:
    return float(value) if value is not None else None
