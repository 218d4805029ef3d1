"""Environment variable names: the contract between the chart, the operator and the agent pod.

Each name is defined here once. The chart's Deployment sets the operator's; the operator sets the
agent pod's (docs/contracts.md, "The agent pod"); the pod runner and the tests read the same
members, so a renamed variable cannot drift between the two ends.
"""

from __future__ import annotations

from enum import StrEnum


class AgentEnv(StrEnum):
    """What the agent reads (set by the operator on the agent pod, or by hand)."""

    REPORT_NAME = "GPUVAL_REPORT_NAME"
    NODE_NAME = "GPUVAL_NODE_NAME"
    CHECKS = "GPUVAL_CHECKS"
    EXPECTED_GPUS = "GPUVAL_EXPECTED_GPUS"
    # On a node whose device plugin shares its GPUs (time-slicing): the replicas it advertises of
    # each GPU; GPUVAL_EXPECTED_GPUS is then the physical count (nvidia.com/gpu.count).
    GPU_REPLICAS = "GPUVAL_GPU_REPLICAS"
    # The UUIDs of the devices the node published and the pod was given (comma-separated; with
    # spec.agent.devices dra, from the node's ResourceSlices: whole GPUs, or MIG devices): the
    # agent tests these, by UUID, and names each it cannot see (GpuMissing).
    DEVICE_UUIDS = "GPUVAL_DEVICE_UUIDS"
    METRICS_PORT = "GPUVAL_METRICS_PORT"
    # Absolute deadline (Unix seconds) of the agent's work: past it the operator times the node
    # out, so the agent keeps retrying its report write until then and no longer.
    DEADLINE = "GPUVAL_DEADLINE"
    # Where the agent leaves its compact verdict for the kubelet's termination message.
    TERMINATION_LOG = "GPUVAL_TERMINATION_LOG"
    # The fabric (cross-node NCCL) pods: this node's rank in its group, the group's nodes by rank
    # (JSON list), rank 0's rendezvous address (ADDR:PORT), the group's name, and FabricConfig.
    FABRIC_RANK = "GPUVAL_FABRIC_RANK"
    FABRIC_NODES = "GPUVAL_FABRIC_NODES"
    FABRIC_MASTER = "GPUVAL_FABRIC_MASTER"
    # Instead of FABRIC_MASTER where a group's pods are made at once (a Kueue pod group): rank 0's
    # pod name and the port, POD:PORT; the agent reads the pod's IP from the API server.
    FABRIC_MASTER_POD = "GPUVAL_FABRIC_MASTER_POD"
    FABRIC_GROUP = "GPUVAL_FABRIC_GROUP"
    FABRIC_CONFIG = "GPUVAL_FABRIC_CONFIG"
    # The GpuBaselines the node is judged against (YAML documents, as a baseline file holds
    # them) and the fraction below which a figure is BelowBaseline (spec.baseline.fraction).
    BASELINE = "GPUVAL_BASELINE"
    BASELINE_FRACTION = "GPUVAL_BASELINE_FRACTION"
    # The node's GPU model as its nvidia.com/gpu.product label says it (GPU feature discovery),
    # with spec.baseline: which baselines the pod was given; a node whose GPUs are another model
    # is named (GpuProductMismatch).
    NODE_GPU_PRODUCT = "GPUVAL_NODE_GPU_PRODUCT"
    BACKEND = "GPUVAL_BACKEND"
    SIMULATE = "GPUVAL_SIMULATE"
    SERVICEACCOUNT_DIR = "GPUVAL_SERVICEACCOUNT_DIR"
    # Test hook of the memory check on the real backend: JSON of one flip or a list of them
    # ({"gpu", "offset", "bit", "pattern", "step"}), each flipping one bit between a pattern's
    # write and its verification (docs/agent.md, "The memory test").
    MEMORY_INJECT = "GPUVAL_MEMORY_INJECT"
    # Test hook of the burn on the real backend: a factor in (0, 1); each GPU spends the rest of
    # its time in a spin kernel after its GEMMs, so its throughput is about that share of a
    # healthy one's, with results still verified: a slow GPU for the baseline rules
    # (docs/agent.md, "Baselines").
    BURN_SLOWDOWN = "GPUVAL_BURN_SLOWDOWN"
    # Test hook of the training check on the real backend: STEP or STEP:RANK (1-based step, the
    # warm-up counted; rank 0 by default): before that step's forward pass, that rank adds 0.01
    # to one weight of its first attention layer, so its losses leave its peers' from that step
    # on (docs/agent.md, "The training step").
    TRAIN_PERTURB = "GPUVAL_TRAIN_PERTURB"


class OperatorEnv(StrEnum):
    """What the operator reads at start-up (set by the chart's Deployment)."""

    AGENT_NAMESPACE = "GPUVAL_AGENT_NAMESPACE"
    AGENT_SERVICE_ACCOUNT = "GPUVAL_AGENT_SERVICE_ACCOUNT"
    METRICS_PORT = "GPUVAL_METRICS_PORT"
    METRICS_PER_GPU = "GPUVAL_METRICS_PER_GPU"
    CREATE_CONCURRENCY = "GPUVAL_CREATE_CONCURRENCY"
    POD_GRACE_SECONDS = "GPUVAL_POD_GRACE_SECONDS"
    EVENTS_PER_RUN = "GPUVAL_EVENTS_PER_RUN"
    # A node NotReady for less than this is not evidence of anything: its run goes on.
    NODE_NOT_READY_SECONDS = "GPUVAL_NODE_NOT_READY_SECONDS"
    # The PriorityClass of agent pods whose spec.agent.priorityClassName is unset (the chart's
    # agentPriorityClass); empty: none.
    AGENT_PRIORITY_CLASS = "GPUVAL_AGENT_PRIORITY_CLASS"
    # The most nodes gpuval holds out of service (tainted or cordoned) at once, across every
    # GpuValidation: counted from the nodes (keys.NODE_LABEL_OUT_OF_SERVICE).
    MAX_NODES_OUT_OF_SERVICE = "GPUVAL_MAX_NODES_OUT_OF_SERVICE"
    # Leader election: one replica acts, the others wait on this coordination.k8s.io Lease.
    LEASE_NAME = "GPUVAL_LEASE_NAME"
    LEASE_NAMESPACE = "GPUVAL_LEASE_NAMESPACE"
    LEASE_DURATION_SECONDS = "GPUVAL_LEASE_DURATION_SECONDS"
    LEASE_RENEW_SECONDS = "GPUVAL_LEASE_RENEW_SECONDS"
