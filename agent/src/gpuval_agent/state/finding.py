"""A finding of the state check before its action (Fail, Warn, Ignore) is applied. Pure."""

from __future__ import annotations

from dataclasses import dataclass

from gpuval_api import Reason


@dataclass(frozen=True, slots=True)
class StateFinding:
    reason: Reason
    message: str
    gpu: int | None = None
