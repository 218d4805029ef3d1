"""How an agent pod asks for its node's devices (spec.agent.devices): the ResourceClaimTemplate and
the pod with DRA, the device plugin's MIG resources, a node's devices read from the NVIDIA driver's
ResourceSlices, a claim that holds them, and the kubelet's device health (pure parts)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from gpuval_api.crd import DraSettings, GpuValidationSpec
from gpuval_api.dra import GPU_DEVICE_CLASS, MIG_DEVICE_CLASS, claim_hold, parse_slice
from gpuval_api.env import AgentEnv
from gpuval_api.reasons import Reason
from gpuval_devtools import dra
from gpuval_devtools.simulation import SIMULATE_ANNOTATION, simulated_node
from gpuval_operator import planning
from gpuval_operator.config import OperatorConfig
from gpuval_operator.devices import (
    DeviceRequest,
    NodeDevices,
    claim_template,
    pool_incomplete,
    published_twice,
)
from gpuval_operator.fabric.pods import build_fabric_pod
from gpuval_operator.nodes.facts import NodeFacts
from gpuval_operator.nodes.slices import SliceWatch
from gpuval_operator.nodes.watch import NodeWatch
from gpuval_operator.run.lifecycle import due_outcomes
from tests.unit.operator.test_operator_state import T0, make_run, pod

UUIDS = tuple(dra.gpu_uuid("n1", i) for i in range(8))
DRA_SPEC = GpuValidationSpec.model_validate({"agent": {"devices": "dra"}})


def _slice(node: str = "n1", mig: tuple[dra.MigDevice, ...] = ()) -> dict[str, Any]:
    return dra.resource_slice(node, [dra.gpu_uuid(node, i) for i in range(8)], mig=mig)


def _env(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0]["env"]}


def test_a_dra_pod_claims_its_nodes_devices_from_a_template_and_is_told_their_uuids() -> None:
    devices = NodeDevices.of([parse_slice(_slice())])  # type: ignore[list-item]
    request = DeviceRequest.claim("gpuval-v-1-aaaa-gpu", devices)

    pod = planning.build_pod(
        validation="v",
        uid="u",
        run="1-aaaa",
        node="n1",
        gpus=8,
        spec=DRA_SPEC,
        config=OperatorConfig(),
        request=request,
    )

    container = pod["spec"]["containers"][0]
    assert pod["spec"]["resourceClaims"] == [
        {"name": "devices", "resourceClaimTemplateName": "gpuval-v-1-aaaa-gpu"}
    ]
    assert container["resources"]["claims"] == [{"name": "devices"}]
    assert "nvidia.com/gpu" not in container["resources"]["requests"]
    assert "nvidia.com/gpu" not in container["resources"]["limits"]
    assert _env(pod)[AgentEnv.DEVICE_UUIDS] == ",".join(UUIDS)
    assert _env(pod)[AgentEnv.EXPECTED_GPUS] == "8"


def test_the_claim_template_asks_for_every_device_of_each_kind_the_node_has() -> None:
    settings = DraSettings(device_class_name="gpu.example.com")

    def requests(shape: str) -> list[dict[str, Any]]:
        body = claim_template(
            name="t", namespace="ns", labels={}, owner={"uid": "u"}, shape=shape, settings=settings
        )
        assert (
            body["apiVersion"] == "resource.k8s.io/v1" and body["kind"] == "ResourceClaimTemplate"
        )
        found: list[dict[str, Any]] = body["spec"]["spec"]["devices"]["requests"]
        return found

    assert requests("gpu") == [
        {"name": "gpus", "exactly": {"deviceClassName": "gpu.example.com", "allocationMode": "All"}}
    ]
    assert [r["exactly"]["deviceClassName"] for r in requests("gpu-mig")] == [
        "gpu.example.com",
        MIG_DEVICE_CLASS,
    ]
    assert [r["name"] for r in requests("mig")] == ["mig"]


def test_a_slice_of_the_nvidia_driver_gives_the_nodes_gpus_and_mig_devices() -> None:
    mig = tuple(dra.MigDevice(0, "1g.18gb", dra.mig_uuid("n1", 0, k), k) for k in range(7))
    published = parse_slice(_slice(mig=mig))

    assert published is not None and (published.node, published.pool) == ("n1", "n1")
    devices = NodeDevices.of([published])
    assert (devices.count, devices.gpus, devices.migs, devices.shape) == (14, 7, 7, "gpu-mig")
    assert devices.product == "NVIDIA H200"
    first_mig = next(d for d in devices.devices if d.mig)
    assert (first_mig.profile, first_mig.parent_uuid) == ("1g.18gb", UUIDS[0])
    assert first_mig.name == "gpu-0-mig-1g18gb-19-0"
    assert UUIDS[0] not in devices.uuids  # a GPU with MIG on is published as its MIG devices
    other = dict(_slice(), spec={**_slice()["spec"], "driver": "gpu.example.com"})
    assert parse_slice(other) is None


def test_the_slice_watch_keeps_each_nodes_devices_from_every_slice_that_names_it() -> None:
    changed: list[str] = []
    watch = SliceWatch(None, "v", lambda: None, changed.append)  # type: ignore[arg-type]
    second = dra.resource_slice("n2", [dra.gpu_uuid("n2", 0)])

    watch._on_page([_slice(), second], True, True)
    assert (watch.devices("n1").count, watch.devices("n2").count) == (8, 1)
    watch._on_event("MODIFIED", second)  # the same devices: nothing for gating to look at
    assert changed == ["n1", "n2"]
    watch._on_event("DELETED", second)
    assert watch.devices("n2").count == 0 and "n2" not in watch.nodes
    watch._on_page([], True, True)  # every slice gone while the watch was down
    assert watch.nodes == {} and changed == ["n1", "n2", "n2", "n1"]


def test_only_the_highest_generation_of_a_pool_counts_and_an_incomplete_pool_is_named() -> None:
    uuids = [dra.gpu_uuid("n1", i) for i in range(8)]
    old = dra.resource_slice("n1", uuids, generation=1, name="n1-old")
    new = dra.resource_slice("n1", uuids, generation=2, name="n1-new")
    watch = SliceWatch(None, "v", lambda: None)  # type: ignore[arg-type]

    # The driver republished its pool: generation 1 is left behind, not added to generation 2.
    watch._on_page([old, new], True, True)
    devices = watch.devices("n1")
    assert (devices.count, devices.pools, devices.incomplete) == (8, ("n1",), ())
    # A pool of two slices of which one is seen: the scheduler allocates nothing from it.
    half = dra.resource_slice("n2", uuids[:4], generation=3, slice_count=2, name="n2-a")
    watch._on_event("ADDED", half)
    assert watch.devices("n2").incomplete == (
        "pool n2 generation 3: 1 of 2 ResourceSlices seen (n2-a)",
    )
    rest = dra.resource_slice("n2", uuids[4:], generation=3, slice_count=2, name="n2-b", first=4)
    watch._on_event("ADDED", rest)
    assert (watch.devices("n2").count, watch.devices("n2").incomplete) == (8, ())
    assert [d.name for d in watch.devices("n2").devices] == [f"gpu-{i}" for i in range(8)]


def test_a_mixed_strategy_mig_node_is_selected_and_its_pod_asks_for_every_mig_resource() -> None:
    node = simulated_node("mig", gpus=1, mig=[{"gpu": 0, "profiles": ["1g.18gb"] * 7}]).manifest()
    node["status"]["conditions"] = [{"type": "Ready", "status": "True"}]

    [candidate] = planning.select_nodes([node])
    facts = NodeFacts.parse(node, "v")
    request = DeviceRequest.device_plugin(candidate.gpus, dict(candidate.resources))
    pod = planning.build_pod(
        validation="v",
        uid="u",
        run="1-aaaa",
        node="mig",
        gpus=candidate.gpus,
        spec=GpuValidationSpec(),
        config=OperatorConfig(),
        request=request,
    )

    assert candidate.gpus == 7 and facts.gpus == 7 and facts.resources == candidate.resources
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/mig-1g.18gb"] == "7" and "nvidia.com/gpu" not in limits
    assert _env(pod)[AgentEnv.EXPECTED_GPUS] == "7"
    single = simulated_node(
        "s", gpus=1, mig=[{"gpu": 0, "profiles": ["1g.18gb"] * 7}], mig_strategy="single"
    ).manifest()
    assert single["status"]["capacity"]["nvidia.com/gpu"] == "7"
    assert single["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-H200-MIG-1g.18gb"


def test_a_dra_simulated_node_advertises_no_gpu_and_publishes_what_its_double_shows() -> None:
    node = simulated_node("n1", devices="dra")

    assert node.manifest()["status"]["capacity"]["nvidia.com/gpu"] == "0"
    [published] = node.slices
    parsed = parse_slice(published)
    assert parsed is not None and [d.uuid for d in parsed.devices] == list(UUIDS)
    assert f'"uuids":["{UUIDS[0]}"' in node.annotations[SIMULATE_ANNOTATION]
    classes = {c["metadata"]["name"] for c in dra.device_classes()}
    assert classes == {GPU_DEVICE_CLASS, MIG_DEVICE_CLASS}


def test_a_fabric_pod_asks_for_its_nodes_devices_as_its_agent_pod_does() -> None:
    devices = NodeDevices.of([parse_slice(_slice())])  # type: ignore[list-item]
    spec = GpuValidationSpec.model_validate({"agent": {"devices": "dra"}, "fabric": {}})

    pod = build_fabric_pod(
        validation="v",
        uid="u",
        run="1-aaaa",
        group="g0",
        nodes=["n1", "n2"],
        rank=0,
        gpus=8,
        port=29500,
        request=DeviceRequest.claim("t", devices),
        deadline=T0,
        spec=spec,
        config=OperatorConfig(),
    )

    assert pod["spec"]["resourceClaims"] == [{"name": "devices", "resourceClaimTemplateName": "t"}]
    assert _env(pod)[AgentEnv.DEVICE_UUIDS] == ",".join(UUIDS)


def test_a_dra_pod_never_scheduled_is_not_run_as_devices_claimed() -> None:
    run = make_run("a")
    waiting = {
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "message": "0/3 nodes are available: 1 cannot allocate all claims",
            }
        ]
    }
    claimed = pod("a", "Pending", scheduled=False, status=waiting)
    claimed.claimed = True
    run.apply_pod(claimed, now=0.0)

    [outcome] = due_outcomes(run, now=T0 + 600, monotonic=0.0, timeout=600, grace=10)

    assert (outcome.verdict, outcome.reason) == ("NotRun", Reason.DEVICES_CLAIMED)
    assert "cannot allocate all claims" in outcome.message and "ResourceClaim" in outcome.message


def test_a_claim_that_holds_devices_of_a_pool_says_which_and_for_whom() -> None:
    claim = {
        "metadata": {"name": "train-0", "namespace": "team"},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "r", "driver": "gpu.nvidia.com", "pool": "n1", "device": d}
                        for d in ("gpu-0", "gpu-1")
                    ]
                }
            },
            "reservedFor": [{"resource": "pods", "name": "train", "uid": "x"}],
        },
    }

    hold = claim_hold(claim)

    assert hold is not None and hold.pools == frozenset({("gpu.nvidia.com", "n1")})
    assert hold.describe() == "team/train-0 (gpu-0, gpu-1; reserved for pod train)"
    assert claim_hold({"metadata": {"name": "pending"}, "status": {}}) is None


def test_the_kubelets_device_health_of_the_pods_claims_is_kept() -> None:
    statuses = [
        {
            "name": "agent",
            "state": {"running": {}},
            "allocatedResourcesStatus": [
                {
                    "name": "claim:devices/gpus",
                    "resources": [
                        {"resourceID": "gpu.nvidia.com/n1/gpu-0", "health": "Healthy"},
                        {
                            "resourceID": "gpu.nvidia.com/n1/gpu-1",
                            "health": "Unhealthy",
                            "message": "XID 79",
                        },
                    ],
                },
                {"name": "nvidia.com/gpu", "resources": [{"resourceID": "x", "health": "Healthy"}]},
            ],
        }
    ]
    run = make_run("a")
    run.apply_pod(pod("a", status={"containerStatuses": statuses}), now=0.0)

    record = run.nodes["a"]
    assert [(h.resource_id, h.health) for h in record.device_health] == [
        ("gpu.nvidia.com/n1/gpu-0", "Healthy"),
        ("gpu.nvidia.com/n1/gpu-1", "Unhealthy"),
    ]
    assert record.device_health[1].as_status()["message"] == "XID 79"
    assert run.health_due == {"a"}


class _Unreachable:
    """A client whose lists never answer: the followers wait, and nothing else is asked."""

    async def pages(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        await asyncio.Event().wait()
        yield [], "", True  # never reached


def test_the_node_watch_follows_the_slices_with_dra_and_keeps_them_across_its_own_restart() -> None:
    async def scenario() -> tuple[bool, bool, bool]:
        watch = NodeWatch(_Unreachable(), "v", lambda: None)  # type: ignore[arg-type]
        watch.follow("a=b", None, dra=True)  # the first follow starts the node follower too
        first = watch.slices.following
        watch.follow("a=c", None, dra=True)  # a new selector restarts the node follower
        second = watch.slices.following
        watch.follow("a=c", None, dra=False)
        third = watch.slices.following
        watch.stop()
        return first, second, third

    assert asyncio.run(scenario()) == (True, True, False)


def test_gpus_handed_out_by_the_device_plugin_and_a_dra_driver_are_said_with_both_counts() -> None:
    devices = NodeDevices.of([parse_slice(_slice())])  # type: ignore[list-item]

    message = published_twice("n1", 8, devices)

    assert message is not None
    assert "device plugin advertises 8" in message and "publishes 8 devices (pool n1)" in message
    assert published_twice("n1", 0, devices) is None
    assert published_twice("n1", 8, NodeDevices()) is None


def test_an_unscheduled_dra_pod_on_an_incomplete_pool_says_which_slices_were_seen() -> None:
    half = dra.resource_slice("n1", list(UUIDS[:4]), generation=2, slice_count=2)
    devices = NodeDevices.of([parse_slice(half)])  # type: ignore[list-item]

    message = pool_incomplete("n1", devices, "agent pod p was not scheduled within 15s")

    assert message == (
        "agent pod p was not scheduled within 15s; node n1's pool n1 generation 2: 1 of 2 "
        "ResourceSlices seen (n1-gpu.nvidia.com): the scheduler allocates nothing from an "
        "incomplete pool"
    )
    complete = NodeDevices.of([parse_slice(_slice())])  # type: ignore[list-item]
    assert pool_incomplete("n1", complete, "m") is None
