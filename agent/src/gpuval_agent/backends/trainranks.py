"""The training check's rank processes: the agent's one rank process (backends/rankprocess.py), one
per GPU, through the one rank-process manager (backends/ranks.py), with the settings that make
the losses deterministic in their environment. Kept free of torch.
"""

from __future__ import annotations

import os
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from gpuval_agent.backends.ranks import SAFE_NCCL_ENV, RankGroup, rank_command
from gpuval_agent.training import (
    RankTraining,
    TrainOutcome,
    TrainPlan,
    TrainProgress,
    TrainProgressCallback,
)

# What makes one stack's losses bit-identical, pinned in every rank (a person's own values of these
# would make their losses incomparable with the fleet's, so they are not taken): cuBLAS's
# deterministic workspace (torch's deterministic algorithms require it), and one NCCL algorithm
# and protocol for the gradients' all-reduce (NCCL picks by size and topology otherwise, and each
# sums in its own order).
DETERMINISTIC_ENV = {
    "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
    "NCCL_ALGO": "Ring",
    "NCCL_PROTO": "Simple",
}
# torch/train.py's PROGRESS_ID: rank 0's progress event, overwritten each time
PROGRESS_ID = -1
_TRAIN_ID = 1
_EXIT_SECONDS = 2.0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def rank_environment() -> dict[str, str]:
    """The parent's environment, NCCL_DEBUG=INFO unless set (a hang leaves its trail), the
    deterministic and the multicast-off settings, and the agent's import path."""
    env = dict(os.environ) | DETERMINISTIC_ENV | SAFE_NCCL_ENV
    env.setdefault("NCCL_DEBUG", "INFO")
    env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (*sys.path, env.get("PYTHONPATH", "")) if p)
    return env


class TrainingRanks:
    """One rank process per CUDA device, started at once, each told to train by one command."""

    def __init__(self, devices: list[int], plan: TrainPlan) -> None:
        self.devices = list(devices)
        self.plan = plan
        self._dir = tempfile.TemporaryDirectory(prefix="gpuval-train-")
        port = _free_port()
        logs = [Path(self._dir.name) / f"rank{rank}.log" for rank in range(len(devices))]
        specs = [
            {
                "rank": rank,
                "world": len(devices),
                "node": 0,
                "layout": [[0, len(devices)]],
                "device": device,
                "storeHost": "127.0.0.1",
                "storePort": port,
                "initSeconds": plan.timeout_seconds,
                "phaseSeconds": plan.timeout_seconds,
                "events": str(log.with_suffix(".events")),
            }
            for rank, (device, log) in enumerate(zip(devices, logs, strict=True))
        ]
        env = rank_environment()
        self.group = RankGroup(
            [rank_command(f"train-{os.getpid()}", spec) for spec in specs],
            [env] * len(devices),
            gated=True,
            logs=logs,
            labels=[f"rank {rank} (CUDA device {d})" for rank, d in enumerate(devices)],
        )

    def live_devices(self) -> list[int]:
        """The CUDA devices whose rank process still runs."""
        processes = self.group.processes
        return [d for d, p in zip(self.devices, processes, strict=True) if p.poll() is None]

    def run(
        self, gpus: list[int], on_progress: TrainProgressCallback, stop: threading.Event
    ) -> TrainOutcome:
        """Train, reporting rank 0's progress; `gpus` name the ranks' GPUs in the outcome."""
        deadline = time.monotonic() + self.plan.timeout_seconds
        seen: list[int] = [0]

        def progress() -> None:
            event = self.group.latest(0, PROGRESS_ID)
            if event is None or event.get("step") == seen[0]:
                return
            seen[0] = int(event.get("step") or 0)
            rate = event.get("tokensPerSecond")
            on_progress(
                TrainProgress(
                    step=seen[0],
                    steps=self.plan.total_steps,
                    tokens_per_second=float(rate) if rate is not None else None,
                    loss=float(event["loss"]) if event.get("loss") is not None else None,
                )
            )

        try:
            self.group.send(self.plan.to_command(_TRAIN_ID))
            answered = self.group.answers(_TRAIN_ID, deadline, stop, on_wait=progress)
            if answered == "timeout":
                self.group.kill()
                return TrainOutcome(timed_out=True, log_tail=self.group.run(True).log_tail)
            if isinstance(answered, str) or _errors(answered):
                # A rank that reports its error exits at once: let it, then say who died how.
                run = self.group.wait(_EXIT_SECONDS, grace_seconds=0.5)
                error = answered if isinstance(answered, str) else None
                return TrainOutcome(
                    error=error or run.describe_failure(self.group.labels),
                    log_tail=run.log_tail or None,
                )
            return TrainOutcome(
                ranks=[
                    RankTraining.parse(gpu, event)
                    for gpu, event in zip(gpus, answered, strict=True)
                ]
            )
        finally:
            self.group.send({"op": "exit"})
            self.group.kill()
            self.group.cleanup()
            self._dir.cleanup()


def _errors(events: list[dict[str, Any]]) -> list[str]:
    return [str(e["error"]) for e in events if "error" in e]
