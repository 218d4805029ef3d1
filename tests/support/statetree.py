"""Recorded hardware state for the state check's tests: a JSON file holding NVML's answers for
every GPU (GpuState fields) and a host tree (sysfs, /proc, /dev/kmsg files and the symlinks sysfs
has), materialised under a temporary root that the state check reads as it reads `/`.

Format (tests/fixtures/state/*.json): {"source": "...", "gpus": [{GpuState fields}],
"files": {"sys/...": "text"}, "links": {"sys/bus/pci/devices/X": "../../../devices/..."}}.
`benchmarks/record_state.py` writes the same format from a real machine.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from gpuval_agent.backends.base import BurnMeasurement
from gpuval_agent.backends.simulated.backend import SimulatedBackend, SimulationConfig
from gpuval_agent.state.model import GpuFabric, GpuState, NvLink

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "state"


def gpu_from_json(document: dict[str, Any]) -> GpuState:
    known = {f.name for f in fields(GpuState)}
    values = {k: v for k, v in document.items() if k in known}
    values["nvlinks"] = [NvLink(**link) for link in document.get("nvlinks", [])]
    if document.get("fabric") is not None:
        values["fabric"] = GpuFabric(**document["fabric"])
    return GpuState(**values)


@dataclass
class RecordedState:
    """A recording: its NVML answers (the GpuStateSource of take_reading) and its host root."""

    root: Path
    gpus: list[GpuState]
    document: dict[str, Any]

    def gpu_state(self) -> list[GpuState]:
        return [gpu_from_json(json.loads(json.dumps(g))) for g in self.document["gpus"]]

    def write(self, relative: str, text: str) -> None:
        """Change one file of the tree (a counter that grew, say)."""
        path = self.root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def load(name: str, into: Path, **changes: Any) -> RecordedState:
    """Fixture `name` materialised under `into`; `gpus=[...]` replaces its NVML answers."""
    document = json.loads((FIXTURES / f"{name}.json").read_text())
    document.update(changes)
    root = into / "root"
    for relative, text in document.get("files", {}).items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for relative, target in document.get("links", {}).items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.symlink_to(target)
    gpus = [gpu_from_json(g) for g in document["gpus"]]
    return RecordedState(root=root, gpus=gpus, document=document)


class RecordedBackend(SimulatedBackend):
    """The simulated backend (the GPU test double) answering the state check from a recording:
    NVML's answers and the host tree are the recording's; everything else is simulated. After the
    burn it answers with the recording's `gpusAfterBurn`, where the recording has them."""

    def __init__(self, recording: RecordedState) -> None:
        gpus = len(recording.gpus)
        super().__init__(SimulationConfig.parse(json.dumps({"gpus": gpus, "timeScale": 0.001})))
        self.recording = recording
        self._answers = recording.document["gpus"]

    def gpu_state(self) -> list[GpuState]:
        return [gpu_from_json(g) for g in json.loads(json.dumps(self._answers))]

    def state_root(self, configured: str) -> str:
        return str(self.recording.root)

    def burn(self, *args: Any, **kwargs: Any) -> list[BurnMeasurement]:
        measured = super().burn(*args, **kwargs)
        self._answers = self.recording.document.get("gpusAfterBurn", self._answers)
        return measured
