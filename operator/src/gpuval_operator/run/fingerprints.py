"""Fleet-wide burn fingerprints: the pure comparison of the nodes' burn reference results.

Each agent verifies every burn iteration against a reference computed on the same GPU, and the
references of its GPUs against each other. A GPU that computes the same wrong answer every time,
on a one-GPU node (or on every GPU of a node), passes that. Across a run, nodes whose
determinants are equal (GPU model and SM count, matrix size, precision, framework and BLAS
versions) must compute bit-identical references; a node that differs from a clear majority of
such peers is a silent-data-corruption suspect. Without a majority (a tie, or a lone peer) no
node is blamed: which side is wrong cannot be told.

The training check's losses are compared the same way, by the one comparison the agent's
benchmark and the tests use too (gpuval_api.training.compare_losses): within a GPU stack bit
for bit, across stacks within the spec's tolerance; it also says how each stack was compared and
which could not be decided (two nodes that differ, no majority).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpuval_api.training import LossComparison, NodeLosses, compare_losses
from gpuval_operator.run.facts import Fingerprint

# A majority must have at least this many nodes before a node that differs from it is blamed.
MIN_MAJORITY = 2


@dataclass(frozen=True, slots=True)
class FingerprintOutlier:
    node: str
    precision: str
    determinants: str
    value: str
    majority: str
    peers: int  # nodes that computed the majority value

    @property
    def field(self) -> str:
        return f"burnFingerprint.{self.precision}"

    def message(self) -> str:
        return (
            f"{self.precision} burn reference fingerprint {self.value} differs from {self.majority}"
            f", which {self.peers} nodes with the same determinants ({self.determinants}) computed"
        )


def fingerprint_outliers(
    nodes: Mapping[str, Sequence[Fingerprint]],
) -> list[FingerprintOutlier]:
    """Nodes whose fingerprint differs from a clear majority of their peers, by node and
    precision."""
    groups: dict[tuple[str, str], dict[str, str]] = {}
    for node, fingerprints in nodes.items():
        for precision, determinants, value in fingerprints:
            groups.setdefault((precision, determinants), {})[node] = value
    outliers: list[FingerprintOutlier] = []
    for (precision, determinants), values in sorted(groups.items()):
        counts = Counter(values.values()).most_common()
        majority, peers = counts[0]
        if len(counts) == 1 or peers < MIN_MAJORITY or counts[1][1] == peers:
            continue
        outliers.extend(
            FingerprintOutlier(node, precision, determinants, value, majority, peers)
            for node, value in sorted(values.items())
            if value != majority
        )
    return sorted(outliers, key=lambda o: (o.node, o.precision))


def training_comparison(nodes: Mapping[str, NodeLosses | None], tolerance: float) -> LossComparison:
    """The run's training losses compared (gpuval_api.training.compare_losses): the nodes that
    differ, how each stack was compared, what could not be decided; nodes that did not train are
    left out."""
    return compare_losses(
        {node: losses for node, losses in nodes.items() if losses is not None}, tolerance
    )
