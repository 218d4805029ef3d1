"""The repair loop carried out (spec.remediation): its keeper, one pass per tick (keeper), what it
reads of the nodes and the run (reading, pure), the engine's objects made from the template or
found (objects), and a request withdrawn when its node passed by another path (withdraw). The pure
state machine it follows is gpuval_operator.remediation's."""
