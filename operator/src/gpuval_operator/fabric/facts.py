"""The compact facts of a report's status.fabric (ReportFacts.fabric).

Like gpuval_operator.run.facts, the object is cut here to the few fields the decisions need and
dropped; a group's pairs (the same in every member's result) are kept once per group by the
caller (gpuval_operator.fabric.state). Pure and synchronous.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuval_api import Reason, Verdict
from gpuval_api.fabric import FabricKey, FabricPair, read_pairs
from gpuval_api.fabric.train import FabricTrainPair, FabricTrainResult, read_train
from gpuval_api.report import read_reason, read_verdict
from gpuval_api.training import NodeLosses

MESSAGE_LIMIT = 300


@dataclass(frozen=True, slots=True)
class FabricTrainFacts:
    """A group's training phase as one member's result tells it (the same in every member's):
    what the run-wide comparison needs, the losses interned (one copy per distinct sequence)."""

    key: str  # FabricTrainResult.key: groups compare only with the same
    figure: float | None  # tokens/s per GPU; None: the group's run failed
    step_seconds: float | None
    pairs: tuple[FabricTrainPair, ...]
    losses: NodeLosses | None

    @classmethod
    def of(cls, result: FabricTrainResult) -> FabricTrainFacts:
        record = result.record
        return cls(
            key=sys.intern(result.key),
            figure=result.figure,
            step_seconds=result.step_median_seconds,
            pairs=tuple(result.pairs),
            losses=NodeLosses.of(record) if record is not None else None,
        )


@dataclass(frozen=True, slots=True)
class FabricFacts:
    """A report's status.fabric: the node's group and rank, and its result when it has one.

    `verdict`/`reason`/`message` are what the status says now (the operator may have rewritten
    them); `raw_*` are the agent's own (its result document), or the operator's record when no
    agent wrote one. Classification reads the raw ones, so it comes out the same when redone."""

    group: str
    rank: int
    world: int
    nodes: tuple[str, ...]
    verdict: Verdict | None
    reason: Reason | None
    message: str
    classified: bool
    raw_verdict: Verdict | None
    raw_reason: Reason | None
    raw_message: str
    by_agent: bool
    busbw: float | None
    transport: str | None
    pairs: tuple[FabricPair, ...] = ()
    train: FabricTrainFacts | None = None

    @property
    def planned(self) -> bool:
        """The operator's plan only: no result yet."""
        return self.verdict is None

    @classmethod
    def parse(cls, fabric: Mapping[str, Any]) -> FabricFacts | None:
        group = fabric.get(FabricKey.GROUP)
        rank, world = fabric.get(FabricKey.RANK), fabric.get(FabricKey.WORLD)
        if not isinstance(group, str) or not isinstance(rank, int) or not isinstance(world, int):
            return None
        result = fabric.get(FabricKey.RESULT)
        document = result if isinstance(result, Mapping) else None
        verdict, reason = read_verdict(fabric.get(FabricKey.VERDICT)), fabric.get(FabricKey.REASON)
        message = str(fabric.get(FabricKey.MESSAGE) or "")[:MESSAGE_LIMIT]
        source = document if document is not None else fabric
        busbw = fabric.get(FabricKey.BUSBW)
        train = read_train(document) if document is not None else None
        return cls(
            group=sys.intern(group),
            rank=rank,
            world=world,
            nodes=tuple(sys.intern(str(n)) for n in fabric.get(FabricKey.NODES) or ()),
            verdict=verdict,
            reason=read_reason(reason),
            message=message,
            classified=bool(fabric.get(FabricKey.CLASSIFIED)),
            raw_verdict=read_verdict(source.get(FabricKey.VERDICT)) if verdict else None,
            raw_reason=read_reason(source.get(FabricKey.REASON)),
            raw_message=str(source.get(FabricKey.MESSAGE) or "")[:MESSAGE_LIMIT],
            by_agent=document is not None,
            busbw=float(busbw) if isinstance(busbw, int | float) else None,
            transport=fabric.get(FabricKey.TRANSPORT),
            pairs=read_pairs(document) if document is not None else (),
            train=FabricTrainFacts.of(train) if train is not None else None,
        )
