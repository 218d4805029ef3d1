"""Repair requests the API server refuses (gpuval_operator.remediation.refusals), without a
cluster: the pause per node and kind grows and is bounded, a request made clears it, and the
RepairRequestsRefused condition names the kind, the API server's words and the nodes waiting."""

from __future__ import annotations

import itertools

from gpuval_api.conditions import ConditionReason, ConditionType
from gpuval_operator.remediation.refusals import (
    FIRST_PAUSE,
    LONGEST_PAUSE,
    Refusal,
    RequestBackoff,
    kind_of,
    refused_condition,
)

KIND = kind_of("janitor.dgxc.nvidia.com/v1alpha1", "RebootNode")
NOT_SERVED = Refusal(KIND, None, "janitor.dgxc.nvidia.com/v1alpha1 is not served")
DENIED = Refusal(KIND, 422, "ValidatingAdmissionPolicy 'no-reboots' denied request: \"no\"")
T0 = 1_000_000.0


def test_kind_names_group_and_version() -> None:
    assert KIND == "RebootNode.janitor.dgxc.nvidia.com/v1alpha1"
    assert kind_of("v1", "ConfigMap") == "ConfigMap/v1"


def test_a_refused_request_waits_a_pause_that_doubles_up_to_its_bound() -> None:
    backoff = RequestBackoff()
    now, tries = T0, []
    for _ in range(12):
        assert not backoff.blocked("n1", KIND, now)
        waiting = backoff.refused("n1", NOT_SERVED, now)
        tries.append(now)
        assert backoff.blocked("n1", KIND, now + waiting.pause - 0.1)
        now = waiting.retry_at
    pauses = [b - a for a, b in itertools.pairwise(tries)]
    assert pauses[0] == FIRST_PAUSE and max(pauses) == LONGEST_PAUSE
    assert all(b >= a for a, b in itertools.pairwise(pauses)), pauses
    # A few tries a minute at first, fewer later: never more than 4 within any minute.
    assert max(sum(1 for t in tries if s <= t < s + 60) for s in tries) <= 4
    assert backoff.refused_total[KIND] == 12


def test_the_pause_is_per_node_and_kind_and_a_made_request_clears_it() -> None:
    backoff = RequestBackoff()
    backoff.refused("n1", NOT_SERVED, T0)
    assert not backoff.blocked("n2", KIND, T0), "another node is tried on its own"
    other = kind_of("janitor.dgxc.nvidia.com/v1alpha1", "GPUReset")
    assert not backoff.blocked("n1", other, T0), "another kind is tried at once"
    assert backoff.accepted("n1", KIND) and not backoff.blocked("n1", KIND, T0 + 1)
    assert not backoff.accepted("n1", KIND)
    backoff.refused("n1", NOT_SERVED, T0)
    backoff.refused("n2", NOT_SERVED, T0)
    backoff.keep({"n2"}, KIND)
    assert set(backoff.waiting) == {("n2", KIND)}, "a node no longer asking is forgotten"
    backoff.keep({"n2"}, other)
    assert not backoff.waiting, "a template of another kind starts afresh"


def test_a_kind_found_served_frees_the_nodes_that_waited_for_it_but_not_the_refused() -> None:
    backoff = RequestBackoff()
    backoff.refused("n1", NOT_SERVED, T0)
    backoff.refused("n2", DENIED, T0)
    backoff.served(KIND)
    assert not backoff.blocked("n1", KIND, T0 + 1), "its CRD is there: asked at once"
    assert backoff.blocked("n2", KIND, T0 + 1), "refused by admission: its pause holds"


def test_the_condition_names_the_kind_the_words_and_the_nodes_and_clears() -> None:
    backoff = RequestBackoff()
    kind, status, reason, message = refused_condition(backoff)
    assert (kind, status, reason) == (
        ConditionType.REPAIR_REQUESTS_REFUSED,
        "False",
        ConditionReason.REPAIR_REQUESTS_ACCEPTED,
    )
    for i in range(7):
        backoff.refused(f"n{i}", NOT_SERVED, T0)
    _, status, reason, message = refused_condition(backoff)
    assert (status, reason) == ("True", ConditionReason.KIND_NOT_SERVED)
    assert "RebootNode.janitor.dgxc.nvidia.com/v1alpha1 (not served)" in message
    assert "is not served" in message and "7 nodes wait" in message
    assert "n0, n1, n2, n3, n4 and 2 more" in message
    backoff.refused("n0", DENIED, T0 + 20)
    _, status, reason, message = refused_condition(backoff)
    assert (status, reason) == ("True", ConditionReason.REPAIR_OBJECT_REFUSED)
    assert "(HTTP 422): ValidatingAdmissionPolicy 'no-reboots' denied" in message
    for i in range(7):
        backoff.accepted(f"n{i}", KIND)
    assert refused_condition(backoff)[1] == "False"
