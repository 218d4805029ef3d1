"""Healthy capacity (docs/operator/capacity.md): the states a validation's selected GPUs and
nodes are counted in, the figure gpuval exists to raise.

Each selected node is in exactly one state, the first of this precedence that holds:

1. `needsPerson`: its repair record says NeedsRepair, or it carries gpuval.dev/needs-repair.
2. `repair`: its repair is asked of the cluster's engine or being proven again (Requested,
   Revalidating: spec.remediation).
3. `failed`: this validation's latest tested verdict on it is Failed (its taint and cordon in
   force, or held by the circuit breaker: no GPU of it is proven either way).
4. `untested`: no tested verdict yet (never tested, or NotRun every time).
5. `stale`: passed, but with spec.maxProofAgeSeconds its proof (gpuval.dev/proven-at) is older
   than the age, or void (another validation failed it).
6. `healthy`: passed, and with spec.maxProofAgeSeconds proven within the age.

A node's GPUs count in its state, but for a failed node: verdicts act on the whole node today, so
the GPUs its report names count `failed` and its other GPUs `withheld` (healthy GPUs out of service
with their node; every GPU counts `failed` when the report names none). `withheld` is a GPU state
only: no node is counted in it.
"""

from __future__ import annotations

from enum import StrEnum


class CapacityState(StrEnum):
    """The label values of gpuval_validation_gpus{state} and gpuval_validation_capacity_nodes
    {state}, and the keys of status.capacity.gpus and .nodes, in precedence order (most urgent
    first; `withheld` is a GPU state only)."""

    HEALTHY = "healthy"
    STALE = "stale"
    UNTESTED = "untested"
    FAILED = "failed"
    WITHHELD = "withheld"
    REPAIR = "repair"
    NEEDS_PERSON = "needsPerson"


# The states a node is counted in (every one but WITHHELD).
NODE_STATES = tuple(s for s in CapacityState if s is not CapacityState.WITHHELD)
# How `kubectl gpuval status` names each state after its count.
STATE_WORDS = {
    CapacityState.HEALTHY: "proven healthy",
    CapacityState.STALE: "proven but older than the maximum age",
    CapacityState.UNTESTED: "untested",
    CapacityState.FAILED: "failed",
    CapacityState.WITHHELD: "withheld with their node",
    CapacityState.REPAIR: "in repair",
    CapacityState.NEEDS_PERSON: "needing a person",
}
