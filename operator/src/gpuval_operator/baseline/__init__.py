"""Baselines and history of a run (spec.baseline): what the operator keeps of a report's
comparison and of a node's past runs (facts), what a run keeps (state), the pure decisions
(judge: what an agent is given, drift, the fabric's pairs, the run's status). They are carried out
(list and learn GpuBaselines, name drifting nodes, say a systemic finding) by
gpuval_operator.control.baseline.driver, above it."""
