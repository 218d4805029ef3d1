"""What `kubectl gpuval baseline` prints: the GpuBaselines one line each, one in detail (its key,
where it came from, each figure's centre and spread, the nodes learning left out), two side by
side (diff), and what a learning from a run gave. Pure."""

from __future__ import annotations

from collections.abc import Sequence

from gpuval_api import figures
from gpuval_api.baseline.learn import Learned
from gpuval_api.baselinemodel import GpuBaselineSpec
from gpuval_api.crd import GpuBaseline
from gpuval_kubectl.render import MAX_LINES, columns

# A figure whose centre moved more than this between two baselines is marked in a diff.
DIFF_MARK = 0.02


def render_list(baselines: Sequence[GpuBaseline]) -> str:
    if not baselines:
        return (
            "No GpuBaselines found (a GpuValidation with spec.baseline learns one; "
            "kubectl gpuval baseline import FILE brings one in)."
        )
    header = ["NAME", "GPU", "GPUS", "POWER", "PCIE", "SOURCE", "FIGURES", "NODES", "LEARNED"]
    rows = [
        [
            b.metadata.name,
            b.spec.key.gpu_product,
            str(b.spec.key.gpu_count),
            f"{b.spec.key.power_limit_watts} W",
            b.spec.key.pcie_link,
            str(b.spec.source.kind),
            str(len(b.spec.figures)),
            str(max((f.nodes for f in b.spec.figures), default=0)),
            b.spec.source.learned_at or "-",
        ]
        for b in sorted(baselines, key=lambda b: b.metadata.name)
    ]
    return columns([header, *rows])


def _figure_rows(spec: GpuBaselineSpec) -> list[list[str]]:
    return [
        [
            f.figure,
            f"{f.centre:g} {f.unit}",
            f"{f.spread:g}",
            str(f.nodes),
            str(f.samples),
            "" if figures.baseline_judged(f.figure) else "not judged",
            f.measured_with,
        ]
        for f in sorted(spec.figures, key=lambda f: figures.baseline_order(f.figure))
    ]


def render_one(baseline: GpuBaseline) -> str:
    """`baseline show NAME`: key, source, the software it was measured with, every figure."""
    spec = baseline.spec
    source = spec.source
    lines = [f"GpuBaseline {baseline.metadata.name}: {spec.key.describe()}"]
    origin = f"  source: {source.kind}" + (f": {source.description}" if source.description else "")
    lines.append(origin)
    if source.learned_at:
        lines.append(
            f"  learned {source.learned_at} from run {source.run} of GpuValidation "
            f"{source.validation}: fraction {source.fraction:g}, {source.nodes_offered} passing "
            "nodes offered"
        )
    versions = spec.learned_with.model_dump(by_alias=True, exclude_none=True)
    if versions:
        lines.append("  measured with: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    header = ["FIGURE", "CENTRE", "SPREAD", "NODES", "SAMPLES", "", "MEASURED WITH"]
    lines += ["Figures:", columns([header, *_figure_rows(spec)], "  ")]
    excluded = source.excluded
    if excluded:
        lines.append(f"Left out by learning: {len(excluded) + source.excluded_omitted}")
        rows = [
            [e.node, e.figure, f"{e.value:g}", f"centre {e.centre:g}", f"round {e.round}"]
            for e in excluded[:MAX_LINES]
        ]
        lines.append(columns(rows, "  "))
        more = len(excluded) + source.excluded_omitted - MAX_LINES
        if more > 0:
            lines.append(f"  ... and {more} more")
    return "\n".join(lines)


def render_diff(first: tuple[str, GpuBaselineSpec], second: tuple[str, GpuBaselineSpec]) -> str:
    """`baseline diff A B`: the keys, then each figure's centres side by side and B/A; a figure
    that moved more than DIFF_MARK is marked, one only one of them has is said."""
    (a_name, a), (b_name, b) = first, second
    lines = [f"A {a_name}: {a.key.describe()}", f"B {b_name}: {b.key.describe()}"]
    if a.key != b.key:
        lines.append(
            "The keys differ: nodes of one are not judged against the other"
            + (" (per-GPU figures still compare)" if a.key.same_gpu(b.key) else "")
        )
    names = sorted(
        {f.figure for f in a.figures} | {f.figure for f in b.figures}, key=figures.baseline_order
    )
    rows = [["FIGURE", "A", "B", "B/A", ""]]
    for name in names:
        fa, fb = a.figure(name), b.figure(name)
        if fa is None or fb is None:
            only = "A" if fa is not None else "B"
            rows.append(
                [
                    name,
                    f"{fa.centre:g} {fa.unit}" if fa else "-",
                    f"{fb.centre:g}" if fb else "-",
                    "",
                    f"only in {only}",
                ]
            )
            continue
        ratio = fb.centre / fa.centre
        mark = "moved" if abs(ratio - 1) > DIFF_MARK else ""
        if fa.measured_with != fb.measured_with:
            mark = f"measured otherwise: {fa.measured_with} / {fb.measured_with}"
        rows.append([name, f"{fa.centre:g} {fa.unit}", f"{fb.centre:g}", f"{ratio:.3f}", mark])
    lines.append(columns(rows))
    return "\n".join(lines)


def render_learned(learned: Sequence[tuple[Learned, str, str]]) -> str:
    """What `baseline learn` did, per key (outcome, the GpuBaseline's name, what was done with
    it: created, replaced, would create): the nodes left out and the failed ones not used; or
    why nothing was learned."""
    if not learned:
        return "The run has no node with a readable result: nothing to learn from."
    lines = []
    for outcome, name, done in learned:
        key = outcome.key.describe()
        if outcome.spec is None:
            lines.append(f"{key}: nothing learned: {outcome.problem}")
            continue
        lines.append(
            f"{key}: {done} GpuBaseline {name} from {len(outcome.kept)} of "
            f"{outcome.spec.source.nodes_offered} passing nodes ({outcome.rounds} rounds)"
        )
        if outcome.bimodal:
            lines.append(f"  {outcome.bimodal}")
        for excluded in outcome.excluded[:MAX_LINES]:
            lines.append(
                f"  left out {excluded.node}: {excluded.figure} {excluded.value:g} against "
                f"centre {excluded.centre:g} (round {excluded.round})"
            )
        if outcome.failed:
            lines.append(f"  not used (failed): {', '.join(outcome.failed[:MAX_LINES])}")
    return "\n".join(lines)
