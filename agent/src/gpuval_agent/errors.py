"""Errors that end the agent with a clean message (no traceback) for the person or the pod log."""

from __future__ import annotations

from gpuval_api import REASONS, Reason


class AgentError(Exception):
    """The agent cannot go on; `str()` is the whole user-facing message, with what to do."""


class NoDriverError(AgentError):
    """No NVIDIA driver or no GPU: nothing but the driver check can run."""

    def __init__(self, detail: str) -> None:
        super().__init__(
            f"no NVIDIA GPU or driver found ({detail}); {REASONS[Reason.DRIVER_NOT_LOADED].hint}"
        )
        self.detail = detail


class BackendUnavailableError(AgentError):
    """The real GPU backend's Python stack (torch) is missing or broken."""
