"""The circuit breaker on node actions: its pure decisions (rules) and the operator-wide count of
the nodes gpuval holds out of service, admitted and reserved under one lock (operatorwide). One
validation's breaker around its run's node actions is gpuval_operator.control.runbreaker."""
