"""Pure: the operator's decisions about baselines and history (docs/operator/baselines.md,
"Baselines and history"). Nothing here calls the API; gpuval_operator.control.baseline.driver reads,
these decide,
it writes.

- `start`: what a run judges against (spec.baseline.names, or every GpuBaseline, learned before
  manual before shipped), and which judges where two share a key;
- `agent_env`: the GpuBaselines an agent pod is given (GPUVAL_BASELINE), for its GPU product,
  its own stack's first;
- `drift`: a node's key figures against its own kept runs (DriftFromHistory);
- `fabric_below`: a node's fabric pairs against its baseline's `fabric.pair` (BelowBaseline);
- `run_status`: the bounded `status.baseline`, systemic figures included;
- `stack_versions`: the software the nodes a baseline was learned from ran.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from gpuval_api import AgentEnv
from gpuval_api.baseline import files, fleet, history, rules, samples
from gpuval_api.baseline.history import Drift
from gpuval_api.baseline.rules import Below, Candidate
from gpuval_api.baselinemodel import (
    MAX_BIMODAL,
    MAX_LISTED,
    MAX_NAMES,
    BaselineRunStatus,
    BaselineSettings,
    DriftingNode,
    GpuBaselineSpec,
    HistorySettings,
    RestartedNode,
    SourceKind,
    StackVersions,
)
from gpuval_api.crd import GpuBaseline, ObjectMeta
from gpuval_api.fabric import FabricPair
from gpuval_api.figures import history_figures
from gpuval_api.gfd import label_names_product
from gpuval_api.mig import parent_product
from gpuval_operator.baseline.facts import Comparison, History
from gpuval_operator.baseline.state import DriftNote, RunBaselines

# A pod's environment variable must stay far below the kernel's 128 KiB per string; a fleet has a
# few baselines of 2-7 KiB each.
MAX_ENV_BYTES = 64 * 1024
NOTE_LENGTH = 1024

# The check whose figure fell, for a DriftFromHistory failure: the registry's history figures'.
DRIFT_CHECKS: dict[str, str] = {f.key: f.check for f in history_figures()}


# Which of two GpuBaselines of one key judges when spec.baseline.names does not say: the one
# measured on this fleet, before one written by hand, before one shipped (measured elsewhere).
PREFERENCE = (SourceKind.LEARNED, SourceKind.MANUAL, SourceKind.SHIPPED)


def _preferred(candidate: Candidate) -> tuple[int, str]:
    return PREFERENCE.index(candidate[1].source.kind), candidate[0]


def start(settings: BaselineSettings, listed: Sequence[Candidate]) -> RunBaselines:
    """A run's baselines: the named ones in the order named (missing ones said), else every
    GpuBaseline, learned ones first, then manual, then shipped, each kind by name. Where two
    share a key the first judges (the agent takes the first that matches): the notes say which
    and why."""
    by_name = dict(listed)
    if settings.names:
        chosen = [(n, by_name[n]) for n in settings.names if n in by_name]
        missing = tuple(n for n in settings.names if n not in by_name)
    else:
        chosen, missing = sorted(listed, key=_preferred), ()
    found = RunBaselines(settings, chosen, list(listed), missing)
    if missing:
        found.notes.append(f"spec.baseline.names: no GpuBaseline {', '.join(missing)}")
    found.notes += shared_keys(chosen, named=bool(settings.names))
    return found


def shared_keys(chosen: Sequence[Candidate], *, named: bool) -> list[str]:
    """For each key two or more of `chosen` (in order of preference) share: which judges, and
    why."""
    by_key: dict[str, list[Candidate]] = {}
    for candidate in chosen:
        by_key.setdefault(candidate[1].key.model_dump_json(), []).append(candidate)
    notes = []
    for group in by_key.values():
        if len(group) < 2:
            continue
        (first, spec), others = group[0], group[1:]
        kinds = [str(other.source.kind) for _, other in others]
        if named:
            why = "named first in spec.baseline.names"
        elif all(other.source.kind is spec.source.kind for _, other in others):
            why = f"all {spec.source.kind}: the first by name"
        else:
            why = f"{spec.source.kind} before {', '.join(dict.fromkeys(kinds))}: measured on this "
            why += "fleet before written by hand before shipped"
        rest = ", ".join(name for name, _ in others)
        notes.append(
            f"GpuBaselines {first} and {rest} share the key {spec.key.describe()}: {first} "
            f"judges ({why}); spec.baseline.names chooses another"
        )
    return notes


def product_matches(label: str, spec: GpuBaselineSpec) -> bool:
    """A node's `nvidia.com/gpu.product` label (GPU feature discovery writes NVML's name with
    dashes, and may add -SHARED or a MIG profile) against a baseline's GPU model (a MIG
    profile's baseline: its parent GPU's model, gpuval_api.gfd.label_names_product)."""
    return label_names_product(label, spec.key.gpu_product)


def _for_agent(name: str, spec: GpuBaselineSpec) -> GpuBaseline:
    """The baseline as an agent needs it: without the nodes learning left out (up to 50)."""
    source = spec.source.model_copy(update={"excluded": [], "excluded_omitted": 0})
    spec = spec.model_copy(update={"source": source})
    return GpuBaseline(metadata=ObjectMeta(name=name), spec=spec)


def _own_first(
    candidates: Sequence[Candidate], label: str, model: str, gpus: int
) -> list[Candidate]:
    """`candidates` with the node's own stack first: its GPU model (as its last report said it,
    else as its label names it) at its GPU count, then its model at any count, then the rest;
    the order of preference kept within each."""

    def mine(spec: GpuBaselineSpec) -> bool:
        product = spec.key.gpu_product
        if model:
            return parent_product(product)[0] == model
        return bool(label) and label_names_product(label, product)

    def rank(candidate: Candidate) -> int:
        spec = candidate[1]
        if not mine(spec):
            return 2
        return 0 if spec.key.gpu_count == gpus else 1

    return sorted(candidates, key=rank)


def agent_env(
    baselines: RunBaselines, product: str, *, model: str = "", gpus: int = 0
) -> list[dict[str, str]]:
    """GPUVAL_BASELINE, GPUVAL_BASELINE_FRACTION and GPUVAL_NODE_GPU_PRODUCT for a node whose GPU
    model label is `product` ("" when it has none: every baseline), known to have `gpus` GPUs of
    `model` (its last report's; "" when none is in); none when mode Off. The node's own stack's
    baselines go first, so the MAX_ENV_BYTES budget (the rest are left out: the agent takes the
    first match) never leaves an unlabelled node without its own."""
    if not baselines.judging:
        return []
    cache = f"{product}\0{model}\0{gpus}"
    cached = baselines.env.get(cache)
    if cached is not None:
        return cached
    chosen: list[GpuBaseline] = []
    text = ""
    for name, spec in _own_first(baselines.candidates, product, model, gpus):
        if product and not product_matches(product, spec):
            continue
        attempt = files.to_yaml([*chosen, _for_agent(name, spec)])
        if len(attempt.encode()) > MAX_ENV_BYTES:
            break
        chosen.append(_for_agent(name, spec))
        text = attempt
    env = [{"name": AgentEnv.BASELINE, "value": text}] if chosen else []
    if product:
        env.append({"name": AgentEnv.NODE_GPU_PRODUCT, "value": product})
    if env:
        fraction = str(baselines.settings.fraction)
        env.insert(1 if chosen else 0, {"name": AgentEnv.BASELINE_FRACTION, "value": fraction})
    baselines.env[cache] = env
    return env


def drift(chain: History | None, settings: HistorySettings) -> list[Drift]:
    """The node's key figures of this run below (1 - driftFraction) x their median over its
    kept runs (gpuval_api.baseline.history.drift), those that fell most first."""
    split = chain.split() if chain is not None and settings.runs > 0 else None
    if split is None:
        return []
    return sorted(history.drift(split[0], split[1], settings), key=lambda d: d.ratio)


def restart_message(node: str, restarted: tuple[str, int], gpus: str, changed: str = "") -> str:
    """The HistoryRestarted Event (and status.baseline.historyRestarted) of a node whose GPUs
    were replaced since its kept runs, naming the GPUs that changed where the runs say."""
    before, aside = restarted
    which = f"{changed} replaced, " if changed else ""
    return (
        f"{node}: its GPUs changed ({which}GPU identity {before} -> {gpus}: new UUIDs or "
        "serials): its "
        f"history starts again from this run, {aside} earlier run{'s' if aside != 1 else ''} "
        f"set aside; DriftFromHistory compares it again once it has {history.MIN_RUNS} runs "
        "on these GPUs"
    )


def drift_note(found: Sequence[Drift], failed: bool) -> DriftNote:
    worst = found[0]
    others = ", ".join(d.figure for d in found[1:])
    message = worst.message + (f"; also {others}" if others else "")
    return DriftNote(worst.figure, round(worst.ratio, 4), failed, message[:NOTE_LENGTH])


def fabric_below(
    node: str,
    comparison: Comparison | None,
    baselines: RunBaselines,
    pairs: Iterable[FabricPair],
    transport: str | None,
) -> Below | None:
    """The node's fabric pairs against `fabric.pair` of the baseline its agent matched exactly
    (a fabric figure compares only at the same GPU count); measured as learning measures them."""
    if comparison is None or not comparison.exact or not baselines.judging:
        return None
    chosen = baselines.spec_of(comparison.name)
    if chosen is None:
        return None
    pair_samples = samples.fabric_samples(node, pairs, transport or "Unknown")
    return rules.fabric_below(pair_samples, chosen[1], baselines.settings.fraction)


def run_status(
    baselines: RunBaselines, comparisons: Iterable[tuple[str, Comparison | None]]
) -> BaselineRunStatus:
    """The run's bounded `status.baseline` (`fleet.status_of`): nodes judged and below, the
    figures on which most are below (systemic: the stack, not the nodes), drifting nodes, those
    that fell most first, what it learned."""
    drifting = sorted(baselines.drifting.items(), key=lambda item: (item[1].ratio, item[0]))
    return fleet.status_of(
        [(node, list(c.entries())) for node, c in comparisons if c is not None],
        baselines.settings,
        learned=baselines.learned,
        drifting=[
            DriftingNode(
                node=node,
                figure=note.figure,
                ratio=min(note.ratio, 100.0),
                failed=note.failed,
                message=note.message,
            )
            for node, note in drifting[:MAX_LISTED]
        ],
        drifting_total=len(drifting),
        restarted=[
            RestartedNode(node=node, message=message[:NOTE_LENGTH])
            for node, message in sorted(baselines.restarted.items())
        ],
        note="; ".join(baselines.notes),
    )


def with_learning(status: BaselineRunStatus, baselines: RunBaselines) -> BaselineRunStatus:
    """`status` with what learning (after the run's final status) added: names and notes."""
    note = "; ".join(baselines.notes)[:NOTE_LENGTH]
    bimodal = [text[:NOTE_LENGTH] for text in baselines.bimodal[:MAX_BIMODAL]]
    return status.model_copy(
        update={"learned": baselines.learned[:MAX_NAMES], "note": note, "bimodal": bimodal}
    )


def stack_versions(environments: Iterable[Mapping[str, str]]) -> StackVersions:
    """The distinct driver, CUDA and NCCL versions of the nodes a baseline came from, from their
    environment fields as the uniformity check keeps them (which spell them as StackVersions
    does; torch is not among them)."""
    keys = [f.alias for f in StackVersions.model_fields.values() if f.alias]
    found: dict[str, set[str]] = {key: set() for key in keys}
    for env in environments:
        for key in keys:
            if env.get(key):
                found[key].add(env[key])
    return StackVersions.model_validate(
        {key: ", ".join(sorted(values))[:256] or None for key, values in found.items()}
    )
