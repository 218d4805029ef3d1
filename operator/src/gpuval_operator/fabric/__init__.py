"""The fabric phase of a run (spec.fabric, cross-node NCCL): groups planned (plan), their pods
(pods) and rendezvous ports (ports), the facts of their reports and pods (facts, podfacts), the
phase's state (state), its pure decisions (lifecycle) and run-wide verdicts (verdicts), its part of
the status (rollup), and the driver that carries it out (driver)."""
