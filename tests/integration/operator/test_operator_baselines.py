"""Baselines and history on the real control plane (issue 18, the operator's part): the operator
(in-process through kopf, or its own process in a second cluster) runs the real agent code on
simulated nodes (the simulated backend's `slow-gpu` fault is a slow GPU, or on every GPU of every
node a driver regression) and learns, gives and judges against GpuBaselines and each node's own
history.

GpuBaselines are cluster-scoped and keyed by the GPU stack: every simulated node here is the same
H200 x8 stack, so each test starts and ends without a GpuBaseline of that key.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuval_api.baseline import files
from gpuval_devtools.controlplane import Cluster, free_port
from gpuval_devtools.launch import (
    AGENT_NAMESPACE,
    agent_rbac,
    install_crds,
    operator_process,
)
from gpuval_devtools.simulation import SIMULATE_ANNOTATION, simulated_node
from gpuval_kubectl import cli
from tests.support import chart
from tests.support.baselines import slowed
from tests.support.fleet import (
    Fleet,
    Operator,
    apply,
    by_node,
    completed_run,
    conditions,
    delete_validation,
    events_of,
    patch_spec,
    reports_of,
    scrape,
    status_of,
)
from tests.support.kube import get_json, wait_for

pytestmark = pytest.mark.usefixtures("install_crds")

# The simulated nodes' GPU stack (NVIDIA H200, 8 GPUs, 700 W, PCIe gen5 x16) names the baseline.
LEARNED = "nvidia-h200-x8-700w-gen5x16"
EVERY_GPU = range(8)
# Runs here are short: the simulated burn and NCCL cost nothing at these sizes.
CHECKS = {"burn": {"durationSeconds": 2}, "nccl": {"maxBytes": 1 << 30}}


def _delete_baseline(cluster: Cluster, name: str = LEARNED) -> None:
    cluster.kubectl("delete", "gpubaseline", name, "--ignore-not-found", "--wait=true")


@pytest.fixture
def no_baseline(cluster: Cluster) -> Iterator[None]:
    """No GpuBaseline of the simulated stack before or after the test."""
    _delete_baseline(cluster)
    yield
    _delete_baseline(cluster)


def _learned(cluster: Cluster, name: str) -> dict[str, Any]:
    """The validation's status once its run learned its baseline (after the final status)."""
    found: dict[str, Any] = wait_for(
        f"{name} to learn {LEARNED}",
        lambda: (
            (status_of(cluster, name).get("baseline") or {}).get("learned")
            and status_of(cluster, name)
        ),
        timeout=120,
        interval=1,
    )
    return found


def _reasons(reports: list[dict[str, Any]]) -> dict[str, tuple[Any, Any]]:
    return {n: (s.get("verdict"), s.get("reason")) for n, s in by_node(reports).items()}


# Fifty agent processes on a 2-core machine shared with other work: minutes, not seconds.
@pytest.mark.timeout(2400)
def test_a_baseline_learned_from_fifty_nodes_leaves_the_three_slow_ones_out_and_names_them(
    cluster: Cluster,
    fleet: Fleet,
    operator: Operator,
    unique_name: Callable[[str], str],
    no_baseline: None,
) -> None:
    slow = [unique_name("slow") for _ in range(3)]
    wrong = unique_name("wrong")
    healthy = [unique_name("ok") for _ in range(46)]
    faults = {n: slowed(0.85, EVERY_GPU) for n in slow}
    faults[wrong] = [{"kind": "miscompare", "gpu": 3}]
    fleet.add_many({n: faults.get(n, []) for n in [*healthy, *slow, wrong]})
    name = unique_name("learn")
    # Fifty agents on a 2-core machine: each given its time.
    spec = {
        "maxConcurrent": 25,
        "nodeTimeoutSeconds": 1200,
        "checks": CHECKS,
        "baseline": {"minNodes": 5},
    }
    try:
        with operator():
            apply(cluster, fleet.validation(name, **spec))
            run = completed_run(cluster, name, timeout=2000)
            assert run["nodes"]["passed"] == 49, run["failingNodes"][:5]
            status = _learned(cluster, name)
            learned = get_json(cluster, "gpubaseline", LEARNED)
            reports = _reasons(reports_of(cluster, name, run["run"]["id"]))
            events = events_of(cluster, name)
    finally:
        delete_validation(cluster, name)

    # The slow nodes pass their checks (0.85 of a healthy H200 is above every absolute floor):
    # only the baseline can see them, and learning leaves them out and names them.
    assert {n for n, (verdict, _) in reports.items() if verdict == "Passed"} == {*healthy, *slow}
    assert reports[wrong] == ("Failed", "BurnMismatch")
    source = learned["spec"]["source"]
    assert (source["kind"], source["validation"], source["run"]) == (
        "Learned",
        name,
        run["run"]["id"],
    )
    assert sorted(e["node"] for e in source["excluded"]) == sorted(slow)
    assert {e["round"] for e in source["excluded"]} == {1}
    assert all(round(e["value"] / e["centre"], 2) == 0.85 for e in source["excluded"])
    # The failed node is never offered; the 46 healthy ones give every figure.
    assert source["nodesOffered"] == 49
    assert {f["nodes"] for f in learned["spec"]["figures"]} == {46}
    assert learned["spec"]["learnedWith"]["driverVersion"] == "580.159.04"
    assert status["baseline"]["learned"] == [LEARNED]
    # The learning run judged no node (there was no baseline when its pods were made).
    within = conditions(status)["WithinBaseline"]
    assert (within["status"], within["reason"]) == ("Unknown", "NoBaseline")
    said = [e["message"] for e in events if e["reason"] == "BaselineLearned"]
    assert len(said) == 1 and all(n in said[0] for n in slow), said
    assert "1 failed nodes not used" in said[0]


def test_a_fleet_in_two_even_halves_is_named_bimodal_learns_nothing_until_a_person_chooses(
    cluster: Cluster,
    fleet: Fleet,
    operator: Operator,
    unique_name: Callable[[str], str],
    no_baseline: None,
) -> None:
    slow = sorted(unique_name("slow") for _ in range(4))
    fast = sorted(unique_name("fast") for _ in range(4))
    fleet.add_many({**{n: slowed(0.9, EVERY_GPU) for n in slow}, **{n: [] for n in fast}})
    name = unique_name("bimodal")
    spec = {"maxConcurrent": 8, "checks": CHECKS, "baseline": {"minNodes": 3}}
    try:
        with operator():
            apply(cluster, fleet.validation(name, **spec))
            status = wait_for(
                f"{name} to find its stack bimodal",
                lambda: (
                    (status_of(cluster, name).get("baseline") or {}).get("bimodal")
                    and status_of(cluster, name)
                ),
                timeout=120,
            )
            events = events_of(cluster, name)
            learned_before = get_json(cluster, "gpubaseline", LEARNED)
            # A person chooses: kubectl gpuval baseline learn learns the better mode.
            said_by_kubectl = kubectl_gpuval(cluster, "baseline", "learn", name)
            learned = get_json(cluster, "gpubaseline", LEARNED)
    finally:
        delete_validation(cluster, name)

    # Before: the operator learned the middle (0.95 of the fast nodes) without a word, and a
    # fast node could then lose 14 % and pass.
    assert learned_before is None and status["baseline"].get("learned", []) == []
    bimodal = conditions(status)["Bimodal"]
    assert (bimodal["status"], bimodal["reason"]) == ("True", "NotLearnedBimodal")
    message = bimodal["message"]
    assert message.startswith(
        f"NVIDIA H200 x8, 700 W, PCIe gen5x16 is bimodal: 4 nodes ({', '.join(fast)}) at "
    )
    assert f"and 4 nodes ({', '.join(slow)}) at " in message
    assert "learned nothing until a person chooses" in message
    assert status["baseline"]["bimodal"] == [message]
    within = conditions(status)["WithinBaseline"]
    assert (within["status"], within["reason"]) == ("Unknown", "NoBaseline")
    (said,) = [e for e in events if e["reason"] == "BaselineNotLearned"]
    assert said["type"] == "Warning" and "is bimodal" in said["message"]
    # The person's choice: the fast half learned, the slow half named.
    assert "learned the better mode (4 nodes)" in said_by_kubectl
    source = learned["spec"]["source"]
    assert sorted(e["node"] for e in source["excluded"]) == slow
    assert all(round(e["value"] / e["centre"], 2) == 0.9 for e in source["excluded"])
    assert {f["nodes"] for f in learned["spec"]["figures"]} == {4}


def test_a_driver_regression_slowing_every_node_fails_each_below_baseline_and_is_systemic(
    cluster: Cluster,
    fleet: Fleet,
    operator: Operator,
    unique_name: Callable[[str], str],
    no_baseline: None,
) -> None:
    nodes = fleet.add_many({unique_name("n"): [] for _ in range(6)})
    name = unique_name("regress")
    spec = {
        "maxConcurrent": 6,
        "checks": CHECKS,
        "baseline": {"minNodes": 3},
        # Cordon failing nodes, a limit that would allow all 6: only the systemic hold keeps
        # them in service.
        "nodeActions": {"label": True, "cordon": True, "maxNodes": "100%"},
    }
    try:
        with operator() as port:
            apply(cluster, fleet.validation(name, **spec))
            first = completed_run(cluster, name)
            _learned(cluster, name)
            # A driver update slows every GPU of every node by 15 %.
            for node in nodes:
                fleet.resimulate(node, slowed(0.85, EVERY_GPU))
            patch_spec(cluster, name, {"history": 2})
            status = completed_run(cluster, name, after=first["run"]["number"])
            reports = reports_of(cluster, name, status["run"]["id"])
            selector = f"gpuval.dev/run={status['run']['id']}"
            pods = get_json(cluster, "pods", "-n", AGENT_NAMESPACE, "-l", selector) or {}
            metrics = scrape(port)
            events = events_of(cluster, name)
            cordoned = [
                n
                for n in nodes
                if (get_json(cluster, "node", n) or {})["spec"].get("unschedulable")
            ]
    finally:
        delete_validation(cluster, name)

    # Every node fails BelowBaseline on its own...
    assert set(_reasons(reports).values()) == {("Failed", "BelowBaseline")}
    assert [f["reason"] for f in status["failingNodes"]] == ["BelowBaseline"] * 6
    # ... and the run says once, loudly, that the stack is the cause, not the nodes.
    baseline = status["baseline"]
    assert (baseline["judged"], baseline["below"]) == (6, 6)
    burn = next(s for s in baseline["systemic"] if s["figure"] == "burn.bf16")
    assert (burn["below"], burn["judged"], burn["medianRatio"]) == (6, 6, 0.85)
    within = conditions(status)["WithinBaseline"]
    assert (within["status"], within["reason"]) == ("False", "SystemicBelowBaseline")
    assert "not the nodes" in within["message"]
    systemic = [e for e in events if e["reason"] == "SystemicBelowBaseline"]
    assert len(systemic) == 1 and systemic[0]["type"] == "Warning"
    # ... and the circuit breaker's systemic hold keeps every node in service: the stack is at
    # fault, so no node is cordoned for it.
    held = conditions(status)["SystemicFailure"]
    assert (held["status"], held["reason"]) == ("True", "SameReasonOnManyNodes")
    assert "BelowBaseline" in held["message"]
    assert conditions(status)["NodeActionsHeld"]["reason"] == "Systemic"
    assert cordoned == []
    # Each agent pod was given the learned baseline and the fraction.
    pod = pods["items"][0]
    env = {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0]["env"]}
    (given,) = files.from_yaml(env["GPUVAL_BASELINE"], "pod env")
    assert given.metadata.name == LEARNED and env["GPUVAL_BASELINE_FRACTION"] == "0.1"
    ratios = [
        line
        for line in metrics.splitlines()
        if line.startswith("gpuval_node_baseline_ratio{") and f'validation="{name}"' in line
    ]
    assert len(ratios) == 6 and all(line.endswith(" 0.85") for line in ratios), ratios


def test_a_node_losing_three_percent_a_run_is_named_by_its_history_while_above_the_run_median(
    cluster: Cluster,
    fleet: Fleet,
    operator: Operator,
    unique_name: Callable[[str], str],
) -> None:
    decliner = unique_name("decliner")
    # The rest of the pool is slower still (0.85): the run's median never sees the decliner.
    others = [unique_name("n") for _ in range(4)]
    fleet.add_many({decliner: [], **{n: slowed(0.85, EVERY_GPU) for n in others}})
    name = unique_name("drift")
    history = {"runs": 5, "driftFraction": 0.05, "action": "Warn"}
    spec = {"maxConcurrent": 5, "checks": CHECKS, "baseline": {"mode": "Off", "history": history}}
    runs: list[dict[str, Any]] = []
    try:
        with operator() as port:
            for n in range(6):
                fleet.resimulate(decliner, slowed(0.97**n, EVERY_GPU) if n else [])
                if n == 0:
                    apply(cluster, fleet.validation(name, **spec))
                else:
                    patch_spec(cluster, name, {"history": 10 + n})
                status = completed_run(cluster, name, after=n)
                reports = {
                    r["spec"]["node"]: r for r in reports_of(cluster, name, status["run"]["id"])
                }
                runs.append({"status": status, "reports": reports})
            metrics = scrape(port)
            events = events_of(cluster, name)
    finally:
        delete_validation(cluster, name)

    named = [[d["node"] for d in r["status"]["baseline"]["driftingNodes"]] for r in runs]
    # 0.97^3 = 0.913 of the first run: 0.94 of the median of the three before, below 0.95.
    assert named == [[], [], [], [decliner], [decliner], [decliner]]
    for run in runs[3:]:
        reports = run["reports"]
        burns = [r["status"]["summary"]["burnTflops"] for r in reports.values()]
        mine = reports[decliner]["status"]
        assert mine["summary"]["burnTflops"] > statistics.median(burns)
        assert (mine["verdict"], run["status"]["baseline"]["drifting"]) == ("Passed", 1)
        (drifting,) = run["status"]["baseline"]["driftingNodes"]
        assert not drifting["failed"] and "of this node's median" in drifting["message"]
    # Each report carries the node's last runs, at most history.runs of them.
    carried = [len(r["reports"][decliner]["spec"].get("history", [])) for r in runs]
    assert carried == [0, 1, 2, 3, 4, 5]
    fourth = runs[3]["status"]["baseline"]["driftingNodes"][0]
    assert round(fourth["ratio"], 2) == 0.94
    warned = [e for e in events if e["reason"] == "NodeDrifting" and decliner in e["message"]]
    assert len(warned) == 3
    (ratio,) = [
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("gpuval_node_history_ratio{") and f'node="{decliner}"' in line
    ]
    assert round(ratio, 2) == round(0.97**5 / statistics.median(0.97**i for i in range(5)), 2)


@pytest.mark.timeout(900)
def test_a_node_whose_gpus_were_replaced_starts_a_new_history_and_does_not_drift(
    cluster: Cluster,
    fleet: Fleet,
    operator: Operator,
    unique_name: Callable[[str], str],
) -> None:
    node = unique_name("swapped")
    fleet.add_many({node: []})
    name = unique_name("swap")
    history = {"runs": 5, "driftFraction": 0.05, "action": "Fail"}
    spec = {"checks": CHECKS, "baseline": {"mode": "Off", "history": history}}
    runs: list[tuple[dict[str, Any], dict[str, Any]]] = []
    try:
        with operator():
            for n in range(5):
                if n == 3:
                    # Its GPUs replaced (new UUIDs and serials) by ones 10 % slower: against the
                    # old GPUs' figures that is DriftFromHistory, and with action Fail a failure.
                    fleet.resimulate(node, slowed(0.9, EVERY_GPU), gpuSet=1)
                if n == 0:
                    apply(cluster, fleet.validation(name, **spec))
                else:
                    patch_spec(cluster, name, {"history": 10 + n})
                status = completed_run(cluster, name, after=n)
                (report,) = reports_of(cluster, name, status["run"]["id"])
                runs.append((status, report))
            events = events_of(cluster, name)
    finally:
        delete_validation(cluster, name)

    assert [r["status"]["verdict"] for _, r in runs] == ["Passed"] * 5, [
        (r["status"].get("reason"), r["status"].get("message")) for _, r in runs
    ]
    assert all(s["baseline"]["driftingNodes"] == [] for s, _ in runs)
    ids = [s["run"]["id"] for s, _ in runs]
    carried = [[e["run"] for e in r["spec"].get("history", [])] for _, r in runs]
    # The swap run's report was made with the old GPUs' runs; the next one carries only the new.
    assert carried[3] == ids[:3] and carried[4] == [ids[3]]
    identities = {e["gpuIdentity"] for _, r in runs for e in r["spec"].get("history", [])}
    assert len(identities) == 2
    (said,) = [e["message"] for e in events if e["reason"] == "HistoryRestarted"]
    assert said.startswith(f"{node}: its GPUs changed (GPUs 0, 1, 2, 3, 4, 5, 6, 7 replaced, ")
    assert "3 earlier runs set aside" in said
    # Issue 43 part 8: said in the status too (kubectl gpuval status and the page read it), in
    # the run that restarted it only; and mode Off is said as Off, not as no baseline matched.
    restarted = [s["baseline"].get("historyRestarted", []) for s, _ in runs]
    assert restarted[3] == [{"node": node, "message": said}]
    assert [len(r) for r in restarted] == [0, 0, 0, 1, 0]
    within = [conditions(s)["WithinBaseline"] for s, _ in runs]
    assert {(c["status"], c["reason"]) for c in within} == {("Unknown", "BaselineOff")}


@pytest.mark.timeout(900)
def test_mig_nodes_under_the_mixed_strategy_are_judged_by_their_learned_baseline_and_keep_history(
    cluster: Cluster,
    fleet: Fleet,
    operator: Operator,
    unique_name: Callable[[str], str],
) -> None:
    def sevenths(boot: int) -> dict[str, Any]:
        # Instance UUIDs are new each time the instances are created again (a reboot).
        uuids = [f"MIG-boot{boot}-{k}" for k in range(7)]
        return {"gpus": 1, "mig": [{"gpu": 0, "profiles": ["1g.18gb"] * 7, "uuids": uuids}]}

    nodes = [unique_name("mig") for _ in range(3)]
    for node in nodes:
        fleet.add(node, **sevenths(0))
    rebooted = nodes[0]
    name = unique_name("migbase")
    history = {"runs": 5, "driftFraction": 0.05, "action": "Fail"}
    spec = {
        "maxConcurrent": 3,
        "checks": CHECKS,
        "baseline": {"minNodes": 3, "history": history},
    }
    runs: list[tuple[dict[str, Any], dict[str, Any]]] = []
    learned: list[str] = []
    try:
        with operator():
            apply(cluster, fleet.validation(name, **spec))
            learned = _learned(cluster, name)["baseline"]["learned"]
            for n in range(1, 3):
                if n == 1:
                    fleet.resimulate(rebooted, [], **sevenths(1))
                patch_spec(cluster, name, {"history": 10 + n})
                status = completed_run(cluster, name, after=n)
                reports = {
                    r["spec"]["node"]: r for r in reports_of(cluster, name, status["run"]["id"])
                }
                runs.append((status, reports))
            events = events_of(cluster, name)
    finally:
        delete_validation(cluster, name)
        for baseline in learned:
            _delete_baseline(cluster, baseline)

    assert learned == ["nvidia-h200-mig-1g-18gb-x7-700w-gen5x16"]
    # Before: the product label (NVIDIA-H200) never named the learned baseline's key, and every
    # later run said no node had a baseline.
    for status, reports in runs:
        within = conditions(status)["WithinBaseline"]
        assert (within["status"], within["reason"]) == ("True", "WithinBaseline"), within
        assert status["baseline"]["judged"] == 3
        assert {r["status"]["verdict"] for r in reports.values()} == {"Passed"}
        judged_by = {r["status"]["result"]["baseline"]["name"] for r in reports.values()}
        assert judged_by == set(learned)
    # Before: the reboot's new instance UUIDs were other GPUs, and its history started again.
    assert not [e for e in events if e["reason"] == "HistoryRestarted"]
    carried = [e["run"] for e in runs[1][1][rebooted]["spec"].get("history", [])]
    # The learning run's and the reboot run's, both kept.
    assert len(carried) == 2 and carried[-1] == runs[0][0]["run"]["id"], carried


@contextlib.contextmanager
def _second_cluster(
    tmp_path: Path, nodes: dict[str, list[dict[str, Any]]], label: str
) -> Iterator[Cluster]:
    """Another control plane with the same simulated nodes, gpuval's CRDs, the agents' RBAC,
    its own pod runner and operator (each its own process)."""
    second = Cluster.start(
        f"gpuval-second-{uuid.uuid4().hex[:6]}",
        [
            dataclasses.replace(simulated_node(n, f), labels={"gpuval-test": label})
            for n, f in nodes.items()
        ],
    )
    try:
        install_crds(second)
        second.apply(agent_rbac())
        with (
            chart.podrunner(second, AGENT_NAMESPACE, tmp_path),
            operator_process(
                second.kubeconfig,
                metrics_port=free_port(),
                log_file=tmp_path / "operator.log",
                extra_env={"GPUVAL_POD_GRACE_SECONDS": "3"},
            ),
        ):
            yield second
    finally:
        second.stop()


def kubectl_gpuval(cluster: Cluster, *args: str) -> str:
    """What `kubectl gpuval ARGS` prints against `cluster`."""
    return cli.run(cli.build_parser().parse_args(["--kubeconfig", str(cluster.kubeconfig), *args]))


@pytest.mark.usefixtures("no_baseline")
def test_a_baseline_exported_and_imported_in_a_second_cluster_gives_the_same_verdicts(
    cluster: Cluster,
    fleet: Fleet,
    operator: Operator,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    names = [unique_name("n") for _ in range(6)]
    fleet.add_many({n: [] for n in names})
    name = unique_name("carry")
    exported = tmp_path / "baseline.yaml"
    # Then the same pool, judged: one node slow on one GPU, one a little slow (within 0.9).
    judged: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    judged[names[1]] = slowed(0.85, [2])
    judged[names[2]] = slowed(0.93, EVERY_GPU)
    use = {"maxConcurrent": 6, "checks": CHECKS, "baseline": {"mode": "Use", "names": [LEARNED]}}
    try:
        with operator():
            learn = {"maxConcurrent": 6, "checks": CHECKS, "baseline": {"minNodes": 3}}
            apply(cluster, fleet.validation(name, **learn))
            first = completed_run(cluster, name)
            _learned(cluster, name)
            wrote = kubectl_gpuval(cluster, "baseline", "export", LEARNED, "-o", str(exported))
            for node, faults in judged.items():
                fleet.resimulate(node, faults)
            patch_spec(cluster, name, use)
            here = completed_run(cluster, name, after=first["run"]["number"])
            verdicts_here = _reasons(reports_of(cluster, name, here["run"]["id"]))
    finally:
        delete_validation(cluster, name)

    with _second_cluster(tmp_path, judged, fleet.label) as second:
        imported = kubectl_gpuval(second, "baseline", "import", str(exported))
        diff = kubectl_gpuval(second, "baseline", "diff", LEARNED, str(exported))
        second_name = unique_name("carried")
        second.apply([fleet.validation(second_name, **use)])
        there = completed_run(second, second_name)
        verdicts_there = _reasons(reports_of(second, second_name, there["run"]["id"]))

    assert wrote == f"wrote 1 GpuBaselines to {exported}"
    assert imported == f"GpuBaseline {LEARNED} created"
    figures = diff.splitlines()[2:]
    assert len(figures) > 5 and all(" 1.000" in line for line in figures[1:]), diff
    assert verdicts_here[names[1]] == ("Failed", "BelowBaseline")
    assert verdicts_here[names[2]] == ("Passed", None)
    assert verdicts_there == verdicts_here
    assert there["baseline"]["judged"] == here["baseline"]["judged"] == 6
    assert there["baseline"]["below"] == here["baseline"]["below"] == 1
    assert json.dumps(there["baseline"]["systemic"]) == json.dumps(here["baseline"]["systemic"])


# A figure where lower is better, declared as docs/contracts.md ("Adding a figure") says, in every
# gpuval process of a cluster of its own (its CRDs made with it): the PCIe replays a GPU counted,
# from the state check, with a tolerance of 10. A simulated GPU counts 0 (the `pcie-replays` fault:
# `count`), so a healthy fleet's median is 0.
DECLARE_REPLAYS = """
from gpuval_api import figures
from gpuval_api.checks import CheckName

figures.declare(
    figures.Figure(
        id="pcieReplays",
        label="PCIe replays",
        unit=figures.Unit.COUNT,
        check=CheckName.STATE,
        description="Most PCIe replays a GPU counted.",
        read=figures.PerGpu(metric="pcieReplays", tested_only=False),
        better=figures.Better.LOWER,
        tolerance=10,
        baseline="pcieReplays",
        history=True,
        shown=figures.Shown(page=True, trend="PCIe replays"),
    )
)
"""
# Only the state check, which measures it: a run is seconds.
STATE_ONLY = {
    check: {"enabled": False} for check in ("driver", "health", "burn", "bandwidth", "nccl")
}


@contextlib.contextmanager
def _declaring_cluster(
    tmp_path: Path, nodes: dict[str, list[dict[str, Any]]], label: str
) -> Iterator[tuple[Cluster, int]]:
    """A control plane of its own whose gpuval processes (operator, pod runner, agents, kubectl
    gpuval) all declare DECLARE_REPLAYS at start (a sitecustomize on PYTHONPATH), with CRDs made
    by crdgen with it declared; and the operator's metrics port."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(DECLARE_REPLAYS)
    crds = tmp_path / "crds"
    crds.mkdir()
    make = (
        "import sys, yaml\nfrom gpuval_api import crdgen\n"
        "for name, crd in crdgen.build_crds().items():\n"
        "    open(sys.argv[1] + '/' + name.rsplit('/', 1)[-1], 'w').write(yaml.safe_dump(crd))\n"
    )
    subprocess.run([sys.executable, "-c", make, str(crds)], check=True, timeout=120)
    second = Cluster.start(
        f"gpuval-lower-{uuid.uuid4().hex[:6]}",
        [
            dataclasses.replace(simulated_node(n, f), labels={"gpuval-test": label})
            for n, f in nodes.items()
        ],
    )
    try:
        for path in sorted(crds.glob("*.yaml")):
            second.kubectl("apply", "--server-side", "-f", str(path))
        second.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
        second.apply(agent_rbac())
        port = free_port()
        with (
            chart.podrunner(second, AGENT_NAMESPACE, tmp_path),
            operator_process(
                second.kubeconfig,
                metrics_port=port,
                log_file=tmp_path / "operator.log",
                extra_env={"GPUVAL_POD_GRACE_SECONDS": "3"},
            ),
        ):
            yield second, port
    finally:
        second.stop()


def test_a_lower_is_better_figure_learns_a_ceiling_and_fails_only_the_node_above_it(
    fleet: Fleet,
    unique_name: Callable[[str], str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(
        "PYTHONPATH",
        os.pathsep.join(p for p in (str(tmp_path / "site"), os.environ.get("PYTHONPATH")) if p),
    )
    names = [unique_name("n") for _ in range(6)]
    # One node counts 3 replays (within the tolerance of a median of 0) from the start.
    few = [{"kind": "pcie-replays", "gpu": 1, "count": 3}]
    nodes: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    nodes[names[4]] = few
    high = names[5]
    name = unique_name("replays")
    spec = {"maxConcurrent": 6, "checks": STATE_ONLY, "baseline": {"minNodes": 3}}
    with _declaring_cluster(tmp_path, nodes, fleet.label) as (second, port):
        second.apply([fleet.validation(name, **spec)])
        first = completed_run(second, name)
        _learned(second, name)
        learned = get_json(second, "gpubaseline", LEARNED)
        # Then its GPU 3 counts 5,000 replays: 2,500 times the ceiling's tolerance.
        config = simulated_node(high, [{"kind": "pcie-replays", "gpu": 3, "count": 5000}])
        annotation = config.annotations[SIMULATE_ANNOTATION]
        second.kubectl(
            "annotate", "node", high, f"{SIMULATE_ANNOTATION}={annotation}", "--overwrite"
        )
        patch_spec(second, name, {"history": 2})
        status = completed_run(second, name, after=first["run"]["number"])
        reports = by_node(reports_of(second, name, status["run"]["id"]))
        metrics = scrape(port)
        said = subprocess.run(
            [
                str(Path(sys.executable).parent / "kubectl-gpuval"),
                "--kubeconfig",
                str(second.kubeconfig),
                "status",
                name,
            ],
            check=True,
            capture_output=True,
            text=True,
            timeout=120,
        ).stdout

    # The zeros are learned: the baseline is a ceiling over a centre of 0.
    assert first["nodes"]["passed"] == 6
    (entry,) = learned["spec"]["figures"]
    assert (entry["figure"], entry["unit"], entry["centre"]) == ("pcieReplays", "count", 0)
    assert learned["spec"]["source"]["excluded"] == []
    # Only the node above the ceiling fails; no healthy node is below anything.
    verdicts = {n: (s.get("verdict"), s.get("reason")) for n, s in reports.items()}
    assert verdicts == {
        n: ("Failed", "BelowBaseline") if n == high else ("Passed", None) for n in names
    }
    assert reports[names[4]]["summary"]["pcieReplaysCount"] == 3
    assert reports[high]["summary"]["pcieReplaysCount"] == 5000
    message = reports[high]["message"]
    assert "pcieReplays 5000.0 count is above the" in message and "ceiling 10.0" in message
    (compared,) = [
        f for f in reports[high]["result"]["baseline"]["figures"] if f["figure"] == "pcieReplays"
    ]
    assert (compared["better"], compared["ceiling"], compared["below"], compared["where"]) == (
        "lower",
        10.0,
        1,
        "GPU 3",
    )
    baseline = status["baseline"]
    assert (baseline["judged"], baseline["below"]) == (6, 1) and baseline["systemic"] == []
    assert f'gpuval_node_pcie_replays{{node="{high}",validation="{name}"}} 5000.0' in metrics
    # kubectl gpuval status names the one outlier above a median of 0, and no healthy node.
    outliers = [line for line in said.splitlines() if "PCIe replays" in line]
    assert len(outliers) == 1 and high in outliers[0] and "above median 0.0" in outliers[0], said
