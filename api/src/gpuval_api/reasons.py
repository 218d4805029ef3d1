"""The one diagnosis catalogue: every named cause a check or the operator reports, with a hint.

Agent and operator both name failures from this enum, so a reason in a GpuNodeReport, a
GpuValidation condition or an Event has one summary and one hint, wherever it was raised.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from gpuval_api.verdicts import Verdict


class Severity(StrEnum):
    """How a finding bears on the verdict: an error fails its check, a warning only reports."""

    ERROR = "Error"
    WARNING = "Warning"


class Reason(StrEnum):
    """CamelCase names of every diagnosis (Kubernetes condition-reason style)."""

    # Driver layer (agent)
    DRIVER_NOT_LOADED = "DriverNotLoaded"
    NVML_ERROR = "NvmlError"
    CUDA_DRIVER_TOO_OLD = "CudaDriverTooOld"
    CUDA_INIT_FAILED = "CudaInitFailed"
    GPU_COUNT_MISMATCH = "GpuCountMismatch"
    # Hardware health (agent)
    ECC_UNCORRECTABLE = "EccUncorrectable"
    ROW_REMAP_PENDING = "RowRemapPending"
    ROW_REMAP_FAILED = "RowRemapFailed"
    XID_ERROR = "XidError"
    PERSISTENCE_MODE_OFF = "PersistenceModeOff"
    PCIE_LINK_DEGRADED = "PcieLinkDegraded"
    # Memory test (agent)
    MEMORY_MISCOMPARE = "MemoryMiscompare"
    MEMORY_PARTLY_COVERED = "MemoryPartlyCovered"
    # Burn (agent)
    BURN_MISMATCH = "BurnMismatch"
    BURN_NAN = "BurnNaN"
    BURN_FINGERPRINT_MISMATCH = "BurnFingerprintMismatch"
    THERMAL_SLOWDOWN = "ThermalSlowdown"
    OVER_TEMPERATURE = "OverTemperature"
    POWER_CAPPED = "PowerCapped"
    LOW_THROUGHPUT = "LowThroughput"
    # Bandwidth (agent)
    LOW_BANDWIDTH = "LowBandwidth"
    PEER_ACCESS_UNAVAILABLE = "PeerAccessUnavailable"
    # NCCL (agent)
    NCCL_TIMEOUT = "NcclTimeout"
    NCCL_ERROR = "NcclError"
    NCCL_LOW_BUSBW = "NcclLowBusbw"
    # Fabric: NCCL across nodes (agent and operator)
    FABRIC_UNREACHABLE = "FabricUnreachable"
    FABRIC_SLOW_NODE = "FabricSlowNode"
    FABRIC_SLOW_LINK = "FabricSlowLink"
    FABRIC_TRANSPORT_FALLBACK = "FabricTransportFallback"
    FABRIC_GANG_NOT_FORMED = "FabricGangNotFormed"
    # Sharing: another process on the GPU (agent)
    GPU_IN_USE = "GpuInUse"
    # The agent itself
    CHECK_ERROR = "CheckError"
    CHECK_SKIPPED = "CheckSkipped"
    INVALID_CONFIG = "InvalidConfig"
    AGENT_STOPPED = "AgentStopped"
    # Operator side
    POD_FAILED = "PodFailed"
    POD_EVICTED = "PodEvicted"
    POD_DELETED = "PodDeleted"
    POD_UNSCHEDULABLE = "PodUnschedulable"
    POD_OOM_KILLED = "PodOomKilled"
    IMAGE_PULL_FAILED = "ImagePullFailed"
    AGENT_NOT_STARTED = "AgentNotStarted"
    NODE_GONE = "NodeGone"
    NODE_GONE_UNTESTED = "NodeGoneUntested"
    TIMED_OUT = "TimedOut"
    NOT_UNIFORM = "NotUniform"


@dataclass(frozen=True, slots=True)
class ReasonInfo:
    """What a reason means (summary), what to do about it (hint), whether it fails the check
    (severity), and the node verdict it gives: Failed (evidence against the node) or NotRun
    (gpuval could not test the node; no node action, no failure alert)."""

    summary: str
    hint: str
    severity: Severity = Severity.ERROR
    verdict: Verdict = Verdict.FAILED


REASONS: dict[Reason, ReasonInfo] = {
    Reason.DRIVER_NOT_LOADED: ReasonInfo(
        "NVML found no NVIDIA driver or no devices",
        "check `lsmod | grep nvidia` and `nvidia-smi`; install or reload the NVIDIA driver",
    ),
    Reason.NVML_ERROR: ReasonInfo(
        "an NVML query failed unexpectedly",
        "run `nvidia-smi -q`; a GPU NVML cannot read needs a reset or has fallen off the bus",
    ),
    Reason.CUDA_DRIVER_TOO_OLD: ReasonInfo(
        "the driver's highest CUDA version is older than the CUDA runtime the workloads use",
        "upgrade the driver, or use a framework build for the driver's CUDA version",
    ),
    Reason.CUDA_INIT_FAILED: ReasonInfo(
        "CUDA could not initialise on a GPU",
        "compare the framework's CUDA with the driver's; check LD_LIBRARY_PATH and dmesg",
    ),
    Reason.GPU_COUNT_MISMATCH: ReasonInfo(
        "fewer or more GPUs are visible than the node advertises or the spec expects",
        "compare `nvidia-smi -L` with the node's nvidia.com/gpu capacity; look for XID 79 in dmesg",
    ),
    Reason.ECC_UNCORRECTABLE: ReasonInfo(
        "the GPU reports uncorrectable ECC memory errors",
        "take the node out of service; reset the GPU and re-test, RMA if errors return",
    ),
    Reason.ROW_REMAP_PENDING: ReasonInfo(
        "a memory row remap is pending and takes effect only after a GPU reset",
        "drain the node and reset the GPU (`nvidia-smi -r`) or reboot, then re-validate",
    ),
    Reason.ROW_REMAP_FAILED: ReasonInfo(
        "the GPU could not remap a failing memory row",
        "take the node out of service and RMA the GPU",
    ),
    Reason.XID_ERROR: ReasonInfo(
        "the driver reported a critical XID error during the run",
        "read `dmesg | grep -i xid`; XID 79/48/63/64/94/95 are hardware faults: drain and RMA",
    ),
    Reason.PERSISTENCE_MODE_OFF: ReasonInfo(
        "persistence mode is off, so every job pays the driver initialisation",
        "enable it with `nvidia-smi -pm 1` or the nvidia-persistenced service",
        Severity.WARNING,
    ),
    Reason.PCIE_LINK_DEGRADED: ReasonInfo(
        "the PCIe link runs below its maximum generation or width under load",
        "reseat the card or riser, check the slot and BIOS PCIe settings",
    ),
    Reason.MEMORY_MISCOMPARE: ReasonInfo(
        "a word of GPU memory read back differently from what was written (a bit flipped)",
        "drain the node; read the ECC and row-remap counters (`nvidia-smi -q -d "
        "ECC,ROW_REMAPPER`), reset the GPU and re-run `gpuval-agent run --checks memory`; RMA "
        "it if words still differ",
    ),
    Reason.MEMORY_PARTLY_COVERED: ReasonInfo(
        "the memory test could allocate less of the GPU's memory than configured: what was not "
        "tested is neither passed nor failed",
        "see what holds GPU memory (`nvidia-smi --query-compute-apps=pid,used_memory "
        "--format=csv`) and re-run the memory test when the GPU is free",
        Severity.WARNING,
    ),
    Reason.BURN_MISMATCH: ReasonInfo(
        "a burn result differed from the verified reference",
        "the GPU computes wrong results: drain the node, check ECC counters and temperatures, RMA",
    ),
    Reason.BURN_NAN: ReasonInfo(
        "a burn result contained NaN or Inf",
        "the GPU computes wrong results: drain the node, check ECC counters and temperatures, RMA",
    ),
    Reason.BURN_FINGERPRINT_MISMATCH: ReasonInfo(
        "the GPU's burn reference result differs from its peers' with the same GPU model, matrix "
        "size, precision and library versions: it computes the same wrong answer every time "
        "(silent data corruption suspect)",
        "drain the node; re-run the burn and compare its fingerprint with a healthy node's; RMA "
        "the GPU if it still differs",
    ),
    Reason.THERMAL_SLOWDOWN: ReasonInfo(
        "the GPU throttled its clocks for temperature during the burn",
        "check fans, airflow and the inlet temperature; the node should not take work",
    ),
    Reason.OVER_TEMPERATURE: ReasonInfo(
        "the GPU exceeded the configured maximum temperature during the burn",
        "check fans, airflow and the inlet temperature; the node should not take work",
    ),
    Reason.POWER_CAPPED: ReasonInfo(
        "the GPU throttled for its power limit well below the part's default limit",
        "check the enforced limit (`nvidia-smi -q -d POWER`); raise it with `nvidia-smi -pl`",
    ),
    Reason.LOW_THROUGHPUT: ReasonInfo(
        "burn throughput was below the configured threshold",
        "look at clocks and throttle reasons in the report; compare with a healthy node",
    ),
    Reason.LOW_BANDWIDTH: ReasonInfo(
        "a measured bandwidth was below the configured threshold",
        "check the PCIe link, NUMA placement and NVLink status (`nvidia-smi nvlink -s`)",
    ),
    Reason.PEER_ACCESS_UNAVAILABLE: ReasonInfo(
        "two GPUs of the node cannot access each other's memory directly",
        "check `nvidia-smi topo -m`, the IOMMU/ACS settings and the NVLink/fabric manager service",
    ),
    Reason.NCCL_TIMEOUT: ReasonInfo(
        "the NCCL all-reduce did not finish within the timeout (a hang)",
        "read the kept NCCL_DEBUG=INFO output; check NVLink, fabric manager, NCCL versions",
    ),
    Reason.NCCL_ERROR: ReasonInfo(
        "the NCCL all-reduce failed or gave a wrong sum",
        "read the kept NCCL_DEBUG=INFO output; compare NCCL and driver versions across nodes",
    ),
    Reason.NCCL_LOW_BUSBW: ReasonInfo(
        "NCCL all-reduce bus bandwidth was below the configured threshold",
        "check NVLink status and topology (`nvidia-smi topo -m`); re-run with NCCL_DEBUG=INFO",
    ),
    Reason.FABRIC_UNREACHABLE: ReasonInfo(
        "a rank of the fabric group could not reach rank 0's rendezvous address and port",
        "check NetworkPolicies and firewalls between the nodes, and NCCL_SOCKET_IFNAME (the "
        "interface NCCL binds); the message names the address and port tried",
    ),
    Reason.FABRIC_SLOW_NODE: ReasonInfo(
        "the node was slow in every pair all-reduce it took part in, with different partners",
        "check the node's NICs (`ibstat`, link speed and width), its PCIe links to them and "
        "NCCL_IB_HCA; one NIC down of 8 costs 12.5 %",
    ),
    Reason.FABRIC_SLOW_LINK: ReasonInfo(
        "the all-reduce between this node and one partner was slow, while both were fine with "
        "other partners",
        "check the cable and the switch ports between the two nodes (the message names both)",
    ),
    Reason.FABRIC_TRANSPORT_FALLBACK: ReasonInfo(
        "NCCL moved data between nodes over TCP sockets where InfiniBand/RoCE was expected",
        "check that the HCAs are visible in the pod (`ibv_devices`), the RDMA device plugin and "
        "NCCL_IB_HCA; set NCCL_NET=IB to make a missing HCA fail at once",
    ),
    Reason.FABRIC_GANG_NOT_FORMED: ReasonInfo(
        "the node's fabric group could not start all its pods within the gang timeout: the fabric "
        "was not tested (no evidence against the node)",
        "look at the group's pods (`kubectl get pods -l gpuval.dev/fabric-group`): GPUs held by "
        "work, or a node gone; the next run tries again",
        verdict=Verdict.NOT_RUN,
    ),
    Reason.GPU_IN_USE: ReasonInfo(
        "a process other than the agent's used the GPU before or during a load check "
        "(time-slicing, MPS, a host process, a pod that sees GPUs it did not request): the GPU "
        "was not tested, and its figures are no evidence against it",
        "the message names the GPU, the process (PID as NVML reports it, its name where visible, "
        "the memory it holds) and the check it disturbed: end or move that work, or give the "
        "agent the GPU alone, then run again; in a pod, hostPID lets the agent name the process",
        verdict=Verdict.NOT_RUN,
    ),
    Reason.CHECK_ERROR: ReasonInfo(
        "the check itself could not run",
        "read the check's message; re-run `gpuval-agent run` on the node to reproduce",
    ),
    Reason.CHECK_SKIPPED: ReasonInfo(
        "the check was not run because an earlier failure made it meaningless",
        "fix the earlier failure first",
        Severity.WARNING,
    ),
    Reason.INVALID_CONFIG: ReasonInfo(
        "the checks configuration given to the agent is invalid",
        "fix spec.checks of the GpuValidation (the message names the field)",
        verdict=Verdict.NOT_RUN,
    ),
    Reason.AGENT_STOPPED: ReasonInfo(
        "the agent was stopped (SIGTERM or SIGINT) before it finished; its results are partial",
        "re-run the validation for this node; an evicted or timed-out pod carries the operator's "
        "reason",
        verdict=Verdict.NOT_RUN,
    ),
    Reason.POD_FAILED: ReasonInfo(
        "the agent pod failed without writing a verdict",
        "read the pod's logs and events (`kubectl logs`, `kubectl describe pod`)",
    ),
    Reason.POD_EVICTED: ReasonInfo(
        "the agent pod was evicted before it finished: the node was not tested",
        "look at the node's pressure conditions and drains; the validation tries it again",
        verdict=Verdict.NOT_RUN,
    ),
    Reason.POD_DELETED: ReasonInfo(
        "the agent pod was deleted by someone else before it finished: the node was not tested",
        "see who deleted it (`kubectl get events`); the validation tries the node again",
        verdict=Verdict.NOT_RUN,
    ),
    Reason.POD_UNSCHEDULABLE: ReasonInfo(
        "the agent pod could not be scheduled on its node for the whole timeout (usually work "
        "holds its GPUs): the node was not tested, and was not disturbed",
        "nothing, if the GPUs are busy; else check the node's allocatable nvidia.com/gpu, taints "
        "and cordon state; the validation tries it again",
        verdict=Verdict.NOT_RUN,
    ),
    Reason.POD_OOM_KILLED: ReasonInfo(
        "the agent was killed for exceeding its memory limit: the node was not tested",
        "raise spec.agent.resources.limits.memory of the GpuValidation (or remove the limit): "
        "the burn and NCCL need a few GiB per GPU",
        verdict=Verdict.NOT_RUN,
    ),
    Reason.IMAGE_PULL_FAILED: ReasonInfo(
        "the agent image could not be pulled on the node: the node was not tested",
        "check spec.agent.image, the registry's reachability from the node and imagePullSecrets",
        verdict=Verdict.NOT_RUN,
    ),
    Reason.AGENT_NOT_STARTED: ReasonInfo(
        "the agent pod was scheduled but its container never started within the timeout: the node "
        "was not tested",
        "`kubectl describe pod` shows why (volume, sandbox, runtime); the validation tries again",
        verdict=Verdict.NOT_RUN,
    ),
    Reason.NODE_GONE: ReasonInfo(
        "the node was deleted or became unreachable while its agent ran",
        "check the node's status and kubelet; re-run the validation when it is back",
    ),
    Reason.NODE_GONE_UNTESTED: ReasonInfo(
        "the node was deleted or became unreachable before its agent started: it was not tested",
        "nothing to do for gpuval; the node is validated when it comes back",
        verdict=Verdict.NOT_RUN,
    ),
    Reason.TIMED_OUT: ReasonInfo(
        "the node's agent did not finish within the run's timeout",
        "read the agent pod's logs; a hang in NCCL or a wedged GPU are the usual causes",
    ),
    Reason.NOT_UNIFORM: ReasonInfo(
        "the node's environment differs from the rest of its pool or from the expected values",
        "align driver, CUDA, NCCL, VBIOS and modes across the pool; mixes cause NCCL hangs",
    ),
}


def verdict_of(reason: Reason) -> Verdict:
    """The node verdict a reason gives: Failed or NotRun (never taken out of service for it)."""
    return REASONS[reason].verdict


def info(reason: Reason) -> ReasonInfo:
    """The catalogue entry of a reason."""
    return REASONS[reason]


def hint(reason: Reason) -> str:
    """The one-line fix hint of a reason."""
    return REASONS[reason].hint
