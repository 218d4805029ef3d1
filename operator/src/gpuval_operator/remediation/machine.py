"""Pure: the repair loop of one validation (spec.remediation), one node at a time. Nothing here
calls the API or reads a clock: the keeper (gpuval_operator.control.repair.keeper) passes the time
and what it knows of the node in, and carries out the step that comes back; the node actions
(gpuval_operator.nodes.actor) move a record on when a verdict comes (`after_verdict`).

    failed (in force, a ResetGpu or Reboot failure, not systemic)
      │ fewer than maxRepairs within windowSeconds          maxRepairs reached
      ▼                                                           │
    Requested ── its object done / failed / gone (mode Template),  │
      │          its boot ID changed (mode Condition),             │
      │          timeoutSeconds passed ──▶ Revalidating           │
      │    its object deleted by anyone else before it ended ──▶ Cancelled: not counted, not
      │    validated again, asked again only once the node fails anew
      │                                      │ re-validated under load (the failed checks and the
      │                                      │ state check; a load check always)
      │                       passed ◀───────┴──────▶ failed: FailedAgain ──▶ Requested again,
      ▼                          │                                  or NeedsRepair ◀──────┘
    (a pass at any time)      Repaired: back in service       NeedsRepair: no further request;
      │                                                        a person removes the label ──▶
      ▼                                                        Revalidating (history cleared)
    Withdrawn: a pass by another path (an overruled verdict, a scheduled run, a gating
    re-validation) while its repair was still asked: the request is withdrawn (its object
    deleted before the node returns, its condition cleared as it returns); not a repair

A node is asked for a repair only when its failure's taint or cordon is in force (the circuit
breaker admitted it, so the nodes in repair never exceed its limits), its reason is neither
systemic nor still undecided (a failure most of the run shares asks for nothing), and NVIDIA's
documented action for its reason is a GPU reset or a reboot (the reason catalogue).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum, auto

from gpuval_api import REPAIRABLE_ACTIONS, RepairAction, Verdict, action_of
from gpuval_api.crd import Remediation, RemediationMode
from gpuval_api.remediation import BACK_STATES, RepairEnd, RepairOutcome, RepairState
from gpuval_operator.remediation.record import RepairRecord


@dataclass(frozen=True, slots=True)
class Settings:
    """spec.remediation as the loop uses it."""

    mode: RemediationMode
    max_repairs: int
    window: int
    timeout: int

    @classmethod
    def of(cls, spec: Remediation) -> Settings:
        return cls(spec.mode, spec.max_repairs, spec.window_seconds, spec.timeout_seconds)


@dataclass(frozen=True, slots=True)
class RepairFacts:
    """What the loop reads of a node: its validation's entry (verdict, reason, when, whether its
    taint or cordon is in force, its repair record) and the node's own state."""

    name: str
    tested: str | None = None  # the latest verdict with evidence: Passed, Failed or None
    reason: str | None = None
    at: int = 0  # when the entry was written (Unix seconds)
    in_force: bool = False  # Failed, and its taint or cordon applied (not held)
    repair: RepairRecord | None = None
    boot_id: str = ""
    ready: bool = True
    needs_repair_label: bool = False  # the label gpuval.dev/needs-repair is on the node
    busy: bool = False  # the current run is testing it, or acting on its verdict


class Do(Enum):
    NOTHING = auto()
    REQUEST = auto()  # ask the engine for `action`
    NEEDS_REPAIR = auto()  # repair did not help: no further request
    END = auto()  # the repair ended (`end` says how): validate the node again
    REVALIDATE = auto()  # add it to the run, with the checks that failed
    BY_PERSON = auto()  # a person removed the needs-repair label: validate it again
    WITHDRAW = auto()  # spec.remediation was removed: drop the record, delete the object
    CANCEL = auto()  # its object was deleted before the repair ended: a cancellation


@dataclass(frozen=True, slots=True)
class Step:
    do: Do
    action: RepairAction | None = None
    end: RepairEnd | None = None


NOTHING = Step(Do.NOTHING)


def decide(
    facts: RepairFacts,
    settings: Settings | None,
    *,
    now: float,
    object_end: RepairEnd | None = None,
    systemic: Iterable[str] = (),
    joined_at: float | None = None,
) -> Step:
    """The node's next step. `object_end`: how its request's object ended (mode Template; None
    while it runs); `systemic`: the reasons the run holds as systemic or still undecided;
    `joined_at`: when the keeper last added the node to a run for its re-validation."""
    record = facts.repair
    if settings is None:
        return Step(Do.WITHDRAW) if record is not None and record.active else NOTHING
    if record is not None and record.state == RepairState.REQUESTED:
        return _requested(facts, record, settings, now, object_end)
    if record is not None and record.state == RepairState.REVALIDATING:
        if facts.busy or not facts.ready:
            return NOTHING
        if joined_at is None or now - joined_at >= settings.timeout:
            return Step(Do.REVALIDATE)
        return NOTHING
    if record is not None and record.state == RepairState.NEEDS_REPAIR:
        return NOTHING if facts.needs_repair_label else Step(Do.BY_PERSON)
    if not _failure_to_act_on(facts, record) or facts.reason in set(systemic):
        return NOTHING
    action = action_of(facts.reason)
    failed_again = record is not None and record.state == RepairState.FAILED_AGAIN
    if action not in REPAIRABLE_ACTIONS:
        # Repaired, and now failing with what no engine repairs: a person's.
        return Step(Do.NEEDS_REPAIR, action) if failed_again else NOTHING
    if record is not None and len(record.within(now, settings.window)) >= settings.max_repairs:
        return Step(Do.NEEDS_REPAIR, action)
    return Step(Do.REQUEST, action)


def _requested(
    facts: RepairFacts,
    record: RepairRecord,
    settings: Settings,
    now: float,
    object_end: RepairEnd | None,
) -> Step:
    rebooted = facts.boot_id and record.boot and facts.boot_id != record.boot
    if object_end is RepairEnd.GONE:
        # Deleted by a person (or anything but gpuval) before it said it ended: nothing was
        # repaired, so validating it again would only fail and ask again. Unless the node
        # rebooted meanwhile (an engine that deletes its object once done, unseen): an end.
        if rebooted:
            return Step(Do.END, end=RepairEnd.REBOOTED)
        return Step(Do.CANCEL, end=object_end)
    if object_end is not None:
        return Step(Do.END, end=object_end)
    # A reboot ends a repair asked through the condition; one asked through an object ends when
    # the object says so: the engine checks the node after its reboot (NVSentinel's janitor waits
    # for it to be Ready) before it marks the object done, and gpuval deletes an object it
    # considers ended.
    if rebooted and not record.obj:
        return Step(Do.END, end=RepairEnd.REBOOTED)
    if now - record.asked >= settings.timeout:
        return Step(Do.END, end=RepairEnd.TIMED_OUT)
    return NOTHING


def _failure_to_act_on(facts: RepairFacts, record: RepairRecord | None) -> bool:
    """A failure with its taint or cordon in force that the loop has not answered yet: the first,
    one after a failed re-validation, or a new one after the node was back in service."""
    if facts.tested != Verdict.FAILED or not facts.in_force or facts.busy:
        return False
    if record is None or record.state == RepairState.FAILED_AGAIN:
        return True
    if record.state == RepairState.CANCELLED:
        return facts.at > (record.ended or 0)  # a failure after the cancellation
    return record.state in BACK_STATES and facts.at >= (record.back or 0)


def next_count(record: RepairRecord | None) -> int:
    """The number of the next request (its identity, $(REPAIR_ID))."""
    return (record.count if record is not None else 0) + 1


def requested(
    facts: RepairFacts,
    action: RepairAction,
    settings: Settings,
    *,
    now: float,
    checks: tuple[str, ...] = (),
    obj: str = "",
    failed_at: float | None = None,
) -> RepairRecord:
    """The record once a repair is asked; `failed_at`: when the failure's verdict came (the
    report's completion; else the entry's time)."""
    previous = facts.repair
    stamp = int(now)
    episode = previous is not None and previous.state == RepairState.FAILED_AGAIN
    history = previous.within(now, settings.window) if previous is not None else ()
    return RepairRecord(
        state=RepairState.REQUESTED,
        action=str(action),
        reason=facts.reason,
        failed=(
            previous.failed
            if episode and previous is not None
            else int(failed_at or facts.at or stamp)
        ),
        asked=stamp,
        boot=facts.boot_id,
        count=next_count(previous),
        history=(*history, stamp),
        checks=checks,
        obj=obj,
    )


def needs_repair(
    facts: RepairFacts, action: RepairAction, settings: Settings, now: float
) -> RepairRecord:
    """The record once repair did not help."""
    previous = facts.repair
    if previous is None:  # maxRepairs is at least 1: only a record's history reaches it
        return RepairRecord(
            RepairState.NEEDS_REPAIR,
            str(action),
            facts.reason,
            facts.at,
            int(now),
            facts.boot_id,
            0,
        )
    failed = previous.failed if previous.state == RepairState.FAILED_AGAIN else facts.at
    return previous.moved(
        RepairState.NEEDS_REPAIR,
        reason=facts.reason,
        failed=failed,
        history=previous.within(now, settings.window),
    )


def ended(record: RepairRecord, how: RepairEnd, now: float) -> RepairRecord:
    """The record once its repair ended: the node is validated again."""
    return record.moved(RepairState.REVALIDATING, ended=int(now), ended_by=str(how))


def cancelled(record: RepairRecord, now: float) -> RepairRecord:
    """The record once its object was deleted before the repair ended: Cancelled, the request
    taken out of the repairs counted against maxRepairs."""
    history = list(record.history)
    if record.asked in history:
        history.reverse()
        history.remove(record.asked)
        history.reverse()
    return record.moved(
        RepairState.CANCELLED,
        ended=int(now),
        ended_by=str(RepairEnd.GONE),
        history=tuple(history),
    )


def by_person(record: RepairRecord, now: float) -> RepairRecord:
    """A person repaired the node by hand (removed the needs-repair label): validated again, its
    repairs forgotten (what failed before is the old hardware's)."""
    return record.moved(
        RepairState.REVALIDATING, ended=int(now), ended_by=str(RepairEnd.PERSON), history=()
    )


def after_verdict(record: RepairRecord | None, verdict: Verdict, now: float) -> RepairRecord | None:
    """The record once the node has a new verdict: a pass returns it to service whatever the
    loop was waiting for (a repair still asked is withdrawn); a failure of its re-validation is
    FailedAgain (the keeper asks again or gives up); NotRun tells nothing."""
    if record is None or verdict is Verdict.NOT_RUN or record.state == RepairState.CANCELLED:
        # A cancelled request stays so (a pass was no repair's); a failure is decided on.
        return record
    stamp = int(now)
    if verdict is Verdict.PASSED:
        if record.state in BACK_STATES:
            return record
        if withdraws_on(record, verdict):
            return withdrawn(record, now)
        return record.moved(RepairState.REPAIRED, revalidated=stamp, back=stamp)
    if record.state == RepairState.REVALIDATING:
        return record.moved(RepairState.FAILED_AGAIN, revalidated=stamp)
    return record


def withdraws_on(record: RepairRecord | None, verdict: Verdict) -> bool:
    """A verdict that withdraws the node's request: a pass while its repair is still asked."""
    return (
        record is not None and record.state == RepairState.REQUESTED and verdict is Verdict.PASSED
    )


def withdrawn(record: RepairRecord, now: float) -> RepairRecord:
    """The record once the node passed by another path while its repair was still asked: back
    in service, the request withdrawn (its end unknown: not a repair)."""
    return record.moved(RepairState.WITHDRAWN, back=int(now))


def withdraws(before: RepairRecord | None, after: RepairRecord | None) -> bool:
    """This change of a node's record withdraws a request that is out."""
    return (
        before is not None
        and before.state == RepairState.REQUESTED
        and after is not None
        and after.state == RepairState.WITHDRAWN
    )


def repair_checks(failed: Iterable[str], load_checks: Iterable[str], state: str) -> tuple[str, ...]:
    """The checks of a re-validation: those that failed, the state check, and a load check when
    none of the failed ones loads the GPUs (a node is proven under load, not at rest: NVSentinel
    #1427). Empty: the spec's whole list (nothing known of what failed)."""
    chosen = list(failed)
    if not chosen:
        return ()
    loads = list(load_checks)
    if state not in chosen:
        chosen.insert(0, state)
    if not any(c in loads for c in chosen) and loads:
        chosen.append(loads[0])
    return tuple(dict.fromkeys(chosen))


@dataclass(frozen=True, slots=True)
class Outcome:
    """A request whose outcome became known (for the metrics): the re-validation passed or
    failed, or the request was withdrawn; `seconds`: failure → back in service (a repair's)."""

    action: str
    outcome: RepairOutcome
    seconds: float | None = None


def outcome_of(before: RepairRecord | None, after: RepairRecord | None) -> Outcome | None:
    """What a record's change says about its request, once per change."""
    if after is None or before == after:
        return None
    moved = before is None or before.state != after.state
    if not moved:
        return None
    if after.state == RepairState.WITHDRAWN and (before is None or before.active):
        return Outcome(after.action, RepairOutcome.WITHDRAWN)
    if after.state == RepairState.REPAIRED and (before is None or before.active):
        seconds = (after.back - after.failed) if after.back is not None else None
        return Outcome(
            after.action, RepairOutcome.PASSED, float(seconds) if seconds is not None else None
        )
    # Failed again; or seen only once it needs repair (the keeper decided in the same pass).
    if after.state == RepairState.FAILED_AGAIN or (
        after.state == RepairState.NEEDS_REPAIR
        and before is not None
        and before.state == RepairState.REVALIDATING
    ):
        return Outcome(after.action, RepairOutcome.FAILED)
    return None


def in_repair(records: Mapping[str, RepairRecord]) -> int:
    return sum(1 for r in records.values() if r.active)
