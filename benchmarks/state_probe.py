"""The state check on a real machine: what it reads, what it names as not readable, how long it
takes, and a recording of NVML's answers and the sysfs files it read, in the fixture format of
tests/support/statetree.py (so the unit tests can replay this machine).

    python3 benchmarks/state_probe.py --out result.json --record recording.json [--repeat 5]

Prints one JSON document: the state check's result (findings, notRead, metrics) of the first run in
this process, the wall time of every run (the first includes NVML's start-up), and the recording's
size. Reads only: nothing on the machine is changed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from gpuval_agent.backends import select_backend
from gpuval_agent.record import RunRecord
from gpuval_agent.runner import run_checks
from gpuval_agent.state import sysfs
from gpuval_api.checks import CheckName, ChecksConfig
from gpuval_api.result import CheckResult

_PCI_FILES = (
    "vendor",
    "class",
    "numa_node",
    "current_link_speed",
    "max_link_speed",
    "current_link_width",
    "max_link_width",
    *sysfs.AER_FILES.values(),
)
_BRIDGE_FILES = ("max_link_speed", "max_link_width", "current_link_speed", "current_link_width")
_PORT_FILES = ("state", "phys_state", "rate", "link_layer")


class Quiet:
    """A reporter that keeps nothing (the result document has it all)."""

    def check_started(self, name: str, expected_seconds: float | None) -> None: ...

    def check_progress(self, name: str, fraction: float | None, detail: str) -> None: ...

    def burn_progress(self, progress: object) -> None: ...

    def check_finished(self, result: CheckResult) -> None: ...


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return None


def _record_pci(root: Path, address: str, files: dict[str, str], links: dict[str, str]) -> None:
    link = root / "sys/bus/pci/devices" / address
    if not link.is_symlink():
        return
    links[str(link.relative_to(root))] = os.readlink(link)
    real = Path(os.path.realpath(link))
    for name in _PCI_FILES:
        text = _read(real / name)
        if text is not None:
            files[str(real.relative_to(root)) + f"/{name}"] = text
    for name in _BRIDGE_FILES:
        text = _read(real.parent / name)
        if text is not None:
            files[str(real.parent.relative_to(root)) + f"/{name}"] = text


def record(root: Path, gpus: list[dict[str, Any]]) -> dict[str, Any]:
    """NVML's answers and the host files the state check reads, as a fixture document."""
    files: dict[str, str] = {}
    links: dict[str, str] = {}
    addresses = [sysfs.pci_address(g["bus_id"]) for g in gpus if g.get("bus_id")]
    for entry in sorted((root / "sys/bus/pci/devices").iterdir()):
        vendor, cls = _read(entry / "vendor"), _read(entry / "class")
        if entry.name in addresses or (vendor or "").startswith("0x10de"):
            _record_pci(root, entry.name, files, links)
        elif vendor is not None and cls is not None:
            # Every other function's vendor and class: how NVSwitches would be found.
            links[str(entry.relative_to(root))] = os.readlink(entry)
            real = Path(os.path.realpath(entry)).relative_to(root)
            files[f"{real}/vendor"], files[f"{real}/class"] = vendor, cls
    infiniband = root / "sys/class/infiniband"
    for path in sorted(infiniband.rglob("*")) if infiniband.is_dir() else []:
        if path.is_symlink() and path.name == "device":
            links[str(path.relative_to(root))] = os.readlink(path)
            _record_pci(root, Path(os.path.realpath(path)).name, files, links)
        elif path.is_file() and (path.parent.name == "counters" or path.name in _PORT_FILES):
            text = _read(path)
            if text is not None:
                files[str(path.relative_to(root))] = text
    comm = _read(root / "proc/1/comm")
    if comm is not None:
        files["proc/1/comm"] = comm
    return {"gpus": gpus, "files": files, "links": links}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--record", type=Path)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--backend", default=None)
    args = parser.parse_args()
    config = ChecksConfig().only([CheckName.STATE])
    backend = select_backend(args.backend, None)
    runs: list[dict[str, Any]] = []
    first: dict[str, Any] | None = None
    record_of_first = RunRecord()
    try:
        for index in range(args.repeat):
            began = time.monotonic()
            run_record = record_of_first if index == 0 else RunRecord()
            result = run_checks(config, backend, Quiet(), record=run_record)  # type: ignore[arg-type]
            wall = time.monotonic() - began
            state = result.check(CheckName.STATE)
            assert state is not None
            runs.append(
                {
                    "run": index,
                    "wallSeconds": round(wall, 4),
                    "stateCheckSeconds": state.elapsed_seconds,
                    "readSeconds": state.metrics.get("readSeconds"),
                }
            )
            if first is None:
                first = {
                    "gpus": result.environment.gpu_count,
                    "product": result.environment.gpus[0].name if result.environment.gpus else None,
                    "driver": result.environment.driver_version,
                    "state": state.model_dump(mode="json", by_alias=True),
                }
        reading = record_of_first.readings[0]
        recording = record(Path("/"), [asdict(g) for g in reading.gpus])
        recording["source"] = (
            f"recorded by benchmarks/state_probe.py on {result.environment.hostname}: "
            f"{first['gpus'] if first else 0} x {first['product'] if first else '?'}, driver "
            f"{first['driver'] if first else '?'}"
        )
        kernel = reading.host.kernel_log
        document = {
            "first": first,
            "runs": runs,
            "kernelLog": {
                "source": kernel.source,
                "lines": kernel.line_count,
                "xids": len(kernel.xids),
                "error": kernel.error,
            },
            "hostNotRead": reading.host.not_read,
            "recordingFiles": len(recording["files"]),
        }
        if args.record is not None:
            args.record.write_text(json.dumps(recording, indent=1, sort_keys=True) + "\n")
    finally:
        backend.close()
    args.out.write_text(json.dumps(document, indent=2) + "\n")
    json.dump(document, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
