"""The repair loop's state machine (gpuval_operator.remediation.machine), every transition without
a cluster: when a failed node is asked for a repair and when not, how a repair ends, what a verdict
after it does, and when repair stops (NeedsRepair)."""

from __future__ import annotations

import dataclasses

import pytest

from gpuval_api.crd import Remediation, RemediationMode
from gpuval_api.reasons import RepairAction
from gpuval_api.remediation import RepairEnd, RepairOutcome, RepairState
from gpuval_api.result import Verdict
from gpuval_operator.remediation import machine
from gpuval_operator.remediation.machine import Do, RepairFacts, Settings
from gpuval_operator.remediation.record import RepairRecord

SETTINGS = Settings.of(Remediation(max_repairs=2, window_seconds=3600, timeout_seconds=600))
T0 = 1_000_000.0


def failed(reason: str = "KernelXidReboot", **changes: object) -> RepairFacts:
    base = RepairFacts(
        name="n1", tested="Failed", reason=reason, at=int(T0), in_force=True, boot_id="boot-1"
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def asked(facts: RepairFacts, now: float = T0, **kw: object) -> RepairRecord:
    record = machine.requested(facts, RepairAction.REBOOT, SETTINGS, now=now, **kw)  # type: ignore[arg-type]
    return record


def test_a_reboot_class_failure_in_force_asks_for_a_reboot() -> None:
    step = machine.decide(failed(), SETTINGS, now=T0)
    assert (step.do, step.action) == (Do.REQUEST, RepairAction.REBOOT)
    step = machine.decide(failed("KernelXidResetGpu"), SETTINGS, now=T0)
    assert (step.do, step.action) == (Do.REQUEST, RepairAction.RESET_GPU)


@pytest.mark.parametrize(
    "facts",
    [
        failed("BurnMismatch"),  # Replace: a person's
        failed("KernelXidRestartApp"),  # the application's
        failed("LowThroughput"),  # no documented repair
        failed(in_force=False),  # held by the breaker (or waiting for the run)
        failed(busy=True),  # the run is testing it now
        failed(tested="Passed"),
    ],
)
def test_no_repair_is_asked_for_what_no_engine_repairs_or_the_breaker_holds(
    facts: RepairFacts,
) -> None:
    assert machine.decide(facts, SETTINGS, now=T0).do is Do.NOTHING


def test_a_systemic_or_still_undecided_reason_asks_for_no_repair() -> None:
    step = machine.decide(failed(), SETTINGS, now=T0, systemic={"KernelXidReboot"})
    assert step.do is Do.NOTHING


def test_without_spec_remediation_nothing_is_asked_and_an_open_request_is_withdrawn() -> None:
    assert machine.decide(failed(), None, now=T0).do is Do.NOTHING
    facts = failed(repair=asked(failed()))
    assert machine.decide(facts, None, now=T0).do is Do.WITHDRAW


def test_the_request_records_action_boot_checks_object_and_its_number() -> None:
    record = asked(failed(), checks=("state", "burn"), obj="ns/gpuval-n1")
    assert record.state == RepairState.REQUESTED and record.action == RepairAction.REBOOT
    assert (record.boot, record.count, record.repair_id) == ("boot-1", 1, "1")
    assert record.history == (int(T0),) and record.failed == int(T0)
    assert record.checks == ("state", "burn") and record.obj == "ns/gpuval-n1"
    held = machine.requested(
        failed(), RepairAction.REBOOT, SETTINGS, now=T0 + 60, failed_at=T0 - 30
    )
    assert held.failed == int(T0 - 30), "a node the breaker held failed before it was asked"
    assert RepairRecord.from_json(record.to_json()) == record


@pytest.mark.parametrize(
    ("changes", "object_end", "now", "end"),
    [
        ({"boot_id": "boot-2"}, None, T0 + 5, RepairEnd.REBOOTED),
        ({}, RepairEnd.DONE, T0 + 5, RepairEnd.DONE),
        ({}, RepairEnd.FAILED, T0 + 5, RepairEnd.FAILED),
        ({}, None, T0 + 600, RepairEnd.TIMED_OUT),
    ],
)
def test_a_request_ends_on_a_new_boot_its_object_or_the_timeout(
    changes: dict[str, object], object_end: RepairEnd | None, now: float, end: RepairEnd
) -> None:
    facts = failed(repair=asked(failed()), **changes)
    step = machine.decide(facts, SETTINGS, now=now, object_end=object_end)
    assert (step.do, step.end) == (Do.END, end)


def test_an_object_deleted_before_it_ended_cancels_the_request_uncounted_and_unasked() -> None:
    facts = failed(repair=asked(failed(), obj="gpuval-n1"))
    step = machine.decide(facts, SETTINGS, now=T0 + 5, object_end=RepairEnd.GONE)
    assert (step.do, step.end) == (Do.CANCEL, RepairEnd.GONE)
    assert facts.repair is not None
    record = machine.cancelled(facts.repair, T0 + 5)
    assert record.state == RepairState.CANCELLED and not record.active
    assert (record.ended, record.ended_by) == (int(T0 + 5), RepairEnd.GONE)
    assert record.history == (), "a cancelled request is not counted against maxRepairs"
    assert record.count == 1, "the next request is told apart from the cancelled one"
    # The same failure, later passes: nothing asked, nothing validated again.
    same = failed(repair=record)
    for later in (T0 + 6, T0 + 600, T0 + 7200):
        assert machine.decide(same, SETTINGS, now=later).do is Do.NOTHING
    # A pass changes nothing of it; a new failure (a verdict after the cancellation) asks again.
    assert machine.after_verdict(record, Verdict.PASSED, T0 + 60) == record
    assert machine.after_verdict(record, Verdict.FAILED, T0 + 60) == record
    again = failed(repair=record, at=int(T0 + 60))
    step = machine.decide(again, SETTINGS, now=T0 + 61)
    assert (step.do, step.action) == (Do.REQUEST, RepairAction.REBOOT)
    second = machine.requested(again, RepairAction.REBOOT, SETTINGS, now=T0 + 61)
    assert (second.count, second.history) == (2, (int(T0 + 61),))


def test_an_object_gone_after_the_node_rebooted_is_an_end_not_a_cancellation() -> None:
    facts = failed(repair=asked(failed(), obj="gpuval-n1"), boot_id="boot-2")
    step = machine.decide(facts, SETTINGS, now=T0 + 5, object_end=RepairEnd.GONE)
    assert (step.do, step.end) == (Do.END, RepairEnd.REBOOTED)


def test_a_cancelled_request_keeps_the_repairs_that_were_done_counted() -> None:
    first = asked(failed())
    revalidated = machine.after_verdict(
        machine.ended(first, RepairEnd.DONE, T0 + 10), Verdict.FAILED, T0 + 20
    )
    assert revalidated is not None and revalidated.state == RepairState.FAILED_AGAIN
    second = asked(failed(repair=revalidated), now=T0 + 30)
    assert second.history == (int(T0), int(T0 + 30))
    record = machine.cancelled(second, T0 + 40)
    assert record.history == (int(T0),), "only the cancelled request is taken out"
    assert machine.decide(failed(repair=record), SETTINGS, now=T0 + 41).do is Do.NOTHING
    assert machine.outcome_of(second, record) is None, "a cancellation is no outcome of a repair"


def test_a_request_going_on_waits() -> None:
    facts = failed(repair=asked(failed()))
    assert machine.decide(facts, SETTINGS, now=T0 + 599).do is Do.NOTHING


def test_a_request_through_an_object_ends_when_the_object_says_so_not_at_the_reboot() -> None:
    facts = failed(repair=asked(failed(), obj="gpuval-n1"), boot_id="boot-2")
    assert machine.decide(facts, SETTINGS, now=T0 + 5).do is Do.NOTHING
    step = machine.decide(facts, SETTINGS, now=T0 + 6, object_end=RepairEnd.DONE)
    assert (step.do, step.end) == (Do.END, RepairEnd.DONE)


def test_an_ended_repair_is_validated_again_once_ready_and_not_twice_within_the_timeout() -> None:
    record = machine.ended(asked(failed()), RepairEnd.REBOOTED, T0 + 10)
    assert record.state == RepairState.REVALIDATING and record.ended_by == RepairEnd.REBOOTED
    facts = failed(repair=record)
    assert machine.decide(facts, SETTINGS, now=T0 + 10).do is Do.REVALIDATE
    assert (
        machine.decide(dataclasses.replace(facts, ready=False), SETTINGS, now=T0).do is Do.NOTHING
    )
    joined = machine.decide(facts, SETTINGS, now=T0 + 20, joined_at=T0 + 10)
    assert joined.do is Do.NOTHING
    again = machine.decide(facts, SETTINGS, now=T0 + 700, joined_at=T0 + 10)
    assert again.do is Do.REVALIDATE, "a re-validation that never gave a verdict is tried again"


def test_a_pass_after_the_repair_is_back_in_service_a_failure_is_failed_again() -> None:
    record = machine.ended(asked(failed()), RepairEnd.DONE, T0 + 10)
    back = machine.after_verdict(record, Verdict.PASSED, T0 + 40)
    assert back is not None and back.state == RepairState.REPAIRED and back.back == int(T0 + 40)
    again = machine.after_verdict(record, Verdict.FAILED, T0 + 40)
    assert again is not None and again.state == RepairState.FAILED_AGAIN
    assert machine.after_verdict(record, Verdict.NOT_RUN, T0 + 40) == record
    # A run that fails the node before its repair ended changes nothing.
    open_request = asked(failed())
    assert machine.after_verdict(open_request, Verdict.FAILED, T0 + 5) == open_request
    outcome = machine.outcome_of(record, back)
    assert outcome == machine.Outcome(RepairAction.REBOOT, "passed", 40.0)
    assert machine.outcome_of(record, again) == machine.Outcome(RepairAction.REBOOT, "failed")


def test_failing_again_after_max_repairs_within_the_window_needs_repair_and_asks_nothing() -> None:
    first = asked(failed())
    failed_once = machine.after_verdict(
        machine.ended(first, RepairEnd.REBOOTED, T0 + 10), Verdict.FAILED, T0 + 20
    )
    step = machine.decide(failed(repair=failed_once), SETTINGS, now=T0 + 30)
    assert step.do is Do.REQUEST, "one repair of two: ask again"
    second = machine.requested(
        failed(repair=failed_once), RepairAction.REBOOT, SETTINGS, now=T0 + 30
    )
    assert second.count == 2 and second.history == (int(T0), int(T0 + 30))
    assert second.failed == first.failed, "failure → back in service counts from the first failure"
    failed_twice = machine.after_verdict(
        machine.ended(second, RepairEnd.REBOOTED, T0 + 40), Verdict.FAILED, T0 + 50
    )
    facts = failed(repair=failed_twice)
    step = machine.decide(facts, SETTINGS, now=T0 + 60)
    assert (step.do, step.action) == (Do.NEEDS_REPAIR, RepairAction.REBOOT)
    needs = machine.needs_repair(facts, RepairAction.REBOOT, SETTINGS, T0 + 60)
    assert needs.state == RepairState.NEEDS_REPAIR and needs.count == 2
    assert machine.decide(failed(repair=needs, needs_repair_label=True), SETTINGS, now=T0).do is (
        Do.NOTHING
    ), "no third request"


def test_repairs_older_than_the_window_do_not_count() -> None:
    record = RepairRecord(
        RepairState.FAILED_AGAIN,
        "Reboot",
        "KernelXidReboot",
        int(T0),
        int(T0),
        "b",
        2,
        history=(int(T0), int(T0) + 10),
    )
    later = T0 + SETTINGS.window + 11
    assert machine.decide(failed(repair=record), SETTINGS, now=later).do is Do.REQUEST


def test_a_repaired_node_that_fails_anew_is_asked_again_and_counts_its_earlier_repairs() -> None:
    repaired = RepairRecord(
        RepairState.REPAIRED,
        "Reboot",
        "KernelXidReboot",
        int(T0),
        int(T0),
        "b",
        2,
        history=(int(T0), int(T0) + 10),
        back=int(T0) + 100,
    )
    before = failed(repair=repaired, at=int(T0) + 50)  # the failure the repair answered
    assert machine.decide(before, SETTINGS, now=T0 + 200).do is Do.NOTHING
    anew = failed(repair=repaired, at=int(T0) + 150)
    assert machine.decide(anew, SETTINGS, now=T0 + 200).do is Do.NEEDS_REPAIR


def test_failing_again_with_what_no_engine_repairs_needs_a_person() -> None:
    record = machine.after_verdict(
        machine.ended(asked(failed()), RepairEnd.REBOOTED, T0), Verdict.FAILED, T0 + 5
    )
    step = machine.decide(failed("BurnMismatch", repair=record), SETTINGS, now=T0 + 6)
    assert (step.do, step.action) == (Do.NEEDS_REPAIR, RepairAction.REPLACE)


def test_removing_the_needs_repair_label_validates_the_node_again_with_a_clean_history() -> None:
    needs = RepairRecord(
        RepairState.NEEDS_REPAIR,
        "Reboot",
        "KernelXidReboot",
        int(T0),
        int(T0),
        "b",
        2,
        history=(int(T0), int(T0) + 10),
    )
    assert machine.decide(failed(repair=needs, needs_repair_label=True), SETTINGS, now=T0).do is (
        Do.NOTHING
    )
    assert machine.decide(failed(repair=needs), SETTINGS, now=T0).do is Do.BY_PERSON
    fresh = machine.by_person(needs, T0 + 1)
    assert fresh.state == RepairState.REVALIDATING and fresh.history == ()
    assert fresh.ended_by == RepairEnd.PERSON


def test_a_re_validation_runs_what_failed_with_the_state_check_and_always_a_load() -> None:
    loads = ("burn", "memory", "bandwidth", "nccl", "train", "dcgm")
    assert machine.repair_checks(["nccl"], loads, "state") == ("state", "nccl")
    assert machine.repair_checks(["state"], loads, "state") == ("state", "burn")
    assert machine.repair_checks(["driver", "burn"], loads, "state") == ("state", "driver", "burn")
    assert machine.repair_checks([], loads, "state") == (), "nothing known: the spec's list"


def test_settings_carry_the_spec_defaults() -> None:
    settings = Settings.of(Remediation())
    assert settings == Settings(RemediationMode.CONDITION, 2, 86400, 3600)


def test_an_outcome_seen_only_once_the_node_needs_repair_counts_as_failed() -> None:
    revalidating = machine.ended(asked(failed()), RepairEnd.REBOOTED, T0)
    needs = machine.needs_repair(failed(repair=revalidating), RepairAction.REBOOT, SETTINGS, T0 + 5)
    assert machine.outcome_of(revalidating, needs) == machine.Outcome("Reboot", "failed")
    assert machine.outcome_of(needs, needs) is None


def test_a_pass_while_the_repair_is_still_asked_withdraws_the_request_not_a_repair() -> None:
    # Issue 43: a person overrules the verdict (or a scheduled run passes the node) before the
    # engine ended its repair: the node is back, the request withdrawn, not counted as a success.
    open_request = asked(failed(), obj="ns/gpuval-n1-abc")
    assert machine.withdraws_on(open_request, Verdict.PASSED)
    assert not machine.withdraws_on(open_request, Verdict.FAILED)
    back = machine.after_verdict(open_request, Verdict.PASSED, T0 + 5)
    assert back is not None and back.state == RepairState.WITHDRAWN
    assert (back.back, back.ended, back.revalidated) == (int(T0 + 5), None, None)
    assert not back.active, "a withdrawn request holds no breaker slot"
    assert machine.withdraws(open_request, back)
    assert machine.outcome_of(open_request, back) == machine.Outcome(
        RepairAction.REBOOT, RepairOutcome.WITHDRAWN
    )
    assert machine.after_verdict(back, Verdict.PASSED, T0 + 9) == back
    # A re-validation that passes after the repair ended is a repair, not a withdrawal.
    ended = machine.ended(open_request, RepairEnd.DONE, T0 + 3)
    repaired = machine.after_verdict(ended, Verdict.PASSED, T0 + 5)
    assert repaired is not None and repaired.state == RepairState.REPAIRED
    assert not machine.withdraws_on(ended, Verdict.PASSED)
    assert not machine.withdraws(ended, repaired)
    # It fails anew later: the loop asks again, counting the withdrawn request's repair.
    step = machine.decide(failed(at=int(T0 + 20), repair=back), SETTINGS, now=T0 + 20)
    assert step.do is Do.REQUEST
