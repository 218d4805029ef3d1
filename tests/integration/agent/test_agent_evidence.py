"""A failing node keeps its evidence in its own GpuNodeReport (issue 19, part 4): the real operator
runs a validation on simulated nodes, the pod runner runs the real agent (simulated GPU backend)
for each agent pod, and the failing node's report carries the bounded bundle, which decodes to the
state readings, the counters that grew, the kernel log around the XID and the failed checks.
`kubectl gpuval evidence NODE` (the real kubectl finding the plugin) writes it to a file, checked
against its sha256, and says there is none for the node that passed; `kubectl gpuval status NAME`
shows the failing node's state findings with their hints (part 5)."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from gpuval_api.evidence import MAX_ENCODED_BYTES, decode_evidence
from gpuval_api.reasons import REASONS, Reason
from gpuval_devtools.controlplane import Cluster
from gpuval_devtools.launch import kubectl_gpuval
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
    cluster: Cluster,
    fleet: Fleet,
    operator: Operator,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    healthy = fleet.add(unique_name("ev-ok"))
    broken = fleet.add(
        unique_name("ev-bad"),
        faults=[
            {"kind": "ib-link-flapping", "gpu": 1},
            {"kind": "nvlink-errors-grow", "gpu": 3, "link": 3},
            {"kind": "kernel-xid", "gpu": 6, "xid": 48},
            {"kind": "ib-port-down", "gpu": 2},  # only a warning in this validation
        ],
    )
    name = unique_name("evidence")
    bundle = tmp_path / "bad.json.gz"
    with operator():
        checks = {
            "burn": {"durationSeconds": 5},
            "nccl": {"maxBytes": 1 << 30},
            "state": {"actions": {"IbPortDown": "Warn"}},
        }
        apply(cluster, fleet.validation(name, checks=checks))
        try:
            status = completed_run(cluster, name)
            run = status["run"]["id"]
            reports = by_node(reports_of(cluster, name, run))
            fetched = kubectl_gpuval(cluster, "evidence", broken, "-o", str(bundle))
            narrowed = kubectl_gpuval(
                cluster, "evidence", broken, "--validation", name, "--run", run, "-o", "-"
            )
            passed = kubectl_gpuval(cluster, "evidence", healthy)
            shown = kubectl_gpuval(cluster, "status", name)
        finally:
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

    # What a person sees (shown with -s, and with a failure): docs/see.md quotes it.
    print(fetched.stdout, passed.stderr, shown.stdout, sep="\n")
    assert fetched.returncode == 0, fetched.stderr
    said = fetched.stdout.splitlines()
    assert said[0].startswith(f"wrote {bundle} (")
    assert said[0].endswith(f"(validation {name}, run {run}), Failed (KernelXidResetGpu)")
    assert f"sha256 {evidence['sha256']} (verified)" in fetched.stdout
    assert "sections: failedChecks, counters, kernelLog, nvml, host, environment" in fetched.stdout
    assert json.loads(gzip.decompress(bundle.read_bytes())) == document
    assert narrowed.returncode == 0, narrowed.stderr
    assert json.loads(narrowed.stdout) == document

    assert passed.returncode == 1 and passed.stdout == ""
    assert f"node {healthy!r} has no failing report" in passed.stderr
    assert f"(validation {name}, run {run}), is Passed" in passed.stderr

    assert shown.returncode == 0, shown.stderr
    failing, state = shown.stdout.split("More state of failing nodes (state check, not listed", 1)
    assert f"  {broken}  state GPU 6  KernelXidResetGpu: GPU 6: XID 48" in failing
    assert f"      hint: {REASONS[Reason.KERNEL_XID_RESET_GPU].hint}" in failing
    # The warning the failures do not list, with its hint; nothing listed above twice.
    assert f"  {broken}  Warning  IbPortDown: mlx5_2 port 1: state DOWN" in state
    assert f"      hint: {REASONS[Reason.IB_PORT_DOWN].hint}" in state
    assert "KernelXidResetGpu" not in state and healthy not in state
