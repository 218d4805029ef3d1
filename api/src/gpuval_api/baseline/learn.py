"""Pure: a baseline learned from a run's passing nodes, SuperBench's way (its data diagnosis):
compute each figure's centre over the nodes kept, leave out every node with a figure off its
centre by more than the fraction, compute again, until no node is left out. A failed node is
never used, and every node left out is named with the figure that broke the rule.

The centre is the median of every sample (GPU, GPU pair, node pair) of the nodes kept, and the
spread 1.4826 x their median absolute deviation, both robust to the outliers being looked for.

Each figure is learned for itself: a figure on which the nodes disagree (more than half of them
off its centre in a round, or a spread wider than the fraction of its centre) is left out of the
baseline and named with why (`Learned.left_out`, the GpuBaseline's source), and the others are
learned without it.

A fleet of two kinds (gpuval_api.baseline.modes: a gap test on each judged figure, whatever the
modes' sizes, so halves at 1.0 and 0.9 are found as surely as 6 slow nodes of 10) is bimodal: a
baseline learned in the middle of it, or of its commoner mode, would be chosen silently. Learning
then learns nothing for the key and names both groups and their nodes, until a person chooses
(`choose_mode`: `kubectl gpuval baseline learn` learns the better mode, better by more than the
fraction on more judged figures than it is worse, and names the other's nodes; or a GpuBaseline
written by hand or imported). A platform engineer never gets a mode, nor the middle of two, as the
baseline without a word.

The rounds are gpuval_api.baseline.pool's, the two modes gpuval_api.baseline.modes'.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from gpuval_api import figures
from gpuval_api.baseline.modes import LEARNED_NOTHING, Mode, choose, modes_text, two_modes
from gpuval_api.baseline.pool import MAD_TO_SIGMA, Converged, NodeFigures, Pool, converge, robust
from gpuval_api.baselinemodel import (
    MAX_EXCLUDED,
    MAX_FIGURES,
    BaselineKey,
    BaselineSource,
    ExcludedNode,
    FigureBaseline,
    GpuBaselineSpec,
    SourceKind,
    StackVersions,
)

# What learning's callers read here: the node as learning holds it, the robust centre, the modes.
__all__ = [
    "LEARNED_NOTHING",
    "MAD_TO_SIGMA",
    "Learned",
    "Mode",
    "NodeFigures",
    "keys",
    "learn",
    "robust",
]


@dataclass(frozen=True, slots=True)
class Learned:
    """The outcome for one key: the baseline (None when too few nodes agree, `problem` says
    why), the nodes kept, the passing nodes left out and the failed nodes never used; for a
    bimodal fleet its two modes (the better first) and what was said."""

    key: BaselineKey
    spec: GpuBaselineSpec | None
    kept: tuple[str, ...]
    excluded: tuple[ExcludedNode, ...]
    failed: tuple[str, ...]
    problem: str = ""
    rounds: int = 0
    modes: tuple[Mode, ...] = ()
    bimodal: str = ""
    # The figures left out of the baseline, each with why ("burn.bf16: ..."): the nodes disagreed
    # on that figure, which stops the learning of no other figure.
    left_out: tuple[str, ...] = ()


def _figures(pool: Pool) -> list[FigureBaseline]:
    out = []
    for figure, (values, names) in pool.by_figure().items():
        centre, spread = robust(values)
        out.append(
            FigureBaseline(
                figure=figure,
                unit=figures.baseline_unit(figure),
                centre=round(centre, 3),
                spread=round(spread, 3),
                nodes=len(names),
                samples=len(values),
                measured_with=pool.settings[figure],
            )
        )
    return sorted(out, key=lambda f: figures.baseline_order(f.figure))[:MAX_FIGURES]


def _narrow(
    learned: list[FigureBaseline], dropped: dict[str, str], fraction: float
) -> tuple[list[FigureBaseline], list[str]]:
    """The figures learned less the judged ones whose spread is more than `fraction` of their
    centre, and each figure left out (those and the rounds' `dropped`) with why: one noisy
    figure is no baseline, the others still are."""
    kept, left_out = [], [f"{figure}: {why}" for figure, why in dropped.items()]
    for f in learned:
        tolerance = figures.of_baseline(f.figure).tolerance
        if figures.baseline_judged(f.figure) and f.spread > fraction * f.centre + tolerance:
            left_out.append(
                f"{f.figure}: its spread ({f.spread:g} around {f.centre:g}) is more than "
                f"{fraction:g} of its centre: the nodes disagree too much on it"
            )
        else:
            kept.append(f)
    return kept, left_out


def learn(
    nodes: Iterable[NodeFigures],
    key: BaselineKey,
    *,
    fraction: float,
    min_nodes: int,
    source: BaselineSource | None = None,
    versions: StackVersions | None = None,
    choose_mode: bool = False,
) -> Learned:
    """Learn `key`'s baseline from the nodes of that key that passed (see the module doc); of
    a bimodal stack nothing, or with `choose_mode` (a person's choice) its better mode."""
    mine = [n for n in nodes if n.key == key]
    failed = tuple(sorted(n.node for n in mine if not n.passed))
    everyone = {n.node: n for n in mine if n.passed}
    offered = len(everyone)
    split = two_modes(everyone, fraction)
    modes = split.modes if split is not None else None
    if split is None:
        converged = converge(Pool(dict(everyone)), fraction)
        problem = converged.problem
    elif choose_mode:
        choice = choose(split, everyone, fraction, min_nodes)
        converged, problem = choice.converged, choice.problem
    else:
        converged, problem = Converged(Pool({}), [], 0), LEARNED_NOTHING
    pool = converged.pool
    if not problem and len(pool.nodes) < min_nodes:
        problem = (
            f"{len(pool.nodes)} of {offered} passing nodes agree within {fraction:g} of the "
            f"centres; baseline.minNodes is {min_nodes}"
        )
    learned_figures = _figures(pool) if not problem else []
    learned_figures, left_out = _narrow(learned_figures, pool.dropped, fraction)
    if left_out and not any(figures.baseline_judged(f.figure) for f in learned_figures):
        # Only figures kept for the picture are left: no baseline.
        problem = problem or (
            "the nodes disagree too much for one baseline on every judged figure: "
            + "; ".join(left_out)
        )
        learned_figures = []
    bimodal = modes_text(key, *modes, chosen=bool(learned_figures)) if modes else ""
    if bimodal and problem:
        problem = bimodal if problem == LEARNED_NOTHING else f"{bimodal} ({problem})"
    spec = None
    if learned_figures:
        base = source or BaselineSource(kind=SourceKind.LEARNED)
        description = base.description + (f"; {bimodal}" if bimodal else "")
        description += "".join(f"; left out {why}" for why in left_out)
        spec = GpuBaselineSpec(
            key=key,
            figures=learned_figures,
            source=base.model_copy(
                update={
                    "description": description[:1024],
                    "fraction": fraction,
                    "nodes_offered": offered,
                    "excluded": converged.excluded[:MAX_EXCLUDED],
                    "excluded_omitted": max(0, len(converged.excluded) - MAX_EXCLUDED),
                }
            ),
            learned_with=versions or StackVersions(),
        )
    elif not problem:
        problem = "the nodes measured no figure a baseline holds"
    return Learned(
        key,
        spec,
        kept=tuple(sorted(pool.nodes)),
        excluded=tuple(converged.excluded),
        failed=failed,
        problem=problem,
        rounds=converged.rounds,
        modes=modes or (),
        bimodal=bimodal,
        left_out=tuple(left_out),
    )


def keys(nodes: Iterable[NodeFigures]) -> list[BaselineKey]:
    """The distinct keys of the nodes, commonest first."""
    counts = Counter(n.key.model_dump_json() for n in nodes if n.key is not None)
    return [BaselineKey.model_validate_json(k) for k, _ in counts.most_common()]
