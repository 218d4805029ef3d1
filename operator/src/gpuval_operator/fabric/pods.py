"""Pure: the fabric pod of one node in one group (docs/contracts.md, "The fabric pod").

The same pod as the node's agent pod (planning.node_pod: every GPU of the node, node affinity,
tolerations, the agents' ServiceAccount and securityContext), running `gpuval-agent fabric
--cluster` with the group's rendezvous in its environment: rank 0's address and the port the
operator picked. Rank 0's pod is made first and listens on the port (its own address is its
loopback); the others are made once rank 0 has a pod IP and dial it. The rendezvous reaches the
agents through their pod spec, so they need no right to read anything.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from gpuval_api import keys
from gpuval_api.crd import GpuValidationSpec
from gpuval_api.env import AgentEnv
from gpuval_api.fabric import FABRIC_POD_COMMAND, FabricConfig
from gpuval_operator import names, planning
from gpuval_operator.config import OperatorConfig

LOOPBACK = "127.0.0.1"


def fabric_config(spec: GpuValidationSpec) -> FabricConfig:
    """What the agents measure: spec.fabric without the operator's own fields (grouping)."""
    fabric = spec.fabric or FabricConfig()
    fields = set(FabricConfig.model_fields)
    return FabricConfig.model_validate(fabric.model_dump(include=fields))


def master_address(ip: str, port: int) -> str:
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


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
    master_ip: str | None,
    deadline: float,
    spec: GpuValidationSpec,
    config: OperatorConfig,
) -> dict[str, Any]:
    """The fabric pod of `nodes[rank]` in `group`; `master_ip` is rank 0's pod IP (None for rank
    0 itself, which listens)."""
    node = nodes[rank]
    report = names.report_name(validation, run, node)
    settings = fabric_config(spec).model_dump_json(by_alias=True)
    env = [
        *planning.common_env(report=report, deadline=deadline),
        {"name": AgentEnv.FABRIC_RANK, "value": str(rank)},
        {"name": AgentEnv.FABRIC_NODES, "value": json.dumps(list(nodes), separators=(",", ":"))},
        {"name": AgentEnv.FABRIC_MASTER, "value": master_address(master_ip or LOOPBACK, port)},
        {"name": AgentEnv.FABRIC_GROUP, "value": group},
        {"name": AgentEnv.FABRIC_CONFIG, "value": settings},
    ]
    labels = {
        **planning.child_labels(validation, run, node),
        keys.LABEL_FABRIC_GROUP: group,
        keys.LABEL_FABRIC_RANK: str(rank),
    }
    return planning.node_pod(
        name=names.fabric_pod_name(validation, run, group, rank),
        labels=labels,
        node=node,
        owner=planning.owner_reference(validation, uid),
        spec=spec,
        config=config,
        container=planning.agent_container(
            spec, gpus, list(FABRIC_POD_COMMAND), env + planning.spec_env(spec), metrics=False
        ),
        annotations={keys.ANNOTATION_FABRIC_PORT: str(port)},
        host_network=spec.fabric is not None and spec.fabric.host_network,
    )
