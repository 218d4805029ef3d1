"""Pure: the fabric pod of one node in one group (docs/contracts.md, "The fabric pod").

The same pod as the node's agent pod (planning.node_pod: every GPU of the node, node affinity,
tolerations, the agents' ServiceAccount and securityContext), running `gpuval-agent fabric
--cluster` with the group's rendezvous in its environment: rank 0's pod (for the others) and the
port the operator picked. Rank 0's pod listens on the port (its own address is its loopback).

A group's pods are made at once, before rank 0 has an address: the others are told rank 0's pod
name and read its IP from the API server (`get` on pods in their namespace, rbac.AGENT_POD_RULES)
once it has one. Made one after the other (rank 0 first, the rest once it had an IP) a group
waited for two schedulings instead of one: 35 s of a 72 s round at 10,000 nodes
(docs/operator/fabric.md,
"How the fabric scales"). With `spec.fabric.queue` the pods are also one Kueue pod group
(admitted whole, so no member holds a GPU while the quota cannot hold them all;
docs/operator/fabric.md, "Kueue: fabric groups admitted whole").
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from gpuval_api import AgentEnv, keys
from gpuval_api.crd import GpuValidationSpec
from gpuval_api.fabric import FABRIC_POD_COMMAND, FabricConfig
from gpuval_api.kueue import PodGroup
from gpuval_operator import names, planning
from gpuval_operator.config import OperatorConfig
from gpuval_operator.devices import DeviceRequest

LOOPBACK = "127.0.0.1"


def fabric_config(spec: GpuValidationSpec) -> FabricConfig:
    """What the agents measure: spec.fabric without the operator's own fields (grouping)."""
    fabric = spec.fabric or FabricConfig()
    fields = set(FabricConfig.model_fields)
    return FabricConfig.model_validate(fabric.model_dump(include=fields))


def pod_group(
    spec: GpuValidationSpec, validation: str, run: str, group: str, size: int
) -> PodGroup | None:
    """The Kueue pod group of a fabric group, None without spec.fabric.queue."""
    if spec.fabric is None or spec.fabric.queue is None:
        return None
    return PodGroup(spec.fabric.queue, names.fabric_pod_group(validation, run, group), size)


def _rendezvous(validation: str, run: str, group: str, *, rank: int, port: int) -> dict[str, str]:
    """Where rank `rank` finds rank 0: rank 0 listens on its loopback; the others are told its
    pod's name, made before rank 0 has an address."""
    if rank > 0:
        rank0 = names.fabric_pod_name(validation, run, group, 0)
        return {"name": AgentEnv.FABRIC_MASTER_POD, "value": f"{rank0}:{port}"}
    return {"name": AgentEnv.FABRIC_MASTER, "value": f"{LOOPBACK}:{port}"}


def build_fabric_pod(
    *,
    validation: str,
    uid: str,
    run: str,
    group: str,
    nodes: Sequence[str],
    rank: int,
    gpus: int,
    port: int,
    request: DeviceRequest | None = None,
    deadline: float,
    spec: GpuValidationSpec,
    config: OperatorConfig,
) -> dict[str, Any]:
    """The fabric pod of `nodes[rank]` in `group`; `request`: how it asks for the node's devices
    (as its agent pod does; default `gpus` nvidia.com/gpu)."""
    node = nodes[rank]
    request = request or DeviceRequest.device_plugin(gpus)
    report = names.report_name(validation, run, node)
    settings = fabric_config(spec).model_dump_json(by_alias=True)
    kueue = pod_group(spec, validation, run, group, len(nodes))
    env = [
        *planning.common_env(report=report, deadline=deadline),
        {"name": AgentEnv.FABRIC_RANK, "value": str(rank)},
        {"name": AgentEnv.FABRIC_NODES, "value": json.dumps(list(nodes), separators=(",", ":"))},
        _rendezvous(validation, run, group, rank=rank, port=port),
        {"name": AgentEnv.FABRIC_GROUP, "value": group},
        {"name": AgentEnv.FABRIC_CONFIG, "value": settings},
        *([planning.device_uuids_env(request.uuids)] if request.uuids else []),
    ]
    labels = {
        **planning.child_labels(validation, run, node),
        keys.LABEL_FABRIC_GROUP: group,
        keys.LABEL_FABRIC_RANK: str(rank),
        **(kueue.labels() if kueue is not None else {}),
    }
    annotations = {
        keys.ANNOTATION_FABRIC_PORT: str(port),
        **(kueue.annotations() if kueue is not None else {}),
    }
    return planning.node_pod(
        name=names.fabric_pod_name(validation, run, group, rank),
        labels=labels,
        node=node,
        owner=planning.owner_reference(validation, uid),
        spec=spec,
        config=config,
        container=planning.agent_container(
            spec, request, list(FABRIC_POD_COMMAND), env + planning.spec_env(spec), metrics=False
        ),
        annotations=annotations,
        host_network=spec.fabric is not None and spec.fabric.host_network,
        claims=request.pod_claims(),
    )
