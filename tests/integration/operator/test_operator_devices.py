"""GPUs the way clusters hand them out, on the real control plane: through DRA ResourceClaims the
real kube-scheduler allocates against ResourceSlices published as NVIDIA's driver publishes them
(gpuval_devtools.dra), with workloads' own claims holding some GPUs; and as MIG devices under the
device plugin's mixed strategy (issue 38). The pod runner runs the real agent with the simulated
backend for every agent pod bound to a kwok node, its claims allocated or not: kwok calls no
NodePrepareResources, and the double reads its GPUs from the node's simulation config.

Every wait is bounded and nothing asserts a duration.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from gpuval_api.dra import DRIVER
from gpuval_devtools import dra
from gpuval_devtools.controlplane import Cluster
from gpuval_devtools.launch import AGENT_NAMESPACE
from gpuval_operator import names
from tests.support.fleet import (
    Fleet,
    Operator,
    apply,
    by_node,
    completed_run,
    conditions,
    delete_validation,
    pods_of,
    reports_of,
)
from tests.support.kube import get_json, wait_for

pytestmark = pytest.mark.usefixtures("install_crds")

LOCAL = {"burn": {"durationSeconds": 1}}
DRA = {"devices": "dra"}


def _affinity(node: str) -> dict[str, Any]:
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
        }
    }


@contextlib.contextmanager
def workloads(
    cluster: Cluster, nodes: list[str], prefix: str
) -> Iterator[tuple[list[str], Callable[[], None]]]:
    """On each of `nodes`, a workload whose own ResourceClaim holds 2 of its GPUs (allocated by
    the scheduler, as any workload's); yields their claims' names, by node, and a function that
    ends them (pods and claims)."""
    objects: list[dict[str, Any]] = []
    for i, node in enumerate(nodes):
        name = f"{prefix}-{i}"
        objects += [
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {
                    "devices": {
                        "requests": [
                            {
                                "name": "two",
                                "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2},
                            }
                        ]
                    }
                },
            },
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {
                    "affinity": _affinity(node),
                    "tolerations": [{"operator": "Exists"}],
                    "resourceClaims": [{"name": "gpus", "resourceClaimName": name}],
                    "containers": [
                        {
                            "name": "train",
                            "image": "example.com/train:1",
                            "resources": {"claims": [{"name": "gpus"}]},
                        }
                    ],
                },
            },
        ]
    cluster.apply(objects)
    claim_names = [f"{prefix}-{i}" for i in range(len(nodes))]

    def end() -> None:
        cluster.kubectl(
            "delete",
            "pod",
            *claim_names,
            "-n",
            "default",
            "--grace-period=0",
            "--force",
            check=False,
        )
        cluster.kubectl("delete", "resourceclaim", *claim_names, "-n", "default", check=False)

    try:
        yield claim_names, end
    finally:
        end()


def _allocated(cluster: Cluster, claim_names: list[str]) -> bool:
    claims = get_json(cluster, "resourceclaims", "-n", "default", *claim_names)
    items = claims.get("items", [claims]) if claims else []
    return len(items) == len(claim_names) and all(
        (c.get("status") or {}).get("allocation") for c in items
    )


def _resources(pod: dict[str, Any]) -> dict[str, Any]:
    resources: dict[str, Any] = pod["spec"]["containers"][0]["resources"]
    return resources


def _env(pod: dict[str, Any], key: str) -> str | None:
    return next(
        (e.get("value") for e in pod["spec"]["containers"][0]["env"] if e["name"] == key), None
    )


def test_dra_agents_claim_every_device_wait_for_workloads_claims_and_pass_once_they_end(
    cluster: Cluster, fleet: Fleet, operator: Operator, unique_name: Callable[[str], str]
) -> None:
    free = fleet.add_many({unique_name("dra"): [] for _ in range(5)}, devices="dra")
    # One node's agent takes its time (a real second per simulated one): its pod is Running
    # long enough for the kubelet's word on its devices (KEP-4680) to be written beside it.
    slow = fleet.add(unique_name("dra-slow"), devices="dra", timeScale=0.5)
    # One node with MIG mode on one GPU: published as one whole GPU and two MIG devices.
    mig = fleet.add(
        unique_name("dra-mig"),
        devices="dra",
        gpus=2,
        mig=[{"gpu": 1, "profiles": ["3g.71gb", "4g.71gb"]}],
    )
    busy = fleet.add_many({unique_name("dra-busy"): [] for _ in range(3)}, devices="dra")
    name = unique_name("dra")
    spec = {
        "agent": DRA,
        "maxConcurrent": "100%",
        # Long enough for a simulated agent on a loaded machine (make test runs 3 workers on 2
        # cores: 15 s timed 7 healthy nodes out), short for the busy nodes' wait.
        "nodeTimeoutSeconds": 40,
        "retry": {"attempts": 2, "backoffSeconds": 20},
        "checks": LOCAL,
    }
    with workloads(cluster, busy, unique_name("train")) as (claims, end_workloads):
        wait_for("the workloads' claims allocated", lambda: _allocated(cluster, claims), timeout=60)
        with operator():
            apply(cluster, fleet.validation(name, **spec))
            pod_of_slow = wait_for(
                "the slow node's agent pod Running",
                lambda: next(
                    (
                        p
                        for p in pods_of(cluster, name)
                        if p["spec"].get("nodeName") == slow
                        and p["status"].get("phase") == "Running"
                    ),
                    None,
                ),
                timeout=60,
            )
            _report_device_health(cluster, pod_of_slow, slow)
            not_run = wait_for(
                "the busy nodes' first attempts to end NotRun",
                lambda: _not_run(cluster, name, busy),
                timeout=150,
            )
            pods = {
                p["spec"].get("nodeName") or p["metadata"]["annotations"]["gpuval.dev/node"]: p
                for p in pods_of(cluster, name)
            }
            # The slow node's pod as seen Running: it may have ended and gone by now (a loaded
            # machine stretches the busy nodes' wait more than the slow node's burn).
            pods.setdefault(slow, pod_of_slow)
            templates = get_json(
                cluster,
                "resourceclaimtemplates",
                "-n",
                AGENT_NAMESPACE,
                "-l",
                f"gpuval.dev/validation={name}",
            )["items"]
            end_workloads()
            status = completed_run(cluster, name, timeout=180)
            reports = by_node(reports_of(cluster, name, status["run"]["id"]))
            delete_validation(cluster, name)

    # The workloads' claims kept the busy nodes' agent pods Pending: not tested, the claim named.
    for node, claim in zip(busy, claims, strict=True):
        assert not_run[node]["reason"] == "DevicesClaimed", not_run[node]
        assert f"default/{claim}" in not_run[node]["message"], not_run[node]["message"]
        assert not_run[node]["failures"] == []
    # Once they ended, the retries got every device and passed.
    failed = {
        n: (r.get("reason"), r.get("message"))
        for n, r in reports.items()
        if r["verdict"] != "Passed"
    }
    assert failed == {}
    assert {n: r["verdict"] for n, r in reports.items()} == dict.fromkeys(fleet.nodes, "Passed")
    # Every agent pod asked through a ResourceClaim, never for nvidia.com/gpu, and was told the
    # UUIDs its node's slice publishes; the agent tested exactly those.
    for node in [*free, slow]:
        pod = pods[node]
        assert pod["spec"]["resourceClaims"][0]["resourceClaimTemplateName"].endswith("-gpu")
        assert "nvidia.com/gpu" not in _resources(pod).get("limits", {})
        assert _resources(pod)["claims"] == [{"name": "devices"}]
        uuids = (_env(pod, "GPUVAL_DEVICE_UUIDS") or "").split(",")
        result = reports[node]["result"]
        assert len(uuids) == 8 and [g["uuid"] for g in result["environment"]["gpus"]] == uuids
    # The MIG node: one claim for its whole GPU and its two MIG devices, each tested by UUID.
    assert pods[mig]["spec"]["resourceClaims"][0]["resourceClaimTemplateName"].endswith("-gpu-mig")
    units = reports[mig]["result"]["environment"]["gpus"]
    assert [(u.get("mig") or {}).get("profile") for u in units] == [None, "3g.71gb", "4g.71gb"]
    assert reports[mig]["summary"]["gpuCount"] == 3
    run = status["run"]["id"]
    assert sorted(t["metadata"]["name"] for t in templates) == [
        names.claim_template_name(name, run, "gpu"),
        names.claim_template_name(name, run, "gpu-mig"),
    ]
    # The kubelet's word on a device of the slow node's claim, kept in its report as evidence
    # and shown in the validation's status.
    health = reports[slow]["deviceHealth"]
    assert health == [
        {
            "claim": "claim:devices",
            "resourceId": f"gpu.nvidia.com/{slow}/gpu-1",
            "health": "Unhealthy",
            "message": "XID 79 (reported by the test as a DRA driver would)",
        }
    ]
    assert status["unhealthyDevices"] == [
        {
            "node": slow,
            "resourceId": f"gpu.nvidia.com/{slow}/gpu-1",
            "health": "Unhealthy",
            "message": "XID 79 (reported by the test as a DRA driver would)",
        }
    ]


def test_dra_pools_are_counted_as_the_scheduler_counts_them_and_odd_nodes_are_named(
    cluster: Cluster, fleet: Fleet, operator: Operator, unique_name: Callable[[str], str]
) -> None:
    # The driver republished its pool: generation 2 beside generation 1, the same 8 GPUs. Its
    # agent takes its time, so that the kubelet's word on a device is written while it runs.
    republished = fleet.add(unique_name("dra-gen"), devices="dra", timeScale=0.5)
    # Its pool's generation 2 is to have two slices; one is seen (it replaced generation 1).
    incomplete = fleet.add(unique_name("dra-half"), devices="dra")
    # Its GPUs advertised by the device plugin and published by the DRA driver too.
    twice = fleet.add(unique_name("dra-twice"))
    # Selected, Ready, but no slice publishes a device of it.
    bare = fleet.add(unique_name("dra-bare"), devices="dra")
    uuids = {n: [dra.gpu_uuid(n, i) for i in range(8)] for n in (republished, incomplete, twice)}
    second = f"{republished}-gen2"
    cluster.apply(
        [
            dra.resource_slice(republished, uuids[republished], generation=2, name=second),
            dra.resource_slice(incomplete, uuids[incomplete][:4], generation=2, slice_count=2),
            dra.resource_slice(twice, uuids[twice]),
        ]
    )
    fleet.slices += [second, f"{twice}-{DRIVER}"]
    cluster.kubectl("delete", "resourceslice", f"{bare}-{DRIVER}")
    name = unique_name("drapool")
    spec = {
        "agent": DRA,
        "maxConcurrent": "100%",
        "nodeTimeoutSeconds": 30,
        "retry": {"attempts": 1},
        "checks": LOCAL,
    }
    with operator():
        apply(cluster, fleet.validation(name, **spec))
        running = wait_for(
            "the republished node's agent pod Running",
            lambda: next(
                (
                    p
                    for p in pods_of(cluster, name)
                    if p["spec"].get("nodeName") == republished
                    and p["status"].get("phase") == "Running"
                ),
                None,
            ),
            timeout=60,
        )
        _report_device_health(cluster, running, republished)
        status = completed_run(cluster, name, timeout=120)
        reports = by_node(reports_of(cluster, name, status["run"]["id"]))
        pods = {p["metadata"]["annotations"]["gpuval.dev/node"] for p in pods_of(cluster, name)}
        delete_validation(cluster, name)

    # Generation 1 left behind is not added to generation 2: 8 GPUs, the agent passes.
    assert (reports[republished]["verdict"], reports[republished]["summary"]["gpuCount"]) == (
        "Passed",
        8,
    )
    # The incomplete pool is said as such, not blamed on workloads' claims.
    half = reports[incomplete]
    assert (half["verdict"], half["reason"]) == ("NotRun", "DevicePoolIncomplete"), half
    assert f"pool {incomplete} generation 2: 1 of 2 ResourceSlices seen" in half["message"]
    # The node whose GPUs two sources hand out is named, and no agent pod was made for it.
    both = reports[twice]
    assert (both["verdict"], both["reason"]) == ("NotRun", "DevicesPublishedTwice"), both
    assert "device plugin advertises 8" in both["message"] and "8 devices" in both["message"]
    assert twice not in pods
    not_run = {n["node"]: n["reason"] for n in status["notRunNodes"]}
    assert not_run == {incomplete: "DevicePoolIncomplete", twice: "DevicesPublishedTwice"}
    # The node without a slice is not in the run, and the status says so.
    assert bare not in reports and status["nodes"]["total"] == 3
    assert status["nodesWithoutDevices"] == [bare]
    published = conditions(status)["DevicesPublished"]
    assert (published["status"], published["reason"]) == ("False", "NodesWithoutDevices")
    assert "1 of 4 selected nodes" in published["message"] and bare in published["message"]
    # The kubelet's word on a device, in the validation's status beside the report's.
    assert status["unhealthyDevices"] == [
        {
            "node": republished,
            "resourceId": f"gpu.nvidia.com/{republished}/gpu-1",
            "health": "Unhealthy",
            "message": "XID 79 (reported by the test as a DRA driver would)",
        }
    ]


def _not_run(cluster: Cluster, name: str, nodes: list[str]) -> dict[str, dict[str, Any]] | None:
    statuses = by_node(reports_of(cluster, name))
    found = {n: statuses.get(n) or {} for n in nodes}
    return found if all(s.get("verdict") == "NotRun" for s in found.values()) else None


def _report_device_health(cluster: Cluster, pod: dict[str, Any], node: str) -> None:
    """What a kubelet writes of a DRA driver's health report for the pod's claim (KEP-4680)."""
    container = pod["status"]["containerStatuses"][0]
    container["allocatedResourcesStatus"] = [
        {
            "name": "claim:devices",
            "resources": [
                {
                    "resourceID": f"gpu.nvidia.com/{node}/gpu-1",
                    "health": "Unhealthy",
                    "message": "XID 79 (reported by the test as a DRA driver would)",
                }
            ],
        }
    ]
    cluster.kubectl(
        "patch",
        "pod",
        pod["metadata"]["name"],
        "-n",
        AGENT_NAMESPACE,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": {"containerStatuses": [container]}}),
    )


FABRIC = {
    "groupSize": 8,
    "minBytes": 1 << 28,
    "maxBytes": 1 << 30,
    "pairBytes": 1 << 30,
    "iterations": 2,
    "timeouts": {"gangSeconds": 30, "initSeconds": 20, "phaseSeconds": 20},
}


def test_the_fabric_with_dra_and_a_published_gpu_the_node_lost_named_by_its_uuid(
    cluster: Cluster, fleet: Fleet, operator: Operator, unique_name: Callable[[str], str]
) -> None:
    healthy = fleet.add_many({unique_name("drafab"): [] for _ in range(3)}, devices="dra")
    # Its slice still publishes 8 GPUs; the node shows 7 (one fell off the bus).
    lost = fleet.add(unique_name("drafab-lost"), [{"kind": "missing-gpu"}], devices="dra")
    name = unique_name("drafab")
    spec = {"agent": DRA, "maxConcurrent": "100%", "checks": LOCAL, "fabric": FABRIC}
    with operator():
        apply(cluster, fleet.validation(name, **spec))
        status = completed_run(cluster, name, timeout=180)
        reports = by_node(reports_of(cluster, name, status["run"]["id"]))
        fabric_pods = [
            p
            for p in pods_of(cluster, name)
            if "gpuval.dev/fabric-group" in p["metadata"]["labels"]
        ]
        delete_validation(cluster, name)

    assert reports[lost]["verdict"] == "Failed" and reports[lost]["reason"] == "GpuMissing"
    assert dra.gpu_uuid(lost, 7) in reports[lost]["message"], reports[lost]["message"]
    assert [f["reason"] for f in reports[lost]["failures"]] == ["GpuMissing"]
    assert {
        n: (reports[n]["verdict"], reports[n]["fabric"]["verdict"]) for n in healthy
    } == dict.fromkeys(healthy, ("Passed", "Passed"))
    # The fabric pods claimed their nodes' devices as the agent pods did, told the same UUIDs.
    assert sorted(p["spec"]["nodeName"] for p in fabric_pods) == sorted(healthy)
    for pod in fabric_pods:
        assert pod["spec"]["resourceClaims"][0]["resourceClaimTemplateName"].endswith("-gpu")
        assert "nvidia.com/gpu" not in _resources(pod).get("limits", {})
        node = pod["spec"]["nodeName"]
        assert _env(pod, "GPUVAL_DEVICE_UUIDS") == ",".join(dra.gpu_uuid(node, i) for i in range(8))


def test_mig_nodes_under_the_mixed_strategy_report_every_instance_and_their_layouts_differ(
    cluster: Cluster, fleet: Fleet, operator: Operator, unique_name: Callable[[str], str]
) -> None:
    sevenths = fleet.add(unique_name("mig7"), gpus=1, mig=[{"gpu": 0, "profiles": ["1g.18gb"] * 7}])
    whole = fleet.add(unique_name("mig1"), gpus=1, mig=[{"gpu": 0, "profiles": ["7g.141gb"]}])
    name = unique_name("mig")
    full = {**LOCAL, **{c: {"enabled": True} for c in ("memory", "train", "dcgm")}}
    with operator():
        apply(cluster, fleet.validation(name, maxConcurrent="100%", checks=full))
        status = completed_run(cluster, name, timeout=180)
        reports = by_node(reports_of(cluster, name, status["run"]["id"]))
        pods = {p["spec"]["nodeName"]: p for p in pods_of(cluster, name)}
        delete_validation(cluster, name)

    assert {n: r["verdict"] for n, r in reports.items()} == {sevenths: "Passed", whole: "Passed"}
    # The pods asked for every MIG device the device plugin advertises, by profile.
    assert _resources(pods[sevenths])["limits"]["nvidia.com/mig-1g.18gb"] == "7"
    assert _resources(pods[whole])["limits"]["nvidia.com/mig-7g.141gb"] == "1"
    assert "nvidia.com/gpu" not in _resources(pods[sevenths])["limits"]
    # Every instance reported, by its MIG UUID and profile, and tested as a unit.
    units = reports[sevenths]["result"]["environment"]["gpus"]
    assert [(u["uuid"], u["mig"]["profile"]) for u in units] == [
        (f"MIG-sim-{sevenths}-0-{k}", "1g.18gb") for k in range(7)
    ]
    checks = {c["name"]: c for c in reports[sevenths]["result"]["checks"]}
    assert len(checks["burn"]["gpus"]) == 7 and len(checks["memory"]["gpus"]) == 7
    for skipped in ("nccl", "train", "dcgm"):
        assert (checks[skipped]["verdict"], checks[skipped]["reason"]) == (
            "Skipped",
            "NotApplicable",
        )
    assert (
        reports[sevenths]["summary"]["gpuCount"] == 7 and reports[whole]["summary"]["gpuCount"] == 1
    )
    # Uniformity names the layout difference (two nodes, no majority: both named).
    layouts = {o["node"]: o for o in status["outliers"] if o["field"] == "migLayout"}
    assert {n: o["value"] for n, o in layouts.items()} == {
        sevenths: "7x1g.18gb",
        whole: "1x7g.141gb",
    }
    assert all(o["expected"].startswith("no majority") for o in layouts.values())
