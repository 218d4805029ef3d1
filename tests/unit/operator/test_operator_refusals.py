"""The API server's refusal of an agent pod is the cluster's configuration, never the node's
(issue 34 part 1): what refused it is named from the server's words, the node waits for the
cluster (Waiting, not NotRun: issue 43 part 7) without any node action, the run tries one pod
again after a growing pause, and a quota that admits some of the run's pods paces the creates
(issue 43 part 6). (The real API server's Pod Security refusal and a ResourceQuota of 2 pods:
tests/integration/operator/test_operator_notrun.py.)"""

from __future__ import annotations

import pytest

from gpuval_api.conditions import ConditionReason as R
from gpuval_api.reasons import Reason, verdict_of
from gpuval_api.report import build_waiting_status
from gpuval_api.result import Verdict
from gpuval_operator import names
from gpuval_operator.run import rollup
from gpuval_operator.run.refusals import (
    LONGEST_PAUSE,
    Refusal,
    Refused,
    refused_condition,
    refused_event,
)
from gpuval_operator.run.state import Phase, RunState

POD = 'pods "gpuval-fleet-1-ab12-node-a"'


@pytest.mark.parametrize(
    ("status", "words", "cause", "policy"),
    [
        (
            403,
            f'{POD} is forbidden: violates PodSecurity "restricted:latest": privileged (container '
            '"agent" must not set securityContext.privileged=true), host namespaces (hostPID=true)',
            R.POD_SECURITY,
            'Pod Security "restricted:latest"',
        ),
        (
            403,
            f"{POD} is forbidden: ValidatingAdmissionPolicy 'no-gpu' with binding 'no-gpu-b' "
            "denied request: GPU pods only in the training namespaces",
            R.ADMISSION_POLICY,
            "ValidatingAdmissionPolicy 'no-gpu' (binding 'no-gpu-b')",
        ),
        (
            400,
            'admission webhook "validate.kyverno.svc-fail" denied the request: policy '
            "disallow-privileged: privileged containers are not allowed",
            R.ADMISSION_WEBHOOK,
            'admission webhook "validate.kyverno.svc-fail"',
        ),
        (
            500,
            'Internal error occurred: failed calling webhook "validate.kyverno.svc-fail": failed '
            'to call webhook: Post "https://kyverno-svc.kyverno.svc:443/validate": dial tcp '
            "10.96.0.12:443: connect: connection refused",
            R.WEBHOOK_UNAVAILABLE,
            'admission webhook "validate.kyverno.svc-fail" (unavailable)',
        ),
        (
            403,
            f"{POD} is forbidden: exceeded quota: gpu-quota, requested: requests.nvidia.com/gpu=8, "
            "used: requests.nvidia.com/gpu=0, limited: requests.nvidia.com/gpu=4",
            R.QUOTA_EXCEEDED,
            'ResourceQuota "gpu-quota"',
        ),
        (
            404,
            'namespaces "gpuval-agents" not found',
            R.POD_REFUSED,
            "the API server (HTTP 404)",
        ),
    ],
)
def test_what_refused_the_pod_is_named_from_the_api_servers_words(
    status: int, words: str, cause: R, policy: str
) -> None:
    found = Refusal.of(status, words)
    assert (found.cause, found.policy, found.status) == (cause, policy, status)
    assert found.words == words
    message = found.node_message("gpuval-fleet-1-ab12-node-a", "gpuval-agents")
    assert message.startswith(
        f"the API server refused agent pod gpuval-fleet-1-ab12-node-a in namespace gpuval-agents: "
        f"{words} ("
    ), "the API server's words, whole"
    assert "not the node" in message


def test_a_policys_long_message_is_kept_whole_and_its_name_said_once() -> None:
    # Issue 43 part 7: the node's message was cut at 300 characters just before the policy's
    # own words, after the policy's name twice.
    reason = "agent pods may run only in maintenance windows, ask the platform team " * 3
    words = (
        f"{POD} is forbidden: ValidatingAdmissionPolicy 'gpuval-agents-deny' with binding "
        f"'gpuval-agents-deny-binding' denied request: {reason.strip()}"
    )
    refusal = Refusal.of(403, words)
    message = refusal.node_message("gpuval-fleet-1-ab12-node-a", "gpuval-agents")
    run = RunState("v", "1-aaaa", 1, 1, "created", 1000.0)
    run.add("a", 8, "r", "p").phase = Phase.RUNNING
    assert run.refuse("a", message)
    kept = run.nodes["a"].message
    assert reason.strip() in kept, "the policy's own words"
    assert kept.count("gpuval-agents-deny'") == 1
    refused = Refused.first(refusal, "gpuval-agents", 1800000000.0)
    condition = refused_condition(refused, 1)[3]
    assert reason.strip() in condition and condition.count("gpuval-agents-deny'") == 1


def test_a_refused_node_waits_with_no_verdict_no_node_action_and_keeps_the_run_open() -> None:
    assert verdict_of(Reason.AGENT_POD_REFUSED) is Verdict.NOT_RUN  # the class of its reason
    run = RunState("v", "1-aaaa", 1, 1, "created", 1000.0)
    for node in ("a", "b", "c"):
        run.add(
            node, 8, names.report_name("v", "1-aaaa", node), names.pod_name("v", "1-aaaa", node)
        )
    for record in run.nodes.values():
        record.phase = Phase.RUNNING
    assert run.refuse("a", "refused") and run.refuse("b", "refused") and run.refuse("c", "no")
    assert run.finished == [], "no node action follows a refusal"
    assert [r.node for r in run.refused_nodes()] == ["a", "b", "c"]
    counts = run.counts()
    assert (counts["waiting"], counts["notRun"], counts["running"]) == (3, 0, 0)
    assert not run.all_done(), "the run waits for the cluster to admit a pod"
    # Issue 43 part 7: during a full refusal no node has a verdict, and the status says so.
    run.refused = Refused.first(Refusal.of(403, "refused"), "gpuval-agents", 1000.0)
    status = rollup.build_run_status(run, previous_conditions=[], now=1001.0)
    succeeded = next(c for c in status["conditions"] if c["type"] == "Succeeded")
    assert succeeded["status"] == "Unknown"
    assert succeeded["message"].startswith("0 of 3 nodes have a verdict; 0 running, 3 waiting")
    assert status["nodes"]["waiting"] == 3 and status["notRunNodes"] == []
    record = run.nodes["a"]
    record.readmit()
    assert (record.phase, record.attempt, record.pod) == (
        Phase.PENDING,
        1,
        names.pod_name("v", "1-aaaa", "a"),
    ), "no pod existed: no attempt spent, the same pod name"
    assert record.stale_report and record.reset_due, "its report is reset before the pod is made"
    assert not run.refuse("d", "no such node")


def test_a_waiting_nodes_report_is_waiting_with_no_verdict() -> None:
    status = build_waiting_status(Reason.AGENT_POD_REFUSED, "refused  by\nthe API server")
    assert status["phase"] == "Waiting"
    assert status["verdict"] is None and status["completedAt"] is None, "null removes them"
    assert (status["reason"], status["message"]) == ("AgentPodRefused", "refused by the API server")
    assert status["settledBy"] is None


def test_one_pod_is_tried_again_after_a_pause_that_doubles_up_to_its_limit() -> None:
    refusal = Refusal.of(403, 'violates PodSecurity "restricted:latest": privileged')
    refused = Refused.first(refusal, "gpuval-agents", 1000.0)
    assert not refused.due(1004.0) and refused.due(1005.0)
    refused.again(refusal, 1001.0)  # another pod of the same wave: nothing changes
    assert refused.retry_at == 1005.0
    now = 1005.0
    pauses = []
    for _ in range(8):
        refused.again(refusal, now)
        pauses.append(refused.pause)
        now = refused.retry_at
    assert pauses == [10.0, 20.0, 40.0, 80.0, 120.0, 120.0, 120.0, 120.0]
    assert max(pauses) == LONGEST_PAUSE


QUOTA_WORDS = (
    f"{POD} is forbidden: exceeded quota: agents, requested: pods=1, used: pods=2, limited: pods=2"
)


def test_a_quota_that_admits_some_pods_paces_the_creates_to_the_pods_that_end() -> None:
    # Issue 43 part 6: a ResourceQuota of 2 pods for a wave of 6.
    quota = Refusal.of(403, QUOTA_WORDS)
    refused = Refused.first(quota, "gpuval-agents", 1000.0)
    refused.paced(live=2, refused=True, now=1000.0)
    assert refused.admits == 2
    assert refused.slots(live=2, now=1001.0) == 0, "no create against a full quota"
    assert refused.slots(live=1, now=1001.0) == 1, "a pod ended: its slot is refilled at once"
    assert refused.slots(live=0, now=1001.0) == 2
    assert refused.slots(live=2, now=1005.0) == 1, "after the pause, one more: raised?"
    # The freed slot's create refused just after the pod ended (the quota's usage lags the pod's
    # end): tried again soon, what the quota admits unchanged.
    refused.again(quota, 1001.0)
    refused.paced(live=1, refused=True, now=1001.0, ended=1)
    assert refused.admits == 2 and refused.slots(live=1, now=1001.2) == 0
    assert refused.slots(live=1, now=1002.0) == 1
    refused.paced(live=2, refused=False, now=1002.0)
    assert refused.admits == 2 and refused.slot_pause == 0.5
    # A create beyond them admitted: the quota was raised.
    refused.paced(live=3, refused=False, now=1010.0)
    assert refused.admits == 3
    # Every pod of the run ended and the freed slots' creates refused (the usage lags): still
    # paced, tried again soon, not after the long pause.
    refused.paced(live=0, refused=True, now=1020.0, ended=3)
    assert refused.admits == 3 and refused.slots(live=0, now=1021.0) == 3
    # Refused with no pod of the run ended just before: the quota admits fewer now (other pods
    # hold its slots).
    refused.paced(live=1, refused=True, now=1030.0)
    assert refused.admits == 1


def test_a_quota_first_refusing_just_after_pods_ended_counts_their_slots() -> None:
    # A wave of 2 (maxConcurrent 25 % of 6) made as the first 2 ended: the quota, still counting
    # one of them, admitted 1 and refused 1. It admits 2 (1 running, 1 ended just now), not 1.
    refused = Refused.first(Refusal.of(403, QUOTA_WORDS), "gpuval-agents", 1000.0)
    refused.paced(live=1, refused=True, now=1000.0, ended=1)
    assert refused.admits == 2 and refused.slots(live=1, now=1001.0) == 1


def test_a_refusal_that_admits_none_of_the_runs_pods_is_not_paced() -> None:
    for words in (QUOTA_WORDS, 'violates PodSecurity "restricted:latest": privileged'):
        refused = Refused.first(Refusal.of(403, words), "gpuval-agents", 1000.0)
        refused.paced(live=0 if "quota" in words else 2, refused=True, now=1000.0)
        assert refused.admits is None
        assert refused.slots(live=0, now=1001.0) == 0 and refused.slots(live=0, now=1005.0) == 1


def test_the_condition_names_the_namespace_and_the_servers_words_once() -> None:
    words = 'pods "p" is forbidden: violates PodSecurity "restricted:latest": privileged'
    refused = Refused.first(Refusal.of(403, words), "gpuval-agents", 1800000000.0)
    kind, status, reason, message = refused_condition(refused, 2)
    assert (kind, status, reason) == ("AgentPodsRefused", "True", "PodSecurity")
    assert message.startswith(
        f"the API server refuses agent pods in namespace gpuval-agents: {words}. The cluster's "
        "configuration, not the nodes: 2 nodes wait (Waiting"
    )
    assert message.count("restricted:latest") == 1
    assert "tried again at 2027-01-15T08:00:05Z" in message
    assert refused_condition(None, 0)[1:3] == ("False", "AgentPodsAdmitted")
    run = RunState("v", "1-aaaa", 1, 1, "created", 1000.0)
    run.refused = refused
    status = rollup.build_run_status(run, previous_conditions=[], now=1001.0)
    found = [c for c in status["conditions"] if c["type"] == "AgentPodsRefused"]
    assert len(found) == 1 and found[0]["status"] == "True"


def test_the_event_of_a_paced_quota_counts_as_the_status_does() -> None:
    refused = Refused.first(Refusal.of(403, QUOTA_WORDS), "gpuval-agents", 1000.0)
    refused.paced(live=2, refused=True, now=1000.0)
    text = refused_event("1-aaaa", refused, waiting=4, live=2, done=0)
    assert text.startswith(
        'ResourceQuota "agents" admits 2 agent pods of run 1-aaaa at once: 2 run, 4 nodes wait '
        "their turn (Waiting, not NotRun"
    )
    assert "no node is tested" not in text and text.count("exceeded quota") == 1
    full = Refused.first(Refusal.of(403, QUOTA_WORDS), "gpuval-agents", 1000.0)
    full.paced(live=0, refused=True, now=1000.0)
    assert "0 run, 3 nodes wait" in refused_event("1-aaaa", full, waiting=3, live=0, done=0)
