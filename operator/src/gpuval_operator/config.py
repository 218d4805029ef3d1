"""Operator settings, read once at start-up from the environment (the chart sets them)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from gpuval_api import OperatorEnv as E


class ConfigError(ValueError):
    """An environment variable holds a value the operator cannot use."""


def _int(env: dict[str, str], name: str, default: int, minimum: int = 0) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not an integer; set it to a whole number") from None
    if value < minimum:
        raise ConfigError(f"{name}={value} is below {minimum}; set it to at least {minimum}")
    return value


def _bool(env: dict[str, str], name: str, default: bool) -> bool:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    if raw.lower() in ("1", "true", "yes", "on"):
        return True
    if raw.lower() in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name}={raw!r} is not a boolean; use true or false")


@dataclass(frozen=True, slots=True)
class OperatorConfig:
    """What the chart configures: where agent pods go, how fast the operator may write, what it
    exports.
    """

    agent_namespace: str = "gpuval-system"
    agent_service_account: str = "gpuval-agent"
    metrics_port: int = 8080
    metrics_per_gpu: bool = False
    create_concurrency: int = 32
    status_interval_seconds: float = 1.0
    pod_grace_seconds: float = 10.0
    events_per_run: int = 50
    # A node NotReady for less than this goes on with its run (a kubelet restart, one missed
    # status update); past it the node is NotRun (NodeNotReady) and tried again. Below the 300 s
    # after which Kubernetes evicts pods from a NotReady node.
    node_not_ready_seconds: float = 120.0
    # The PriorityClass of agent pods whose spec names none (the chart's agentPriorityClass).
    agent_priority_class: str | None = None
    # The most nodes gpuval holds out of service at once, across every validation (0: none).
    max_nodes_out_of_service: int = 10
    # Leader election (two replicas): off unless a namespace for the Lease is given.
    lease_namespace: str | None = None
    lease_name: str = "gpuval-operator"
    lease_duration_seconds: int = 15
    lease_renew_seconds: int = 5

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> OperatorConfig:
        env = dict(os.environ) if env is None else env
        d = cls()
        return cls(
            agent_namespace=env.get(E.AGENT_NAMESPACE) or d.agent_namespace,
            agent_service_account=env.get(E.AGENT_SERVICE_ACCOUNT) or d.agent_service_account,
            metrics_port=_int(env, E.METRICS_PORT, d.metrics_port),
            metrics_per_gpu=_bool(env, E.METRICS_PER_GPU, d.metrics_per_gpu),
            create_concurrency=_int(env, E.CREATE_CONCURRENCY, d.create_concurrency, 1),
            status_interval_seconds=d.status_interval_seconds,
            pod_grace_seconds=float(_int(env, E.POD_GRACE_SECONDS, int(d.pod_grace_seconds), 0)),
            events_per_run=_int(env, E.EVENTS_PER_RUN, d.events_per_run),
            node_not_ready_seconds=float(
                _int(env, E.NODE_NOT_READY_SECONDS, int(d.node_not_ready_seconds), 0)
            ),
            agent_priority_class=env.get(E.AGENT_PRIORITY_CLASS) or None,
            max_nodes_out_of_service=_int(
                env, E.MAX_NODES_OUT_OF_SERVICE, d.max_nodes_out_of_service
            ),
            lease_namespace=env.get(E.LEASE_NAMESPACE) or None,
            lease_name=env.get(E.LEASE_NAME) or d.lease_name,
            lease_duration_seconds=_int(env, E.LEASE_DURATION_SECONDS, d.lease_duration_seconds, 2),
            lease_renew_seconds=_int(env, E.LEASE_RENEW_SECONDS, d.lease_renew_seconds, 1),
        ).checked()

    def checked(self) -> OperatorConfig:
        if self.lease_namespace and self.lease_renew_seconds * 2 > self.lease_duration_seconds:
            raise ConfigError(
                f"{E.LEASE_RENEW_SECONDS}={self.lease_renew_seconds} leaves no room to renew "
                f"within {E.LEASE_DURATION_SECONDS}={self.lease_duration_seconds}; renew at most "
                "every half lease"
            )
        return self
