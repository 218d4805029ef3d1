"""The repair loop (spec.remediation): a node's record in it (record), the state machine that moves
it on (machine, pure), what gpuval reads of a remediation object and of a failing report (objects,
pure), the object made from a template (template, pure), and the calls on the engine's objects
(effects). The keeper that carries it out each pass is gpuval_operator.control.repair.keeper."""
