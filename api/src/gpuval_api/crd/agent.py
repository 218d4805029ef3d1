"""How the agent pods (and the fabric pods) of a GpuValidation are made: `spec.agent`."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from gpuval_api.crd.common import (
    MAX_ITEMS,
    MAX_SECONDS,
    CrdModel,
    LabelKey,
    LabelValue,
    Quantity,
    ResourceName,
    map_bounds,
)
from gpuval_api.dra import GPU_DEVICE_CLASS, MIG_DEVICE_CLASS
from gpuval_api.kueue import queue_field


class Toleration(CrdModel):
    """A Kubernetes toleration added to the agent pods."""

    key: LabelKey | None = Field(
        default=None, description="Taint key; empty with Exists tolerates all."
    )
    operator: str = Field(
        default="Equal", pattern=r"^(Equal|Exists)$", max_length=8, description="Equal or Exists."
    )
    value: LabelValue | None = Field(default=None, description="Taint value for Equal.")
    effect: str | None = Field(
        default=None,
        pattern=r"^(NoSchedule|PreferNoSchedule|NoExecute)$",
        max_length=16,
        description="Taint effect to match; empty matches all.",
    )
    toleration_seconds: int | None = Field(
        default=None,
        ge=0,
        le=MAX_SECONDS,
        description="How long a NoExecute taint is tolerated, in seconds.",
    )


class EnvVar(CrdModel):
    """A plain environment variable for the agent container."""

    name: str = Field(
        min_length=1,
        max_length=256,
        pattern=r"^[-._a-zA-Z][-._a-zA-Z0-9]*$",
        description="Variable name.",
    )
    value: str = Field(default="", max_length=4096, description="Variable value.")


class Resources(CrdModel):
    """Agent container resources besides the GPUs (the operator asks for all the node's GPUs)."""

    requests: dict[ResourceName, Quantity] = Field(
        default_factory=lambda: {"cpu": "1", "memory": "4Gi"},
        json_schema_extra=map_bounds(317),
        description="Resource requests.",
    )
    limits: dict[ResourceName, Quantity] = Field(
        default_factory=dict,
        json_schema_extra=map_bounds(317),
        description="Resource limits.",
    )


DEFAULT_AGENT_IMAGE = "ghcr.io/gpuval/gpuval-agent:0.1.0"

# A DeviceClass name (a DNS subdomain).
_DEVICE_CLASS = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"


class DeviceSource(StrEnum):
    """How an agent pod gets its node's GPUs."""

    DEVICE_PLUGIN = "devicePlugin"
    DRA = "dra"


class DraSettings(CrdModel):
    """The DeviceClasses an agent pod's ResourceClaim asks for (spec.agent.devices dra)."""

    device_class_name: str = Field(
        default=GPU_DEVICE_CLASS,
        max_length=253,
        pattern=_DEVICE_CLASS,
        description=(
            "DeviceClass of the node's whole GPUs (NVIDIA's DRA driver: gpu.nvidia.com). The claim "
            "asks for every device of it on the node (allocationMode All)."
        ),
    )
    mig_device_class_name: str = Field(
        default=MIG_DEVICE_CLASS,
        max_length=253,
        pattern=_DEVICE_CLASS,
        description=(
            "DeviceClass of the node's MIG devices (NVIDIA's DRA driver: mig.nvidia.com), asked "
            "for, all of them, on a node whose ResourceSlices publish MIG devices."
        ),
    )


class AgentSettings(CrdModel):
    """How the agent pods are made."""

    image: str = Field(
        default=DEFAULT_AGENT_IMAGE, min_length=1, max_length=512, description="Agent image."
    )
    image_pull_policy: str = Field(
        default="IfNotPresent",
        pattern=r"^(Always|IfNotPresent|Never)$",
        max_length=16,
        description="Image pull policy of the agent container.",
    )
    privileged: bool = Field(
        default=True,
        description=(
            "Run the agent privileged (full NVML access, e.g. ECC and row-remap counters)."
        ),
    )
    host_pid: bool = Field(
        default=True,
        alias="hostPID",
        description=(
            "Run the agent in the node's PID namespace, so the PIDs NVML reports for other "
            "processes on a GPU are the ones the agent can name (GpuInUse: process name, its pod); "
            "fabric pods too. Off: the agent still sees that a GPU is in use, by PID only."
        ),
    )
    priority_class_name: str | None = Field(
        default=None,
        min_length=1,
        max_length=253,
        pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
        description=(
            "PriorityClass of the agent pods (local checks and fabric). A class below the "
            "workloads' priority (the chart's agentPriorityClass) lets the scheduler preempt a "
            "running agent for real work; the node is then NotRun (AgentPreempted) and tried "
            "again. Unset: the operator's default (the chart's class when it creates one), else "
            "none."
        ),
    )
    resources: Resources = Field(
        default_factory=Resources, description="CPU and memory for the agent."
    )
    tolerations: list[Toleration] = Field(
        default_factory=list,
        max_length=MAX_ITEMS,
        description=(
            "Extra tolerations; nvidia.com/gpu, gpuval.dev/unhealthy and the cordon taint are "
            "always tolerated."
        ),
    )
    env: list[EnvVar] = Field(
        default_factory=list,
        max_length=MAX_ITEMS,
        description="Extra environment variables, e.g. NCCL_SOCKET_IFNAME.",
    )
    metrics_port: int | None = Field(
        default=None,
        ge=1024,
        le=65535,
        description="Port of the agent's live metrics; unset: none.",
    )
    queue: str | None = queue_field("the agent pods, each its own workload")
    devices: DeviceSource = Field(
        default=DeviceSource.DEVICE_PLUGIN,
        description=(
            "How the agent pods (and the fabric pods) get the node's GPUs: devicePlugin asks for "
            "every nvidia.com/gpu (and nvidia.com/mig-<profile> under the mixed MIG strategy) the "
            "node advertises; dra gives each pod a ResourceClaim, from a ResourceClaimTemplate, "
            "for every device of the node's ResourceSlices (driver gpu.nvidia.com) of the "
            "DeviceClasses in `dra`, and the node's GPUs are learned from those slices."
        ),
    )
    dra: DraSettings = Field(
        default_factory=DraSettings,
        description="The DeviceClasses asked for with devices dra.",
    )
