"""The fabric phase of a run (spec.fabric, cross-node NCCL): groups planned (plan), their pods
(pods) and rendezvous ports (ports), the facts of their reports and pods (facts, podfacts), the
phase's state (state), its pure decisions (lifecycle, early) and run-wide verdicts (verdicts), the
paths between domains (paths), its part of the status (rollup). It is carried out by
gpuval_operator.control.fabric.driver, above it; nothing here calls the API."""
