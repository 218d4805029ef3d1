"""The fabric phase carried out (spec.fabric): its driver, one tick at a time (driver), each
member's settled verdict given to the run (settling), and a fabric-failed node's evidence
(evidence). The pure decisions they follow are gpuval_operator.fabric's."""
