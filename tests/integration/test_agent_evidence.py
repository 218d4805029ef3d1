"""A failing node keeps its evidence in its own GpuNodeReport (issue 19, part 4): the real operator
runs a validation on simulated nodes, the pod runner runs the real agent (simulated GPU backend)
for each agent pod, and the failing node's report carries the bounded bundle, which decodes to the
state readings, the counters that grew, the kernel log around the XID and the failed checks."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gpuval_api.evidence import MAX_ENCODED_BYTES, decode_evidence
from gpuval_devtools.controlplane import Cluster
from tests.support.fleet import (
    Fleet,
    Operator,
    apply,
    by_node,
    completed_run,
    delete_validation,
    reports_of,
)

pytestmark = pytest.mark.usefixtures("install_crds")


def test_a_failing_node_keeps_its_evidence_in_its_report_and_the_bundle_decodes(
    cluster: Cluster, fleet: Fleet, operator: Operator, unique_name: Callable[[str], str]
) -> None:
    healthy = fleet.add(unique_name("ev-ok"))
    broken = fleet.add(
        unique_name("ev-bad"),
        faults=[
            {"kind": "ib-link-flapping", "gpu": 1},
            {"kind": "nvlink-errors-grow", "gpu": 3, "link": 3},
            {"kind": "kernel-xid", "gpu": 6, "xid": 48},
        ],
    )
    name = unique_name("evidence")
    with operator():
        apply(cluster, fleet.validation(name))
        status = completed_run(cluster, name)
        reports = by_node(reports_of(cluster, name, status["run"]["id"]))
        delete_validation(cluster, name)

    assert reports[healthy]["verdict"] == "Passed" and "evidence" not in reports[healthy]
    report = reports[broken]
    assert report["verdict"] == "Failed" and report["reason"] == "KernelXidResetGpu"
    failures = {(f["check"], f["reason"]) for f in report["failures"]}
    assert {
        ("state", "KernelXidResetGpu"),
        ("state", "IbLinkFlapping"),
        ("state", "ErrorCountersGrew"),
    } <= failures

    evidence = report["evidence"]
    assert evidence["encoding"] == "gzip+base64"
    assert len(evidence["data"]) == evidence["encodedBytes"] <= MAX_ENCODED_BYTES
    assert evidence["cut"] == []
    document = decode_evidence(evidence)
    assert document["node"] == broken and document["reason"] == "KernelXidResetGpu"
    sections = document["sections"]
    assert [c["name"] for c in sections["failedChecks"]["checks"]] == ["state"]
    grew = sections["counters"]["grew"]
    assert grew[0]["check"] == "burn" and grew[0]["counter"] == "GPU 3 NVLink 3: crcFlit errors"
    assert grew[0]["delta"] == 1200
    assert any("NVRM: Xid (PCI:0000:1c:00): 48" in line for line in sections["kernelLog"]["lines"])
    assert sections["host"]["ports"][1]["counters"]["link_downed"] == 3
    assert len(sections["nvml"]["before"]) == 8
