"""A fabric with injected faults, as figures, for the pure tests: each pair's busbw is the simulated
backend's model (gpuval_agent.fabric.simulated: BASE times the slower node's factor, the link's and
the path's between the two nodes' domains), and a group's rounds are chosen by the same functions
the agents call (gpuval_api.fabric.pair_rounds, then gpuval_api.fabric.isolation's confirmation
round against the group's own floor). Measures nothing: the figures are the model's."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpuval_api.fabric import FabricPair, FabricThresholds, pair_rounds
from gpuval_api.fabric.isolation import confirmation_pairs, find_suspects, reference_busbw

BASE = 380.0
GIB = 1 << 30


@dataclass
class Fabric:
    speed: dict[str, float] = field(default_factory=dict)  # slow nodes
    links: dict[frozenset[str], float] = field(default_factory=dict)  # slow links
    domain: Mapping[str, str] = field(default_factory=dict)  # node -> its domain
    paths: dict[frozenset[str], float] = field(default_factory=dict)  # between two domains
    uplinks: dict[str, float] = field(default_factory=dict)  # out of one domain

    def edge(self, a: str, b: str) -> float:
        factor = min(self.speed.get(a, 1.0), self.speed.get(b, 1.0))
        factor *= self.links.get(frozenset((a, b)), 1.0)
        da, db = self.domain.get(a), self.domain.get(b)
        if da is not None and db is not None and da != db:
            factor *= min(
                self.paths.get(frozenset((da, db)), 1.0),
                self.uplinks.get(da, 1.0),
                self.uplinks.get(db, 1.0),
            )
        return BASE * factor

    def pair(self, number: int, a: str, b: str) -> FabricPair:
        return FabricPair(round=number, a=a, b=b, bytes=GIB, busbw_gbps=self.edge(a, b))

    def group_busbw(self, nodes: Sequence[str]) -> float:
        return min(self.edge(n, nodes[(i + 1) % len(nodes)]) for i, n in enumerate(nodes))

    def rounds(
        self, nodes: Sequence[str], thresholds: FabricThresholds | None = None
    ) -> tuple[FabricPair, ...]:
        """The group's pair rounds and the confirmation round its agents would choose."""
        found = [
            self.pair(number, nodes[a], nodes[b])
            for number, pairs in enumerate(pair_rounds(len(nodes)), start=1)
            for a, b in pairs
        ]
        floor = (thresholds or FabricThresholds()).floor(reference_busbw(found))
        chosen = confirmation_pairs(find_suspects(found, floor), found)
        return tuple(found + [self.pair(0, a, b) for a, b in chosen])
