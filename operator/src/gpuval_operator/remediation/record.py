"""`RepairRecord`: where one node stands in one validation's repair loop, kept inside that
validation's entry on the node (`verdict.gpuval.dev/<validation>`, gpuval_operator.nodes.entries),
so a restarted operator, or the standby that takes the Lease, reads it back from the node. Pure.

The record holds what the loop decides on: the state, the action asked for, the request's
identity and its object, the boot ID when it was asked (a new one says the node rebooted), the
times of the repairs asked within the window (NeedsRepair counts them), the checks that failed (the
re-validation runs them again, with the state check), and the times a person sees in `kubectl
gpuval status`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from gpuval_api.remediation import ACTIVE_STATES, RepairState


@dataclass(frozen=True, slots=True)
class RepairRecord:
    state: str  # a RepairState
    action: str  # the RepairAction asked for: ResetGpu or Reboot
    reason: str | None  # the failure's reason
    failed: int  # when the node failed (Unix seconds): the failure → back in service clock
    asked: int  # when the last repair was asked
    boot: str  # the node's boot ID when it was asked
    count: int  # repairs asked of this node by this validation, ever: the last request's number
    # When the repairs within the window were asked (Unix seconds), oldest first.
    history: tuple[int, ...] = ()
    checks: tuple[str, ...] = ()  # the checks that failed (CheckName values)
    obj: str = ""  # the last request's object, namespace/name ("" in mode Condition)
    ended: int | None = None
    ended_by: str | None = None  # a RepairEnd
    revalidated: int | None = None  # its verdict after the repair came
    back: int | None = None  # back in service (passed after the repair)

    @property
    def active(self) -> bool:
        """Asked of the engine or being proven again: out of service, a breaker slot."""
        return self.state in ACTIVE_STATES

    @property
    def repair_id(self) -> str:
        """The last request's identity: its number, unique per node and validation."""
        return str(self.count)

    def within(self, now: float, window: float) -> tuple[int, ...]:
        """The repairs asked within `window` seconds before `now`."""
        return tuple(t for t in self.history if now - t < window)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["history"], data["checks"] = list(self.history), list(self.checks)
        # Absent, not null: a node's annotation stays as short as it can.
        return {k: v for k, v in data.items() if v not in (None, "", [])}

    @classmethod
    def from_json(cls, data: object) -> RepairRecord | None:
        if not isinstance(data, Mapping):
            return None
        try:
            fields = {k: data[k] for k in cls.__slots__ if k in data}
            fields["history"] = tuple(int(t) for t in fields.get("history") or ())
            fields["checks"] = tuple(str(c) for c in fields.get("checks") or ())
            record = cls(**fields)
            RepairState(record.state)
        except (ValueError, TypeError, KeyError):
            return None
        return record

    def encode(self) -> str:
        return json.dumps(self.to_json(), separators=(",", ":"), sort_keys=True)

    def moved(self, state: RepairState, **changes: Any) -> RepairRecord:
        """The record in `state`, with `changes`."""
        return replace(self, state=str(state), **changes)


@dataclass(frozen=True, slots=True)
class FailingGpus:
    """The failing GPUs of a node's report, as a remediation template names them, and the checks
    that failed."""

    uuids: tuple[str, ...] = ()
    pci_bus_ids: tuple[str, ...] = ()
    checks: tuple[str, ...] = field(default_factory=tuple)
    # When the report's verdict came (epoch seconds): the failure, for failure → back in service
    # (a node the breaker held is asked for its repair later than it failed).
    failed_at: float | None = None
