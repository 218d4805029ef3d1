"""The rendezvous ports of the fabric groups an operator has open.

Rank 0's agent listens on the group's port and the five after it; the port is picked at random in
a high range, never one another open group of this operator holds, and recorded on the group's
pods (annotation gpuval.dev/fabric-port) so a restarted operator keeps it. In the local cluster
every rank 0 listens on the same loopback (the pod runner moves the rendezvous there), so the
ports must differ across groups; in a cluster, with hostNetwork, they share rank 0's node.
"""

from __future__ import annotations

import random

# Rank 0 listens on PORT (the agents' coordinator) and PORT+1..PORT+5 (the rank processes' stores):
# slots of six below Linux's ephemeral range (32768-60999), so an outgoing connection's port on
# rank 0's node (with hostNetwork) rarely takes one.
PORT_LOW, PORT_HIGH, PORT_SPAN = 20000, 32760, 6


class PortPool:
    """Rendezvous ports of the groups this operator has open, across its validations."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self.used: set[int] = set()
        self.rng = rng or random.Random()

    def take(self) -> int:
        slots = (PORT_HIGH - PORT_LOW) // PORT_SPAN
        free = slots - len(self.used)
        if free <= 0:
            raise RuntimeError(f"every one of the {slots} fabric rendezvous ports is in use")
        while True:
            port = PORT_LOW + self.rng.randrange(slots) * PORT_SPAN
            if port not in self.used:
                self.used.add(port)
                return port

    def claim(self, port: int) -> None:
        self.used.add(port)

    def release(self, port: int | None) -> None:
        if port is not None:
            self.used.discard(port)
