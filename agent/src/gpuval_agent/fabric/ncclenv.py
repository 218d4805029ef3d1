"""The environment of the fabric's NCCL processes. Pure.

- NCCL_ALGO=Ring for the whole measurement (group and pairs), unless the person or the spec sets
  NCCL_ALGO: with two nodes a tree can show up to twice the network rate (NVIDIA/nccl#209), so a
  pair's figure would not compare with the group's and a slow node could hide behind it.
- NCCL_GRAPH_MIXING_SUPPORT=0 unless set (TIMING_NCCL_ENV: the timed all-reduces are graph
  replays, each ended by a synchronize).
- NCCL_DEBUG=INFO always: the transport is read from NCCL's own lines, and a hang keeps them.
- The multicast-off variables in every process (SAFE_NCCL_ENV), whatever the spec says.
- The spec's ncclEnv (fabric.ncclEnv: NCCL_SOCKET_IFNAME, NCCL_IB_HCA, NCCL_NET...) over the
  inherited environment.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpuval_agent.backends.ranks import SAFE_NCCL_ENV, TIMING_NCCL_ENV
from gpuval_api.fabric import FabricConfig

RING = "Ring"


def fabric_rank_environment(base: Mapping[str, str], config: FabricConfig) -> dict[str, str]:
    """The whole environment of a fabric rank process."""
    env = TIMING_NCCL_ENV | dict(base)
    env.setdefault("NCCL_ALGO", RING)
    env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    for variable in config.nccl_env:
        env[variable.name] = variable.value
    env["NCCL_DEBUG"] = "INFO"
    env.update(SAFE_NCCL_ENV)
    return env


def nccl_variables(env: Mapping[str, str]) -> dict[str, str]:
    """Every NCCL_* variable in effect: recorded beside every figure (socket figures depend 3x
    on NCCL_SOCKET_NTHREADS and NCCL_NSOCKS_PERTHREAD)."""
    return {key: env[key] for key in sorted(env) if key.startswith("NCCL_")}
