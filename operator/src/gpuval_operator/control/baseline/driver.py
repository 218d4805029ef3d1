"""Baselines and history carried out for one GpuValidation (spec.baseline;
docs/operator/baselines.md,
"Baselines and history"): at a run's start the GpuBaselines are listed and chosen; each agent pod
is given those of its GPU model (GPUVAL_BASELINE) and each report the node's history
(spec.history); as verdicts come in, a node whose figures fell against its own past is named
(DriftFromHistory: a warning, or a failure); in the fabric phase a node's pairs are judged against
its baseline; at the run's end the status says whether the fleet is below its baseline as a
whole (systemic); and after the final status, Learn mode learns a GpuBaseline for every GPU stack
of the run that has none, from its passing nodes. The decisions are
gpuval_operator.baseline.judge's; the calls are here and in gpuval_operator.run.effects.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from gpuval_api import EventReason, Reason, Verdict
from gpuval_api.baseline import fleet
from gpuval_api.baseline.learn import Learned, NodeFigures
from gpuval_api.baseline.rules import Candidate
from gpuval_api.baselinemodel import (
    BaselineKey,
    BaselineMode,
    BaselineRunStatus,
    BaselineSettings,
    DriftAction,
)
from gpuval_api.crd import API_VERSION, BASELINE_PLURAL, GpuBaseline, GpuNodeReport
from gpuval_api.labels import children_selector
from gpuval_api.lenient import read_model
from gpuval_api.training import learn_losses
from gpuval_operator.baseline import judge
from gpuval_operator.baseline.facts import History
from gpuval_operator.baseline.state import RunBaselines
from gpuval_operator.fabric.verdicts import Classification, Final
from gpuval_operator.kube.client import ApiError, ResourceExpiredError
from gpuval_operator.nodes.watch import NodeWatch
from gpuval_operator.readmodel.validation import ValidationState
from gpuval_operator.run.effects import REPORTS_PATH, Effects
from gpuval_operator.run.state import Phase, RunState

log = logging.getLogger(__name__)

BASELINES_PATH = f"/apis/{API_VERSION}/{BASELINE_PLURAL}"
MAX_NAMED = 10  # nodes named in one Event
# Reports read per page when learning: a report carries its whole result document (26 KB for an
# 8-GPU node), so a page of 100 is about 2.6 MB of JSON parsed at a time, where the client's
# default of 500 parsed 13 MB at once (docs/operator/baselines.md, "Baselines and history").
LEARN_PAGE = 100


class BaselineDriver:
    def __init__(self, *, state: ValidationState, effects: Effects, node_watch: NodeWatch) -> None:
        self.state, self.effects, self.node_watch = state, effects, node_watch

    # -- a run's start --

    async def prepare(
        self,
        run: RunState,
        settings: BaselineSettings | None,
        recorded: Mapping[str, Any] | None = None,
    ) -> None:
        """What the run judges against (spec.baseline), listed once at its start, or when it is
        resumed (with the `recorded` status.baseline of a run that completed)."""
        self.state.keeps_history = settings is not None
        if settings is None:
            run.baseline = None
            self.state.history.clear()  # spec.baseline removed: nothing is carried any more
            return
        run.baseline = judge.start(settings, await self.listed())
        if recorded and run.completed_at is not None:
            run.baseline.status = read_model(BaselineRunStatus, recorded)
            run.baseline.learned = list(run.baseline.status.learned)
            run.baseline.restarted = {
                r.node: r.message for r in run.baseline.status.history_restarted
            }
            run.baseline.learning_done = True
        for name in run.baseline.missing:
            await self.effects.event(
                EventReason.BASELINE_MISSING,
                f"spec.baseline.names names GpuBaseline {name}, which does not exist: nodes are "
                "judged against the others named (kubectl gpuval baseline show lists them)",
                warning=True,
            )

    async def listed(self) -> list[Candidate]:
        """Every GpuBaseline of the cluster as (name, spec); one a newer gpuval wrote is read
        without the fields this one does not know."""
        while True:
            found: list[Candidate] = []
            try:
                async for items, _, _ in self.effects.client.pages(BASELINES_PATH):
                    for item in items:
                        try:
                            baseline = read_model(GpuBaseline, item)
                        except ValidationError as error:
                            name = (item.get("metadata") or {}).get("name")
                            log.warning("GpuBaseline %s cannot be read: %s", name, error)
                            continue
                        found.append((baseline.metadata.name, baseline.spec))
            except ResourceExpiredError:
                continue
            return found

    def pod_env(self, run: RunState, node: str) -> list[dict[str, str]]:
        """GPUVAL_BASELINE and its fraction for the node's agent pod (its GPU model's baselines,
        its own stack's first: the model its last report said, the GPUs it has) and its GPU
        model label."""
        if run.baseline is None:
            return []
        facts = self.node_watch.nodes.get(node)
        latest = self.state.latest.get(node)
        model = latest.environment.get("gpuProduct", "") if latest is not None else ""
        gpus = 0
        if facts is not None:
            gpus = facts.sharing.physical if facts.sharing is not None else facts.gpus
        label = facts.product if facts is not None else ""
        return judge.agent_env(run.baseline, label, model=model, gpus=gpus)

    def history_of(self, run: RunState, node: str) -> list[dict[str, Any]]:
        """The history the node's report of this run carries: its last history.runs runs."""
        chain = self.state.history.get(node)
        if run.baseline is None or chain is None:
            return []
        return chain.carried(run.baseline.settings.history.runs)

    # -- verdicts as they come in --

    async def on_verdicts(self, run: RunState) -> None:
        """Each node with a new tested verdict against its own past: DriftFromHistory named (an
        Event and status.baseline.driftingNodes), or with history.action Fail the node failed."""
        baselines = run.baseline
        if baselines is None:
            return
        settings = baselines.settings.history
        for node in dict.fromkeys(run.finished):
            record = run.nodes.get(node)
            chain = self.state.history.get(node)
            if record is None or record.phase not in (Phase.PASSED, Phase.FAILED):
                continue
            if chain is None or not chain.current or chain.run != run.run_id:
                continue
            await self._restarted(run, baselines, node, chain)
            found = judge.drift(chain, settings)
            if not found:
                baselines.drifting.pop(node, None)
                continue
            fail = settings.action is DriftAction.FAIL and record.phase is Phase.PASSED
            note = judge.drift_note(found, fail)
            first = node not in baselines.drifting
            baselines.drifting[node] = note
            run.dirty = True
            if fail and run.overturn(node, Reason.DRIFT_FROM_HISTORY, note.message):
                check = judge.DRIFT_CHECKS[note.figure]
                await self.effects.write_report_failure(
                    record, Reason.DRIFT_FROM_HISTORY, note.message, check=check
                )
            elif first and run.events_posted < self.effects.config.events_per_run:
                run.events_posted += 1
                await self.effects.event(
                    EventReason.NODE_DRIFTING, f"{node}: {note.message}", warning=True
                )

    async def _restarted(
        self, run: RunState, baselines: RunBaselines, node: str, chain: History
    ) -> None:
        """A node whose GPUs were replaced since its kept runs says so once: its history starts
        again from this run (status.baseline.historyRestarted; an Event within
        GPUVAL_EVENTS_PER_RUN)."""
        if chain.restarted is None or node in baselines.restarted:
            return
        message = judge.restart_message(node, chain.restarted, chain.gpus, chain.changed)
        baselines.restarted[node] = message
        run.dirty = True
        if run.events_posted >= self.effects.config.events_per_run:
            return
        run.events_posted += 1
        await self.effects.event(EventReason.HISTORY_RESTARTED, message)

    def judge_fabric(self, run: RunState, found: Classification) -> None:
        """A node the fabric passed whose best pair is below its baseline's `fabric.pair` fails
        BelowBaseline there (its report is rewritten as the fabric phase rewrites it)."""
        baselines, fabric = run.baseline, run.fabric
        if baselines is None or fabric is None:
            return
        for node, final in list(found.nodes.items()):
            if final.verdict is not Verdict.PASSED:
                continue
            latest = self.state.latest.get(node)
            mine = latest.comparison if latest is not None and latest.run == run.run_id else None
            pairs = [p for g in fabric.groups_of.get(node, ()) for p in fabric.pairs.get(g, ())]
            reported = fabric.reported.get(node)
            transport = reported.transport if reported is not None else None
            below = judge.fabric_below(node, mine, baselines, pairs, transport)
            if below is not None:
                found.nodes[node] = Final(Verdict.FAILED, Reason.BELOW_BASELINE, below.message)

    # -- the run's end --

    async def complete(self, run: RunState) -> None:
        """Every verdict is in: status.baseline and WithinBaseline; a systemic figure is said
        once, loudly (the per-node BelowBaseline verdicts stay: the node-action hold rules
        read them)."""
        baselines = run.baseline
        if baselines is None:
            return
        comparisons = [
            (node, latest.comparison)
            for node in run.nodes
            if (latest := self.state.latest.get(node)) is not None and latest.run == run.run_id
        ]
        before = baselines.status
        baselines.status = judge.run_status(baselines, comparisons)
        systemic = baselines.status.systemic
        if systemic and (before is None or not before.systemic):
            figures = ", ".join(s.figure for s in systemic)
            await self.effects.event(
                EventReason.SYSTEMIC,
                f"run {run.run_id}: {systemic[0].message} (figures: {figures}); suspect the "
                "stack (driver, firmware, settings) before the nodes",
                warning=True,
            )

    async def learn(self, run: RunState) -> bool:
        """Learn mode, once per run after its final status: a GpuBaseline for every key of the
        run that has none, from its passing nodes; True when the status has something to add."""
        baselines = run.baseline
        if baselines is None or baselines.settings.mode is not BaselineMode.LEARN:
            return False
        if baselines.learning_done:
            return False
        baselines.learning_done = True
        nodes = await self._run_figures(run)
        existing = [spec for _, spec in baselines.existing]
        outcomes = await asyncio.to_thread(
            fleet.learn_nodes,
            nodes,
            baselines.settings,
            validation=run.validation,
            run=run.run_id,
            at=datetime.now(UTC),
            existing=existing,
        )
        for outcome in outcomes:
            await self._learned(run, baselines, outcome)
        if baselines.status is not None:
            baselines.status = judge.with_learning(baselines.status, baselines)
        run.dirty = True
        return bool(outcomes)

    async def _run_figures(self, run: RunState) -> list[NodeFigures]:
        """The run's reports as learning reads them, LEARN_PAGE at a time (a report carries its
        whole result document: none is kept, only its figures, and one key per GPU stack)."""
        selector = children_selector(run.validation, run.run_id)
        while True:
            nodes: list[NodeFigures] = []
            keys: dict[str, BaselineKey] = {}
            try:
                pages = self.effects.client.pages(REPORTS_PATH, selector, page_size=LEARN_PAGE)
                async for items, _, _ in pages:
                    nodes += await asyncio.to_thread(_page_figures, items, keys)
            except ResourceExpiredError:
                continue
            return nodes

    async def _learned(self, run: RunState, baselines: RunBaselines, outcome: Learned) -> None:
        key = outcome.key.describe()
        made = fleet.learned_object(outcome)
        if outcome.bimodal:
            baselines.bimodal.append(outcome.bimodal)
        if made is None:
            text = f"no baseline learned for {key}: {outcome.problem}"
            baselines.notes.append(text)
            await self.effects.event(EventReason.BASELINE_NOT_LEARNED, text, warning=True)
            return
        environments = (
            latest.environment
            for node in outcome.kept
            if (latest := self.state.latest.get(node)) is not None
        )
        made.spec.learned_with = judge.stack_versions(environments)
        # The loss digest per stack: a later node with no peer of its stack is compared with it.
        made.spec.training = learn_losses(
            latest.training
            for node in outcome.kept
            if (latest := self.state.latest.get(node)) is not None
        )
        name = made.metadata.name
        try:
            await self.effects.client.create(BASELINES_PATH, _document(made))
        except ApiError as exc:
            text = f"GpuBaseline {name} for {key} not created: {exc}"
            baselines.notes.append(text if exc.status != 409 else f"{name} exists already")
            log.warning("%s: %s", run.validation, text)
            return
        baselines.learned.append(name)
        baselines.existing.append((name, made.spec))
        await self.effects.event(
            EventReason.BASELINE_LEARNED,
            _learned_text(name, outcome),
            warning=bool(outcome.bimodal),
        )
        log.info("%s: %s", run.validation, _learned_text(name, outcome))


def _page_figures(
    items: Sequence[Mapping[str, Any]], keys: dict[str, BaselineKey]
) -> list[NodeFigures]:
    """The figures of a page of reports; nodes of one GPU stack share one key object."""
    found = []
    for item in items:
        try:
            figures = fleet.report_figures(read_model(GpuNodeReport, item))
        except ValidationError as error:
            name = (item.get("metadata") or {}).get("name")
            log.warning("report %s not read for learning: %s", name, error)
            continue
        if figures is None:
            continue
        if figures.key is not None:
            figures.key = keys.setdefault(figures.key.model_dump_json(), figures.key)
        found.append(figures)
    return found


def _document(baseline: GpuBaseline) -> dict[str, Any]:
    return baseline.model_dump(mode="json", by_alias=True, exclude_none=True)


def _learned_text(name: str, outcome: Learned) -> str:
    """The Event of a learned baseline, naming the nodes left out (and failed ones not used)."""
    spec = outcome.spec
    assert spec is not None
    text = (
        f"learned GpuBaseline {name} ({outcome.key.describe()}) from {len(outcome.kept)} of "
        f"{spec.source.nodes_offered} passing nodes in {outcome.rounds} rounds"
    )
    if outcome.excluded:
        left = ", ".join(
            f"{e.node} ({e.figure} {e.value:g} vs {e.centre:g})"
            for e in outcome.excluded[:MAX_NAMED]
        )
        more = len(outcome.excluded) - MAX_NAMED
        text += f"; left out {len(outcome.excluded)}: {left}"
        text += f" and {more} more" if more > 0 else ""
    if outcome.failed:
        text += f"; {len(outcome.failed)} failed nodes not used"
    if outcome.bimodal:
        text += f"; {outcome.bimodal}"
    return text
