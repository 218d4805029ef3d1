"""`kubectl gpuval evidence NODE`: which of the node's reports holds the evidence to write, and
what is said when none does. Pure: the reports come in as the API server's JSON, the choice and
the words go out (gpuval_kubectl.cli reads and writes).

A node has one GpuNodeReport per validation and run (the operator keeps a validation's last
`spec.history` runs). The bundle written is the one of the node's latest Failed report (latest by
its completion time), among those of `--validation` and `--run` when given. A report says why it
has none: the node passed, was not tested (NotRun), or failed in a way the agent kept no bundle
for (a failure the operator recorded: the pod failed, timed out, the node went away).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gpuval_api import Verdict, keys
from gpuval_api.evidence import EvidenceKey
from gpuval_api.report import StatusKey

# The subcommand is named for the report field it writes out (status.evidence).
COMMAND = StatusKey.EVIDENCE.value


class NoEvidenceError(Exception):
    """The node's reports hold no bundle to write; the message says why and what to do."""


@dataclass(frozen=True, slots=True)
class ReportRef:
    """What the choice needs of one GpuNodeReport."""

    name: str
    node: str
    validation: str
    run: str
    verdict: str | None
    reason: str | None
    completed: datetime | None
    created: datetime | None
    evidence: Mapping[str, Any] | None

    @property
    def when(self) -> datetime:
        return self.completed or self.created or datetime.min.replace(tzinfo=UTC)

    def label(self) -> str:
        return f"GpuNodeReport {self.name} (validation {self.validation}, run {self.run})"

    def outcome(self) -> str:
        verdict = self.verdict or "still running (no verdict yet)"
        return f"{verdict}{f' ({self.reason})' if self.reason else ''}"


def _time(value: object) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def report_ref(report: Mapping[str, Any]) -> ReportRef:
    meta = report.get("metadata") or {}
    spec = report.get("spec") or {}
    status = report.get("status") or {}
    evidence = status.get(StatusKey.EVIDENCE)
    return ReportRef(
        name=str(meta.get("name") or ""),
        node=str(spec.get("node") or ""),
        validation=str(spec.get("validation") or ""),
        run=str(spec.get("run") or ""),
        verdict=str(status[StatusKey.VERDICT]) if status.get(StatusKey.VERDICT) else None,
        reason=str(status[StatusKey.REASON]) if status.get(StatusKey.REASON) else None,
        completed=_time(status.get(StatusKey.COMPLETED_AT)),
        created=_time(meta.get("creationTimestamp")),
        evidence=evidence if isinstance(evidence, Mapping) else None,
    )


def _scope(node: str, validation: str | None, run: str | None) -> str:
    parts = [f"node {node!r}"]
    if validation:
        parts.append(f"validation {validation!r}")
    if run:
        parts.append(f"run {run!r}")
    return ", ".join(parts)


def choose(
    reports: Iterable[Mapping[str, Any]],
    node: str,
    validation: str | None = None,
    run: str | None = None,
) -> tuple[ReportRef, ReportRef | None]:
    """The report whose bundle to write, and the node's latest report when it is a later one
    (a run after the failure: the reader should know the node has been tested since).

    NoEvidenceError says why none can be written: no report, the node passed or was not tested, or
    the failing report carries no bundle."""
    refs = [
        r
        for r in map(report_ref, reports)
        if r.node == node
        and (validation is None or r.validation == validation)
        and (run is None or r.run == run)
    ]
    scope = _scope(node, validation, run)
    if not refs:
        raise NoEvidenceError(
            f"no GpuNodeReport for {scope}: the node was not in a run"
            + (" with that name" if validation or run else "")
            + " (`kubectl gpuval status` lists the validations; `kubectl get gpunodereports "
            f"-l {keys.LABEL_NODE}=NODE` a node's reports)"
        )
    if run is not None and validation is None and len({r.validation for r in refs}) > 1:
        names = ", ".join(sorted({r.validation for r in refs}))
        raise NoEvidenceError(
            f"run {run!r} of node {node!r} is in several validations ({names}): add "
            "--validation NAME"
        )
    latest = max(refs, key=lambda r: r.when)
    failed = [r for r in refs if r.verdict == Verdict.FAILED]
    if not failed:
        raise NoEvidenceError(
            f"node {node!r} has no failing report ({scope}), so there is no evidence to write: "
            f"its latest, {latest.label()}, is {latest.outcome()}"
        )
    chosen = max(failed, key=lambda r: r.when)
    if chosen.evidence is None:
        raise NoEvidenceError(
            f"{chosen.label()} is {chosen.outcome()} but holds no evidence bundle: the agent "
            "keeps one when its own checks fail; a failure the operator recorded (pod failed "
            "or evicted, timed out, node gone) has none. Its failures: kubectl gpuval status "
            f"{chosen.validation}"
        )
    later = latest if latest is not chosen and latest.when > chosen.when else None
    return chosen, later


def describe(
    chosen: ReportRef,
    later: ReportRef | None,
    document: Mapping[str, Any],
    written: str,
) -> str:
    """What the command prints once the bundle is written (and verified)."""
    evidence = chosen.evidence or {}
    sections = document.get(EvidenceKey.SECTIONS) or {}
    held = [name for name, content in sections.items() if content is not None]
    lines = [
        f"{written}: the evidence of {chosen.label()}, {chosen.outcome()}",
        f"  {evidence.get(EvidenceKey.ENCODED_BYTES)} bytes encoded in the report, "
        f"{evidence.get(EvidenceKey.JSON_BYTES)} bytes of JSON, sha256 "
        f"{evidence.get(EvidenceKey.SHA256)} (verified)",
        f"  sections: {', '.join(held) or 'none'}",
    ]
    cut = document.get(EvidenceKey.CUT) or []
    if cut:
        lines.append(f"  cut to fit the report's 64 KiB: {'; '.join(map(str, cut))}")
    if later is not None:
        lines.append(f"  note: the node has a later report, {later.label()}, {later.outcome()}")
    return "\n".join(lines)
