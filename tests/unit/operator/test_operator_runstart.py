"""control.runstart: a run's number and its RunStarted Event's words, pure (split out of
ValidationController; the start itself is pinned by the integration tests of the run)."""

from __future__ import annotations

from gpuval_api.crd import RunTrigger
from gpuval_operator.control.runstart import next_run_number, started_message
from gpuval_operator.run.state import RunState


def run(number: int) -> RunState:
    return RunState(
        validation="v", run_id=f"{number}-abcd", number=number, generation=1,
        trigger=RunTrigger.CREATED, started_at=0.0,
    )  # fmt: skip


def test_the_next_number_is_one_past_the_highest_known() -> None:
    assert next_run_number(None, [], {}) == 1
    assert next_run_number(run(3), [], {}) == 4
    # Children of a later run outlive its status (a restart before the status was written).
    assert next_run_number(run(3), ["7-beef", "2-0000"], {}) == 8
    assert next_run_number(None, [], {"run": {"number": 11}}) == 12


def test_the_started_event_names_the_nodes_that_publish_no_device() -> None:
    plain = started_message("4-abcd", RunTrigger.CREATED, 10, None)
    assert plain == f"run 4-abcd ({RunTrigger.CREATED}) started on 10 nodes"
    assert started_message("4-abcd", RunTrigger.CREATED, 10, ()) == plain
    one = started_message("4-abcd", RunTrigger.CREATED, 10, ("n1",))
    assert one == plain + " of 11 selected: 1 publishes no device (condition DevicesPublished)"
    two = started_message("4-abcd", RunTrigger.CREATED, 10, ("n1", "n2"))
    assert two.endswith(" of 12 selected: 2 publish no device (condition DevicesPublished)")
