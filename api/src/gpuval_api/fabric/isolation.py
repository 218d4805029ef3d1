"""Pure: who a fabric group's pair rounds name. The agents run it on their group's pairs, the
operator again on every group's pairs against the whole run's reference (docs/operator/fabric.md,
"How the fabric scales").

The pair rounds (`gpuval_api.fabric.pair_rounds`) put every node of a group of three or more in
two pairs with different partners; one confirmation round then tests each suspect node with a
node known good and each slow link again. So a group's isolation takes at most four rounds in
the same pods (two pair rounds and the confirmation for an even group, three and the confirmation
for an odd one), whatever the group's size and the fleet's.

- The reference a pair is judged against is what a healthy pair reaches: the median over the
  nodes of each node's best pair. A slow node lowers only its own best figure, so it cannot drag
  the reference down, even in a group of three where it sits in two of the three pairs (the
  median pair would be its own slow figure there).
- A node slow in every pair it was in (two or more) is a suspect; confirmed by a slow pair with a
  known-good node (or left unconfirmed when no good node is free), it is a slow node.
- A slow pair whose two ends are not slow nodes is a slow link, unless it was fast when tested
  again; a suspect that was fast with a good node is cleared, and its one slow pair that no slow
  node explains is a slow link (two such pairs: the node was slow for a while, nothing is named).
- A slow pair one of whose ends has no other evidence (the one pair of a group of two) is a slow
  pair: the link or either node, and the rounds cannot tell which (FabricSlowPair, NotRun).

The same method judges the bandwidth pairs (FabricPair, their busbw) and the training pairs
(gpuval_api.fabric.FabricTrainPair, their tokens/s per GPU): each pair has a `figure`, higher
is better, and a `Measure` says in which words and under which reasons it is named.

Nothing here calls the API, reads a clock or does I/O.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from gpuval_api.fabric import FabricPair
from gpuval_api.reasons import Reason


class Pair(Protocol):
    """One pair of a round (round 0: the confirmation), with its figure (higher is better; None
    when it failed)."""

    @property
    def round(self) -> int: ...
    @property
    def a(self) -> str: ...
    @property
    def b(self) -> str: ...
    @property
    def figure(self) -> float | None: ...


P = TypeVar("P", bound=Pair)


@dataclass(frozen=True, slots=True)
class Measure:
    """What a pair's figure is in a message, and the reasons the rounds name."""

    label: str  # before a list of figures: "busbw"
    unit: str  # after a figure: "GB/s"
    pair: str  # what one pair is called: "pair"
    slow_node: Reason
    slow_link: Reason
    slow_pair: Reason
    precision: str = ".1f"
    lead: str = ""  # before one figure: "" ("23.5 GB/s")

    def value(self, figure: float) -> str:
        return format(figure, self.precision)

    def of(self, pair: Pair) -> str:
        return self.value(pair.figure) if pair.figure is not None else "failed"

    def shown(self, pair: Pair) -> str:
        """One pair's figure with its unit, or 'failed'."""
        return f"{self.lead}{self.of(pair)} {self.unit}" if pair.figure is not None else "failed"


BUSBW = Measure(
    "busbw",
    "GB/s",
    "pair",
    Reason.FABRIC_SLOW_NODE,
    Reason.FABRIC_SLOW_LINK,
    Reason.FABRIC_SLOW_PAIR,
)
# The training pairs (gpuval_api.fabric.FabricTrainPair): tokens/s per GPU. A slow link or pair is
# one as in the all-reduce; a node slow in every training pair has its own reason.
TRAINING = Measure(
    "training",
    "tokens/s per GPU",
    "training pair",
    Reason.FABRIC_TRAIN_SLOW_NODE,
    Reason.FABRIC_SLOW_LINK,
    Reason.FABRIC_SLOW_PAIR,
    precision=",.0f",
    lead="training ",
)


@dataclass(frozen=True, slots=True)
class Blame:
    """What the fabric found against one node."""

    node: str
    reason: Reason
    message: str
    partners: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Suspects:
    nodes: tuple[str, ...]  # slow in every pair they were in (two or more)
    links: tuple[tuple[str, str], ...]  # slow pairs whose ends are not suspects
    good: tuple[str, ...]  # partners for the confirmation: fine everywhere first, then cleared


def slow(pair: Pair, floor: float) -> bool:
    """A pair that failed or came in below the floor."""
    return pair.figure is None or pair.figure < floor


def _other(pair: Pair, node: str) -> str:
    return pair.b if pair.a == node else pair.a


def _by_node(pairs: Iterable[P]) -> dict[str, list[P]]:
    seen: dict[str, list[P]] = {}
    for pair in pairs:
        seen.setdefault(pair.a, []).append(pair)
        seen.setdefault(pair.b, []).append(pair)
    return seen


def round_pairs(pairs: Iterable[P]) -> list[P]:
    """The pairs of the pair rounds (round 1 and up), the confirmation round left out."""
    return [p for p in pairs if p.round >= 1]


def best_pairs(pairs: Iterable[Pair]) -> dict[str, float]:
    """Each node's best pair figure in the pair rounds (a failed pair has none)."""
    best: dict[str, float] = {}
    for pair in round_pairs(pairs):
        figure = pair.figure
        if figure is None:
            continue
        for node in (pair.a, pair.b):
            best[node] = max(best.get(node, 0.0), figure)
    return best


def reference(pairs: Iterable[Pair]) -> float | None:
    """What a healthy pair reaches: the median over nodes of each node's best pair figure in the
    pair rounds (a failed pair has none). None when no pair has a figure."""
    best = best_pairs(pairs)
    return statistics.median(best.values()) if best else None


def reference_busbw(pairs: Iterable[FabricPair]) -> float | None:
    """The bandwidth pairs' reference busbw (`reference`)."""
    return reference(pairs)


def find_suspects(pairs: Sequence[Pair], floor: float) -> Suspects:
    """From the pair rounds: nodes slow in all their pairs, slow pairs between other nodes, and
    the nodes a suspect can be confirmed with (a fast pair, and slow only with suspects)."""
    seen = _by_node(round_pairs(pairs))
    suspects = sorted(
        n for n, ps in seen.items() if len(ps) >= 2 and all(slow(p, floor) for p in ps)
    )
    marked = set(suspects)
    fine = sorted(n for n, ps in seen.items() if not any(slow(p, floor) for p in ps))
    cleared = sorted(
        n
        for n, ps in seen.items()
        if n not in marked
        and any(slow(p, floor) for p in ps)
        and any(not slow(p, floor) for p in ps)
        and all(_other(p, n) in marked for p in ps if slow(p, floor))
    )
    links = sorted(
        (p.a, p.b)
        for p in round_pairs(pairs)
        if slow(p, floor) and p.a not in marked and p.b not in marked
    )
    return Suspects(tuple(suspects), tuple(links), tuple(fine + cleared))


def confirmation_pairs(suspects: Suspects, pairs: Sequence[Pair]) -> list[tuple[str, str]]:
    """One round: each suspect node with a distinct good node (one it was not paired with when
    there is one), each slow link again; no node in two pairs. A suspect without a free good
    partner stays unconfirmed."""
    partners = {n: {_other(p, n) for p in ps} for n, ps in _by_node(round_pairs(pairs)).items()}
    busy: set[str] = set()
    chosen: list[tuple[str, str]] = []
    for node in suspects.nodes:
        free = [g for g in suspects.good if g not in busy]
        fresh = [g for g in free if g not in partners.get(node, set())]
        if fresh or free:
            partner = (fresh or free)[0]
            chosen.append((node, partner))
            busy.update((node, partner))
    for a, b in suspects.links:
        if a not in busy and b not in busy:
            chosen.append((a, b))
            busy.update((a, b))
    return chosen


def _listed(nodes: Sequence[str], one: str, many: str) -> str:
    return f"{', '.join(nodes)} {one if len(nodes) == 1 else many}"


def _slow_node(
    node: str,
    mine: Sequence[Pair],
    checks: Sequence[Pair],
    named: set[str],
    floor: float,
    *,
    measure: Measure,
) -> Blame:
    partners = tuple(sorted({_other(p, node) for p in mine}))
    figures = ", ".join(measure.of(p) for p in mine)
    text = (
        f"slow in every {measure.pair} it was in ({measure.label} {figures} {measure.unit}, "
        f"floor {measure.value(floor)})"
    )
    if checks:
        again = ", ".join(f"{_other(c, node)} ({measure.shown(c)})" for c in checks)
        text += f" and again with a good node: {again}"
    fine = [p for p in partners if p not in named]
    also = [p for p in partners if p in named]
    if fine:
        word = "partner" if len(fine) == 1 else "partners"
        text += f"; its {word} {_listed(fine, 'was', 'were')} fine with other nodes"
    if also:
        own = "its own" if len(also) == 1 else "their own"
        text += f"; {_listed(also, 'is', 'are')} slow in every {measure.pair} too, named on {own}"
    return Blame(node, measure.slow_node, text, partners)


def _link(pair: Pair, evidence: set[str], floor: float, measure: Measure) -> list[Blame]:
    shown, least = measure.shown(pair), measure.value(floor)
    found: list[Blame] = []
    alone = [n for n in (pair.a, pair.b) if n not in evidence]
    for node, other in ((pair.a, pair.b), (pair.b, pair.a)):
        if alone:
            text = (
                f"the {measure.pair} with {other} is slow ({shown}, floor {least}): the link "
                f"between them or either node; {_listed(alone, 'was', 'were')} tested with no "
                "other partner, so the pair rounds cannot tell which"
            )
            found.append(Blame(node, measure.slow_pair, text, (other,)))
            continue
        text = (
            f"the link to {other} is slow ({shown}, floor {least}); both nodes are fine with "
            "other partners"
        )
        found.append(Blame(node, measure.slow_link, text, (other,)))
    return found


def blame(pairs: Sequence[Pair], floor: float, measure: Measure = BUSBW) -> list[Blame]:
    """Who the pair and confirmation rounds name (the module docstring says how), by node."""
    suspects = find_suspects(pairs, floor)
    rounds = round_pairs(pairs)
    confirmations = [p for p in pairs if p.round == 0]
    good = set(suspects.good)
    named: set[str] = set()
    cleared: list[str] = []
    checks_of: dict[str, list[Pair]] = {}
    for node in suspects.nodes:
        checks = [c for c in confirmations if node in (c.a, c.b) and _other(c, node) in good]
        if checks and not any(slow(c, floor) for c in checks):
            cleared.append(node)  # fast with a good node: a passing slowness, or a link
            continue
        named.add(node)
        checks_of[node] = checks
    # Who has evidence of being fine: a fast pair, or a fast confirmation.
    evidence = {n for p in pairs if not slow(p, floor) for n in (p.a, p.b)}
    candidates = [p for p in rounds if slow(p, floor) and p.a not in named and p.b not in named]
    transient = {
        n for n in cleared if sum(1 for p in candidates if n in (p.a, p.b)) >= 2
    }  # slow with two partners no slow node explains, then fast: nothing to name
    found = [
        _slow_node(
            n, [p for p in rounds if n in (p.a, p.b)], checks_of[n], named, floor, measure=measure
        )
        for n in sorted(named)
    ]
    for pair in candidates:
        if pair.a in transient or pair.b in transient:
            continue
        again = next((c for c in confirmations if {c.a, c.b} == {pair.a, pair.b}), None)
        if again is not None and not slow(again, floor):
            continue  # fast when tested again: a passing slowness
        found += _link(pair, evidence, floor, measure)
    return sorted(found, key=lambda b: (b.node, b.reason))
