"""GPU backends: the real one (cuda, over nvml/ and torch/) and the test double (simulated/).

A backend only measures. Verdicts, thresholds and diagnoses live in gpuval_agent.checks and are
the same whichever backend measured.
"""

from __future__ import annotations

import importlib
import os

from gpuval_agent.backends.base import Backend
from gpuval_agent.errors import AgentError
from gpuval_api import AgentEnv

BACKEND_ENV = AgentEnv.BACKEND
SIMULATE_ENV = AgentEnv.SIMULATE
BACKENDS = ("cuda", "simulated")


def select_backend(name: str | None, simulate: str | None) -> Backend:
    """The backend called `name` (default: the BACKEND_ENV variable, else 'cuda').

    The simulated backend is chosen only when asked for by name, never as a fallback.
    """
    chosen = name or os.environ.get(BACKEND_ENV) or "cuda"
    # Imported on demand: each backend pulls in only its own stack (and the checks they share
    # import this package, so a top-level import would be circular).
    if chosen == "simulated":
        simulated = importlib.import_module("gpuval_agent.backends.simulated.backend")
        text = simulate if simulate is not None else os.environ.get(SIMULATE_ENV, "{}")
        backend: Backend = simulated.SimulatedBackend(simulated.SimulationConfig.parse(text))
        return backend
    if chosen == "cuda":
        cuda = importlib.import_module("gpuval_agent.backends.cuda")
        real: Backend = cuda.CudaBackend()
        return real
    raise AgentError(
        f"backend {chosen!r} (from --backend or {BACKEND_ENV}) is not known; "
        f"use one of {', '.join(BACKENDS)}"
    )
