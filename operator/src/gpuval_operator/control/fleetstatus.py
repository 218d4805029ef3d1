"""The fleet's standing as one validation sees it, from its node watch's facts: the age of each
selected node's proof (spec.maxProofAgeSeconds) and the healthy capacity, each kept for the status
and the metrics. `ValidationController` asks it when the next proof-expired run is due, which
nodes such a run takes, and whether status.capacity changed. What is computed is in the pure
`proofage` and `capacity`; this holds the summaries, the retry rest and the status bodies."""

from __future__ import annotations

import time

from gpuval_api.crd import GpuValidationSpec
from gpuval_operator import capacity, proofage
from gpuval_operator.control.statuswriter import StatusWriter
from gpuval_operator.nodes.watch import NodeWatch
from gpuval_operator.planning import Candidate
from gpuval_operator.readmodel.validation import ValidationState
from gpuval_operator.run import rollup

# spec.maxProofAgeSeconds: a proof-expired run that found no node to take (they left the
# selection meanwhile) tries again after this long at the soonest.
PROOF_RETRY_SECONDS = 60.0


class FleetStatus:
    def __init__(self, *, state: ValidationState, status: StatusWriter, node_watch: NodeWatch):
        self.state = state
        self.status = status
        self.node_watch = node_watch
        # spec.maxProofAgeSeconds: no proof-expired run before this (PROOF_RETRY_SECONDS).
        self._proof_quiet_until = 0.0

    def _proofs(self, spec: GpuValidationSpec) -> list[proofage.NodeProof] | None:
        """The selected nodes' proofs (None: spec.maxProofAgeSeconds unset, or the nodes not
        listed yet)."""
        if spec.max_proof_age_seconds is None:
            return None
        return self.node_watch.proofs(self.state.run)

    def proof_due_at(self, spec: GpuValidationSpec) -> float | None:
        """When the next proof-expired run is due, with the summary kept for the status and
        the metrics."""
        nodes, age = self._proofs(spec), spec.max_proof_age_seconds
        if nodes is None or age is None:
            self.state.proof = None
            self.status.proof = None
            return None
        summary = proofage.summarize(nodes, age, time.time())
        self.state.proof = summary
        body = rollup.proof_status(summary)
        self._moved(self.status.proof, body)
        self.status.proof = body
        if summary.next_due is None:
            return None
        return max(summary.next_due, self._proof_quiet_until)

    def rest_after_empty_proof_run(self) -> None:
        """A proof-expired run found no node to take: the next waits PROOF_RETRY_SECONDS."""
        self._proof_quiet_until = time.time() + PROOF_RETRY_SECONDS

    def count_capacity(self, spec: GpuValidationSpec) -> bool:
        """Healthy capacity from the node watch's facts, kept for the status and the metrics;
        True when status.capacity changed (a finished run's status is written again)."""
        nodes = self.node_watch.capacities(self.state.failed_gpus())
        if nodes is None:
            return False
        summary = capacity.summarize(nodes, spec.max_proof_age_seconds, time.time())
        self.state.capacity = summary
        body = rollup.capacity_status(summary)
        moved = self._moved(self.status.capacity, body)
        self.status.capacity = body
        return moved

    def _moved(self, before: object, after: object) -> bool:
        """A status body that changed marks the run, so its status is written again."""
        run = self.state.run
        if after == before or run is None:
            return False
        run.dirty = True
        return True

    def stale_first(self, spec: GpuValidationSpec, candidates: list[Candidate]) -> list[Candidate]:
        """A proof-expired run's nodes: the candidates that are due, stalest first."""
        nodes, age = self._proofs(spec), spec.max_proof_age_seconds
        if nodes is None or age is None:
            return []
        order = {n.name: i for i, n in enumerate(proofage.due(nodes, age, time.time()))}
        return sorted((c for c in candidates if c.name in order), key=lambda c: order[c.name])
