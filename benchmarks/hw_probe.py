"""What one GPU machine exposes to a non-invasive state reading, printed as JSON.

Run on the H200 machine to learn which NVML queries, sysfs files and kernel-log sources answer
there (the state check says by name what it could not read; this probe records what exists):
    python3 benchmarks/hw_probe.py --out probe.json
It also starts a second process that computes on GPU 0 and holds memory, and reads NVML's
process lists from this process while it runs (what the in-use detection depends on).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import time
from typing import Any

import pynvml


def attempt(call: Any, *args: Any) -> Any:
    try:
        value = call(*args)
    except pynvml.NVMLError as error:
        return {"error": str(error)}
    except Exception as error:
        return {"error": f"{type(error).__name__}: {error}"}
    return plain(value)


def plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, (int, float, str, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if hasattr(value, "_fields_"):
        return {name: plain(getattr(value, name)) for name, *_ in value._fields_}
    if hasattr(value, "__dict__"):
        return {k: plain(v) for k, v in vars(value).items() if not k.startswith("_")}
    return repr(value)


def gpu_state(h: Any) -> dict[str, Any]:
    nv = pynvml
    out: dict[str, Any] = {}
    out["name"] = attempt(nv.nvmlDeviceGetName, h)
    out["pci"] = attempt(nv.nvmlDeviceGetPciInfo, h)
    out["memory"] = attempt(nv.nvmlDeviceGetMemoryInfo, h)
    if hasattr(nv, "nvmlMemory_v2"):
        out["memory_v2"] = attempt(lambda: nv.nvmlDeviceGetMemoryInfo(h, version=nv.nvmlMemory_v2))
    out["compute_procs"] = attempt(nv.nvmlDeviceGetComputeRunningProcesses, h)
    out["graphics_procs"] = attempt(nv.nvmlDeviceGetGraphicsRunningProcesses, h)
    out["mps_procs"] = attempt(nv.nvmlDeviceGetMPSComputeRunningProcesses, h)
    out["utilization"] = attempt(nv.nvmlDeviceGetUtilizationRates, h)
    out["compute_mode"] = attempt(nv.nvmlDeviceGetComputeMode, h)
    out["ecc_mode"] = attempt(nv.nvmlDeviceGetEccMode, h)
    for etype, ename in ((0, "corrected"), (1, "uncorrected")):
        for ctype, cname in ((0, "volatile"), (1, "aggregate")):
            out[f"ecc_total_{ename}_{cname}"] = attempt(
                nv.nvmlDeviceGetTotalEccErrors, h, etype, ctype
            )
            for loc in range(0, 9):
                out[f"ecc_loc{loc}_{ename}_{cname}"] = attempt(
                    nv.nvmlDeviceGetMemoryErrorCounter, h, etype, ctype, loc
                )
    out["remapped_rows"] = attempt(nv.nvmlDeviceGetRemappedRows, h)
    out["row_remapper_histogram"] = attempt(nv.nvmlDeviceGetRowRemapperHistogram, h)
    for cause in (0, 1):
        out[f"retired_pages_{cause}"] = attempt(nv.nvmlDeviceGetRetiredPages, h, cause)
    out["retired_pending"] = attempt(nv.nvmlDeviceGetRetiredPagesPendingStatus, h)
    out["pcie"] = {
        "cur_gen": attempt(nv.nvmlDeviceGetCurrPcieLinkGeneration, h),
        "max_gen": attempt(nv.nvmlDeviceGetMaxPcieLinkGeneration, h),
        "gpu_max_gen": attempt(nv.nvmlDeviceGetGpuMaxPcieLinkGeneration, h),
        "cur_width": attempt(nv.nvmlDeviceGetCurrPcieLinkWidth, h),
        "max_width": attempt(nv.nvmlDeviceGetMaxPcieLinkWidth, h),
        "replay": attempt(nv.nvmlDeviceGetPcieReplayCounter, h),
        "speed": attempt(nv.nvmlDeviceGetPcieSpeed, h),
    }
    links = {}
    for link in range(18):
        state = attempt(nv.nvmlDeviceGetNvLinkState, h, link)
        entry: dict[str, Any] = {"state": state}
        if not (isinstance(state, dict) and "error" in state):
            entry["version"] = attempt(nv.nvmlDeviceGetNvLinkVersion, h, link)
            entry["remote"] = attempt(nv.nvmlDeviceGetNvLinkRemotePciInfo_v2, h, link)
            for counter, cname in (
                (0, "replay"),
                (1, "recovery"),
                (2, "crc_flit"),
                (3, "crc_data"),
            ):
                entry[cname] = attempt(nv.nvmlDeviceGetNvLinkErrorCounter, h, link, counter)
        links[link] = entry
    out["nvlink"] = links
    out["clock_event_reasons"] = attempt(nv.nvmlDeviceGetCurrentClocksEventReasons, h)
    out["supported_clock_event_reasons"] = attempt(nv.nvmlDeviceGetSupportedClocksEventReasons, h)
    out["power_limit"] = attempt(nv.nvmlDeviceGetEnforcedPowerLimit, h)
    out["power_default"] = attempt(nv.nvmlDeviceGetPowerManagementDefaultLimit, h)
    out["power_constraints"] = attempt(nv.nvmlDeviceGetPowerManagementLimitConstraints, h)
    out["fabric_info"] = (
        attempt(nv.nvmlDeviceGetGpuFabricInfo, h)
        if hasattr(nv, "nvmlDeviceGetGpuFabricInfo")
        else "no binding"
    )
    if hasattr(nv, "nvmlDeviceGetGpuFabricInfoV"):
        out["fabric_info_v"] = attempt(nv.nvmlDeviceGetGpuFabricInfoV, h)
    out["persistence"] = attempt(nv.nvmlDeviceGetPersistenceMode, h)
    out["bar1"] = attempt(nv.nvmlDeviceGetBAR1MemoryInfo, h)
    fields = {
        "NVLINK_CRC_FLIT_TOTAL": getattr(nv, "NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", None),
        "NVLINK_CRC_DATA_TOTAL": getattr(nv, "NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", None),
        "NVLINK_REPLAY_TOTAL": getattr(nv, "NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", None),
        "NVLINK_RECOVERY_TOTAL": getattr(nv, "NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", None),
        "NVLINK_LINK_COUNT": getattr(nv, "NVML_FI_DEV_NVLINK_LINK_COUNT", None),
        "PCIE_REPLAY": getattr(nv, "NVML_FI_DEV_PCIE_REPLAY_COUNTER", None),
        "PCIE_CORRECTABLE": getattr(nv, "NVML_FI_DEV_PCIE_COUNT_CORRECTABLE_ERRORS", None),
        "PCIE_NAKS_RECEIVED": getattr(nv, "NVML_FI_DEV_PCIE_COUNT_NAKS_RECEIVED", None),
        "REMAP_AVAIL_NONE": None,
    }
    ids = [v for v in fields.values() if v is not None]
    values = attempt(nv.nvmlDeviceGetFieldValues, h, ids)
    out["field_values"] = {"ids": ids, "values": values}
    return out


def sysfs(bus_id: str) -> dict[str, Any]:
    bdf = bus_id.lower()
    if bdf.count(":") == 2 and len(bdf.split(":")[0]) == 8:
        bdf = bdf[4:]
    base = f"/sys/bus/pci/devices/{bdf}"
    out: dict[str, Any] = {"path": base, "exists": os.path.isdir(base)}
    for name in (
        "current_link_speed",
        "current_link_width",
        "max_link_speed",
        "max_link_width",
        "aer_dev_correctable",
        "aer_dev_fatal",
        "aer_dev_nonfatal",
        "numa_node",
        "local_cpulist",
    ):
        try:
            with open(f"{base}/{name}") as f:
                out[name] = f.read().strip()
        except OSError as error:
            out[name] = {"error": str(error)}
    return out


def kernel_log() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for argv in (["dmesg", "--notime"], ["journalctl", "-k", "-n", "5", "--no-pager"]):
        try:
            proc = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=10)
            out[argv[0]] = {
                "rc": proc.returncode,
                "lines": len(proc.stdout.splitlines()),
                "tail": proc.stdout.splitlines()[-5:],
                "err": proc.stderr[-300:],
            }
        except (OSError, subprocess.TimeoutExpired) as error:
            out[argv[0]] = {"error": str(error)}
    try:
        fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
        chunk = os.read(fd, 8192)
        os.close(fd)
        out["kmsg"] = {"first": chunk.decode(errors="replace")[:200]}
    except OSError as error:
        out["kmsg"] = {"error": str(error)}
    out["nvrm_lines"] = []
    try:
        proc = subprocess.run(["dmesg"], check=False, capture_output=True, text=True, timeout=10)
        out["nvrm_lines"] = [line for line in proc.stdout.splitlines() if "NVRM" in line][-20:]
    except (OSError, subprocess.TimeoutExpired):
        pass
    return out


def infiniband() -> dict[str, Any]:
    out: dict[str, Any] = {
        "devices": sorted(os.listdir("/sys/class/infiniband"))
        if os.path.isdir("/sys/class/infiniband")
        else None
    }
    out["net"] = sorted(os.listdir("/sys/class/net"))
    out["fabricmanager"] = [
        p
        for p in ("/usr/bin/nv-fabricmanager", "/var/run/nvidia-fabricmanager")
        if os.path.exists(p)
    ]
    out["dcgmi"] = subprocess.run(
        ["which", "dcgmi"], check=False, capture_output=True, text=True
    ).stdout.strip()
    out["nvswitch"] = glob.glob("/dev/nvidia-nvswitch*")
    return out


BUSY = """
import os, sys, time, torch
mode = sys.argv[1]
x = torch.empty(int(float(sys.argv[2]) * 2**30), dtype=torch.uint8, device='cuda')
a = torch.randn(8192, 8192, device='cuda', dtype=torch.bfloat16)
print('ready', os.getpid(), flush=True)
end = time.time() + float(sys.argv[3])
while time.time() < end:
    if mode == 'compute':
        for _ in range(20): a @ a
        torch.cuda.synchronize()
    else:
        time.sleep(0.2)
"""


def others() -> dict[str, Any]:
    """Start a process computing on GPU 0 (and one only holding memory); read NVML meanwhile."""
    out: dict[str, Any] = {}
    for mode, gib in (("compute", 2), ("hold", 100)):
        proc = subprocess.Popen(
            [sys.executable, "-c", BUSY, mode, str(gib), "20"], stdout=subprocess.PIPE, text=True
        )
        line = proc.stdout.readline() if proc.stdout else ""
        time.sleep(2)
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        procs = attempt(pynvml.nvmlDeviceGetComputeRunningProcesses, h)
        names = {}
        if isinstance(procs, list):
            for p in procs:
                names[p["pid"]] = attempt(pynvml.nvmlSystemGetProcessName, p["pid"])
        out[mode] = {
            "child_said": line.strip(),
            "child_pid": proc.pid,
            "my_pid": os.getpid(),
            "procs": procs,
            "names": names,
            "memory": attempt(pynvml.nvmlDeviceGetMemoryInfo, h),
            "utilization": attempt(pynvml.nvmlDeviceGetUtilizationRates, h),
            "process_utilization": attempt(pynvml.nvmlDeviceGetProcessUtilization, h, 0),
            "pid_ns": os.readlink("/proc/self/ns/pid"),
        }
        proc.kill()
        proc.wait()
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--no-others", action="store_true")
    args = parser.parse_args()
    began = time.perf_counter()
    pynvml.nvmlInit()
    result: dict[str, Any] = {
        "driver": attempt(pynvml.nvmlSystemGetDriverVersion),
        "nvml_py": getattr(pynvml, "__version__", "?"),
        "count": pynvml.nvmlDeviceGetCount(),
    }
    gpus = []
    for i in range(result["count"]):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        state = gpu_state(h)
        bus = state["pci"].get("busId") if isinstance(state["pci"], dict) else None
        state["sysfs"] = sysfs(bus) if bus else None
        gpus.append(state)
    result["gpus"] = gpus
    result["state_seconds"] = round(time.perf_counter() - began, 3)
    result["kernel_log"] = kernel_log()
    result["infiniband"] = infiniband()
    if not args.no_others:
        result["others"] = others()
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1, default=str)
    print(json.dumps({k: result[k] for k in ("driver", "count", "state_seconds")}))


if __name__ == "__main__":
    main()
