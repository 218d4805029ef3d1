"""A person's release of a GpuValidation's held node actions: the annotation gpuval.dev/release
(keys.ANNOTATION_RELEASE) that `kubectl gpuval release` writes and the operator reads.

Its value is JSON: {"run": <the run's id, or "">, "at": <Unix seconds>, "repair": true (only
when asked)}. Nodes the validation held out of service since before `at` are approved (they no
longer count against its nodeActions.maxNodes), and the systemic hold of the run it names (or,
naming none, of the run going on at `at`) is lifted; the operator then acts on the held nodes (their
taint and cordon) up to the limits again. A release asks no repair of a failure the run holds as
systemic: the spec or the fleet's stack is the likely cause, which no reboot mends. Only "repair"
true (`kubectl gpuval release --repair`, a person's explicit word) lets spec.remediation ask the
engine for those nodes' repairs too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Release:
    run: str
    at: float
    # A person asks for the repairs of the released systemic failure too.
    repair: bool = False

    def encode(self) -> str:
        data: dict[str, object] = {"run": self.run, "at": int(self.at)}
        if self.repair:
            data["repair"] = True
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def parse(cls, text: str | None) -> Release | None:
        """The release, or None when there is none or it cannot be read."""
        try:
            data = json.loads(text or "")
            return cls(str(data.get("run") or ""), float(data["at"]), data.get("repair") is True)
        except (ValueError, TypeError, KeyError, AttributeError):
            return None

    def covers(self, run_id: str, started_at: float) -> bool:
        """It releases the systemic hold of this run: it names the run, or names none and came
        after the run started."""
        return self.run == run_id or (not self.run and self.at >= started_at)
