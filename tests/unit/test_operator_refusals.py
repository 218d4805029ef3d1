"""The API server's refusal of an agent pod is the cluster's configuration, never the node's
(issue 34 part 1): what refused it is named from the server's words, the node is NotRun and waits
for the cluster without any node action, and the run tries one pod again after a growing pause.
(The real API server's Pod Security refusal: tests/integration/test_operator_notrun.py.)"""

from __future__ import annotations

import pytest

from gpuval_api.conditions import ConditionReason as R
from gpuval_api.reasons import Reason, verdict_of
from gpuval_api.result import Verdict
from gpuval_operator import names
from gpuval_operator.run import rollup
from gpuval_operator.run.refusals import LONGEST_PAUSE, Refusal, Refused, refused_condition
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
        f"{policy}: {words}"
    )
    assert "not the node" in message


def test_a_refused_node_is_not_run_with_no_node_action_and_keeps_the_run_open() -> None:
    assert verdict_of(Reason.AGENT_POD_REFUSED) is Verdict.NOT_RUN
    run = RunState("v", "1-aaaa", 1, 1, "created", 1000.0)
    for node in ("a", "b"):
        run.add(
            node, 8, names.report_name("v", "1-aaaa", node), names.pod_name("v", "1-aaaa", node)
        )
    for record in run.nodes.values():
        record.phase = Phase.RUNNING
    assert run.refuse("a", "refused") and run.refuse("b", "refused")
    assert run.finished == [], "no node action follows a refusal"
    assert [r.node for r in run.refused_nodes()] == ["a", "b"]
    assert run.counts()["notRun"] == 2
    assert not run.all_done(), "the run waits for the cluster to admit a pod"
    record = run.nodes["a"]
    record.readmit()
    assert (record.phase, record.attempt, record.pod) == (
        Phase.PENDING,
        1,
        names.pod_name("v", "1-aaaa", "a"),
    ), "no pod existed: no attempt spent, the same pod name"
    assert record.stale_report and record.reset_due, "its report is reset before the pod is made"
    assert not run.refuse("c", "no such node")


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


def test_the_condition_names_the_namespace_the_policy_and_the_servers_words_once() -> None:
    words = 'pods "p" is forbidden: violates PodSecurity "restricted:latest": privileged'
    refused = Refused.first(Refusal.of(403, words), "gpuval-agents", 1800000000.0)
    kind, status, reason, message = refused_condition(refused, 2)
    assert (kind, status, reason) == ("AgentPodsRefused", "True", "PodSecurity")
    assert message.startswith(
        f'the API server refuses agent pods in namespace gpuval-agents: Pod Security "restricted:'
        f"latest\": {words}. The cluster's configuration, not the nodes: 2 nodes wait"
    )
    assert "tried again at 2027-01-15T08:00:05Z" in message
    assert refused_condition(None, 0)[1:3] == ("False", "AgentPodsAdmitted")
    run = RunState("v", "1-aaaa", 1, 1, "created", 1000.0)
    run.refused = refused
    status = rollup.build_run_status(run, previous_conditions=[], now=1001.0)
    found = [c for c in status["conditions"] if c["type"] == "AgentPodsRefused"]
    assert len(found) == 1 and found[0]["status"] == "True"
