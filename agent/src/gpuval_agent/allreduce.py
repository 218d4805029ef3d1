"""All-reduce arithmetic shared by whoever measures or simulates one: the node's NCCL check, the
cross-node fabric, and the simulated backend (which turns a bus bandwidth back into a time). Below
the checks and the backends, so that neither reaches into the other for it. Pure."""

from __future__ import annotations


def bus_bandwidth(algbw: float, ranks: int) -> float:
    """nccl-tests' all-reduce bus bandwidth: algbw * 2(n-1)/n, comparable across group sizes."""
    return algbw * 2 * (ranks - 1) / ranks
