"""spec.maxProofAgeSeconds, the pure decisions (docs/operator/proof-age.md): which selected nodes
are due for a proof-expired run and in which order, when the next one is due, and how many are
proven within the age.

A node's proof is its gpuval.dev/proven-at annotation: the last pass of any validation, void
(absent) while one's verdict on it is Failed. A node is due once its proof is older than the
age; a node this validation failed or could not test (NotRun: GPUs busy) since is due `max_age`
after that test, so it is tried again once per age, never in a loop; a node with neither is due
at once. Nothing here reads a clock or calls the API: the controller passes
the time and the node watch's facts in (tests/unit/operator/test_operator_proofage.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

# A proof-expired run also takes the nodes due within this fraction of the age from now: proofs
# a run wrote wave by wave expire wave by wave, and one run for them all is cheaper than a run
# per wave (each run prunes the pods and reports of the runs before it, spec.history).
EARLY = 0.1


@dataclass(frozen=True, slots=True)
class NodeProof:
    """What the decisions need of one selected node."""

    name: str
    gpus: int
    proven_at: float | None  # its proof (epoch seconds); None: none, or void
    tested_at: float | None = None  # this validation's last verdict on it, any verdict


@dataclass(frozen=True, slots=True)
class ProofSummary:
    """The selected nodes against the age, for the status and the metrics."""

    max_age: float
    nodes: int
    gpus: int
    within_nodes: int
    within_gpus: int
    oldest: float | None  # the oldest proof (epoch seconds); None: no node has one
    next_due: float | None  # when the next node is due; None: no node selected

    @property
    def stale(self) -> int:
        return self.nodes - self.within_nodes


def due_at(node: NodeProof, max_age: float) -> float:
    """When `node` is due: its proof's expiry, or its last test's plus the age when that is
    later (a NotRun or a failure since), or at once (0) when it has neither."""
    last = max((t for t in (node.proven_at, node.tested_at) if t is not None), default=None)
    return 0.0 if last is None else last + max_age


def within(node: NodeProof, max_age: float, now: float) -> bool:
    """Proven within the age."""
    return node.proven_at is not None and now - node.proven_at <= max_age


def stalest_first(node: NodeProof) -> tuple[float, str]:
    """Sort key: no proof first, then the oldest proof; by name among equals."""
    return (float("-inf") if node.proven_at is None else node.proven_at, node.name)


def due(nodes: Iterable[NodeProof], max_age: float, now: float) -> list[NodeProof]:
    """The nodes a proof-expired run takes now, stalest first: those due, and those due within
    EARLY of the age from now."""
    until = now + EARLY * max_age
    return sorted((n for n in nodes if due_at(n, max_age) <= until), key=stalest_first)


def next_due(nodes: Iterable[NodeProof], max_age: float) -> float | None:
    """When the first node is due (the controller sleeps until then); None: no node."""
    return min((due_at(n, max_age) for n in nodes), default=None)


def summarize(nodes: Iterable[NodeProof], max_age: float, now: float) -> ProofSummary:
    listed = list(nodes)
    fresh = [n for n in listed if within(n, max_age, now)]
    proofs = [n.proven_at for n in listed if n.proven_at is not None]
    return ProofSummary(
        max_age=max_age,
        nodes=len(listed),
        gpus=sum(n.gpus for n in listed),
        within_nodes=len(fresh),
        within_gpus=sum(n.gpus for n in fresh),
        oldest=min(proofs, default=None),
        next_due=next_due(listed, max_age),
    )
