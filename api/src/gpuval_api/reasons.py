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


class RepairAction(StrEnum):
    """What a failure asks of the node, after NVIDIA's documented actions: the XID catalogue's
    resolution buckets (RESTART_APP, RESET_GPU, RESTART_BM, CONTACT_SUPPORT: "Analyzing Xid
    Errors with the Xid Catalog") and NVIDIA Health Validation's recommended actions (reset the
    GPU, restart the node, open a service request). A node's action is its failure's (the reason
    its GpuValidated condition names); spec.remediation hands a ResetGpu or Reboot to the
    cluster's repair engine, the others are a person's (docs/operator/remediation.md,
    "Remediation")."""

    # Nothing on the node to repair: the spec, the stack or a workload, or no documented action.
    NONE = "None"
    RESTART_APP = "RestartApplication"  # the application's fault (e.g. XID 13, 31, 43)
    RESET_GPU = "ResetGpu"  # e.g. XID 48, 62, 95, 119; pending row remaps, NVLink down
    REBOOT = "Reboot"  # e.g. XID 79 (fallen off the bus); pending page retirements
    # Service or RMA: a person (e.g. CONTACT_SUPPORT XIDs, wrong results, a link that degraded).
    REPLACE = "Replace"


# The actions a repair engine carries out (a reboot also resets every GPU of the node).
REPAIRABLE_ACTIONS = frozenset({RepairAction.RESET_GPU, RepairAction.REBOOT})


class Reason(StrEnum):
    """CamelCase names of every diagnosis (Kubernetes condition-reason style)."""

    # Driver layer (agent)
    DRIVER_NOT_LOADED = "DriverNotLoaded"
    NVML_ERROR = "NvmlError"
    CUDA_DRIVER_TOO_OLD = "CudaDriverTooOld"
    CUDA_INIT_FAILED = "CudaInitFailed"
    GPU_COUNT_MISMATCH = "GpuCountMismatch"
    GPU_PRODUCT_MISMATCH = "GpuProductMismatch"
    GPU_MISSING = "GpuMissing"
    # Hardware health (agent)
    ECC_UNCORRECTABLE = "EccUncorrectable"
    ROW_REMAP_PENDING = "RowRemapPending"
    ROW_REMAP_FAILED = "RowRemapFailed"
    XID_ERROR = "XidError"
    PERSISTENCE_MODE_OFF = "PersistenceModeOff"
    PCIE_LINK_DEGRADED = "PcieLinkDegraded"
    # Hardware state (agent, the state check): read at rest, before and after the load checks
    ECC_AGGREGATE_UNCORRECTABLE = "EccAggregateUncorrectable"
    ECC_CORRECTABLE_HIGH = "EccCorrectableHigh"
    ROW_REMAP_SPARES_LOW = "RowRemapSparesLow"
    RETIRED_PAGES_PENDING = "RetiredPagesPending"
    RETIRED_PAGES_HIGH = "RetiredPagesHigh"
    KERNEL_XID_RESTART_APP = "KernelXidRestartApp"
    KERNEL_XID_RESET_GPU = "KernelXidResetGpu"
    KERNEL_XID_REBOOT = "KernelXidReboot"
    KERNEL_XID_CONTACT_SUPPORT = "KernelXidContactSupport"
    KERNEL_LOG_UNREADABLE = "KernelLogUnreadable"
    NVLINK_DOWN = "NvlinkDown"
    NVLINK_SPEED_LOW = "NvlinkSpeedLow"
    NVLINK_ERRORS = "NvlinkErrors"
    PCIE_LINK_DOWNTRAINED = "PcieLinkDowntrained"
    PCIE_AER_UNCORRECTABLE = "PcieAerUncorrectable"
    PCIE_AER_CORRECTABLE = "PcieAerCorrectable"
    CLOCKS_THROTTLED_AT_IDLE = "ClocksThrottledAtIdle"
    POWER_LIMIT_BELOW_DEFAULT = "PowerLimitBelowDefault"
    GPU_FABRIC_NOT_READY = "GpuFabricNotReady"
    FABRIC_MANAGER_NOT_RUNNING = "FabricManagerNotRunning"
    IB_PORT_DOWN = "IbPortDown"
    IB_PORT_RATE_LOW = "IbPortRateLow"
    IB_LINK_FLAPPING = "IbLinkFlapping"
    IB_PORT_ERRORS = "IbPortErrors"
    NIC_GPU_LOCALITY = "NicGpuLocality"
    ERROR_COUNTERS_GREW = "ErrorCountersGrew"
    # DCGM diagnostics (agent, the optional dcgm check)
    DCGM_NOT_AVAILABLE = "DcgmNotAvailable"
    DCGM_MEMORY_ERROR = "DcgmMemoryError"
    DCGM_INTERCONNECT_ERROR = "DcgmInterconnectError"
    DCGM_THERMAL_POWER_ERROR = "DcgmThermalPowerError"
    DCGM_PERFORMANCE_ERROR = "DcgmPerformanceError"
    DCGM_SOFTWARE_ERROR = "DcgmSoftwareError"
    DCGM_DIAG_FAILED = "DcgmDiagFailed"
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
    # Training step (agent, and the operator's comparison of the nodes' losses)
    LOW_TRAINING_THROUGHPUT = "LowTrainingThroughput"
    TRAINING_LOSS_NOT_FINITE = "TrainingLossNotFinite"
    TRAINING_MISMATCH = "TrainingMismatch"
    # Fabric: NCCL across nodes (agent and operator)
    FABRIC_UNREACHABLE = "FabricUnreachable"
    FABRIC_SLOW_NODE = "FabricSlowNode"
    FABRIC_SLOW_LINK = "FabricSlowLink"
    FABRIC_SLOW_PAIR = "FabricSlowPair"
    FABRIC_SLOW_DOMAIN = "FabricSlowDomain"
    FABRIC_SLOW_PATH = "FabricSlowPath"
    FABRIC_TRAIN_SLOW_NODE = "FabricTrainSlowNode"
    FABRIC_TRANSPORT_FALLBACK = "FabricTransportFallback"
    FABRIC_GANG_NOT_FORMED = "FabricGangNotFormed"
    # Sharing: another process on the GPU (agent)
    GPU_IN_USE = "GpuInUse"
    # Baselines and history (agent and operator): what this GPU stack and this node should do
    BELOW_BASELINE = "BelowBaseline"
    DRIFT_FROM_HISTORY = "DriftFromHistory"
    # The agent itself
    CHECK_ERROR = "CheckError"
    CHECK_SKIPPED = "CheckSkipped"
    NOT_APPLICABLE = "NotApplicable"
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
    AGENT_POD_REFUSED = "AgentPodRefused"
    NODE_GONE = "NodeGone"
    NODE_GONE_UNTESTED = "NodeGoneUntested"
    NODE_NOT_READY = "NodeNotReady"
    AGENT_KILLED = "AgentKilled"
    AGENT_PREEMPTED = "AgentPreempted"
    GPU_REPLICAS_HELD = "GpuReplicasHeld"
    GPU_SHARING_UNSUPPORTED = "GpuSharingUnsupported"
    DEVICES_CLAIMED = "DevicesClaimed"
    DEVICE_POOL_INCOMPLETE = "DevicePoolIncomplete"
    DEVICES_PUBLISHED_TWICE = "DevicesPublishedTwice"
    TIMED_OUT = "TimedOut"
    NOT_UNIFORM = "NotUniform"


@dataclass(frozen=True, slots=True)
class ReasonInfo:
    """What a reason means (summary), what to do about it (hint), whether it fails the check
    (severity), the node verdict it gives: Failed (evidence against the node) or NotRun
    (gpuval could not test the node; no node action, no failure alert), and the repair it asks
    for (action)."""

    summary: str
    hint: str
    severity: Severity = Severity.ERROR
    verdict: Verdict = Verdict.FAILED
    # NVIDIA's documented action for it (RepairAction); NONE for most: only hardware state whose
    # catalogue entry names a reset, a reboot or a service asks for one.
    action: RepairAction = RepairAction.NONE


REASONS: dict[Reason, ReasonInfo] = {
    Reason.DRIVER_NOT_LOADED: ReasonInfo(
        "NVML found no NVIDIA driver or no devices",
        "check `lsmod | grep nvidia` and `nvidia-smi`; install or reload the NVIDIA driver",
    ),
    Reason.NVML_ERROR: ReasonInfo(
        "an NVML query failed unexpectedly",
        "run `nvidia-smi -q`; a GPU NVML cannot read needs a reset or has fallen off the bus",
        action=RepairAction.RESET_GPU,
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
        action=RepairAction.REBOOT,
    ),
    Reason.GPU_PRODUCT_MISMATCH: ReasonInfo(
        "the node's nvidia.com/gpu.product label names another GPU model than its GPUs are: "
        "workloads that select the label land on other GPUs, and the node was given the "
        "baselines of the label's model",
        "GPU feature discovery writes the label from NVML: a stale one (GPUs replaced, GFD not "
        "run since) or one set by hand; restart GFD on the node or correct the label, then "
        "validate again",
    ),
    Reason.GPU_MISSING: ReasonInfo(
        "a device the node published and the agent pod was given (a GPU or MIG device UUID of "
        "its ResourceSlices, GPUVAL_DEVICE_UUIDS) is not visible to NVML on the node",
        "run `nvidia-smi -L` on the node and look for the UUID; look for XID 79 (fallen off the "
        "bus) in dmesg; a DRA driver that publishes a GPU the host lost is stale: restart it",
    ),
    Reason.ECC_UNCORRECTABLE: ReasonInfo(
        "the GPU reports uncorrectable ECC memory errors",
        "take the node out of service; reset the GPU and re-test, RMA if errors return",
        action=RepairAction.RESET_GPU,
    ),
    Reason.ROW_REMAP_PENDING: ReasonInfo(
        "a memory row remap is pending and takes effect only after a GPU reset",
        "drain the node and reset the GPU (`nvidia-smi -r`) or reboot, then re-validate",
        action=RepairAction.RESET_GPU,
    ),
    Reason.ROW_REMAP_FAILED: ReasonInfo(
        "the GPU could not remap a failing memory row",
        "take the node out of service and RMA the GPU",
        action=RepairAction.REPLACE,
    ),
    Reason.XID_ERROR: ReasonInfo(
        "the driver reported a critical XID error during the run",
        "read `dmesg | grep -i xid`; XID 79/48/63/64/94/95 are hardware faults: drain and RMA",
        action=RepairAction.REBOOT,
    ),
    Reason.PERSISTENCE_MODE_OFF: ReasonInfo(
        "persistence mode is off, so every job pays the driver initialisation",
        "enable it with `nvidia-smi -pm 1` or the nvidia-persistenced service",
        Severity.WARNING,
    ),
    Reason.PCIE_LINK_DEGRADED: ReasonInfo(
        "the PCIe link runs below its maximum generation or width under load",
        "reseat the card or riser, check the slot and BIOS PCIe settings",
        action=RepairAction.REPLACE,
    ),
    Reason.ECC_AGGREGATE_UNCORRECTABLE: ReasonInfo(
        "the GPU's lifetime (aggregate) counters hold uncorrectable ECC errors from before its "
        "last reset",
        "compare with the row remapper (`nvidia-smi -q -d ROW_REMAPPER`): remapped rows are "
        "handled; errors that come back after a reset mean RMA",
        Severity.WARNING,
    ),
    Reason.ECC_CORRECTABLE_HIGH: ReasonInfo(
        "the GPU corrected more single-bit ECC errors since its last reset than the configured "
        "maximum",
        "watch the rate (`nvidia-smi -q -d ECC`); a climbing count precedes uncorrectable errors: "
        "plan an RMA",
        Severity.WARNING,
    ),
    Reason.ROW_REMAP_SPARES_LOW: ReasonInfo(
        "some memory banks of the GPU have few or no spare rows left for remapping",
        "the next failing row in such a bank cannot be remapped: plan to replace the GPU "
        "(`nvidia-smi -q -d ROW_REMAPPER` shows the histogram)",
        Severity.WARNING,
        action=RepairAction.REPLACE,
    ),
    Reason.RETIRED_PAGES_PENDING: ReasonInfo(
        "memory pages are marked for retirement and take effect only after a driver reload",
        "drain the node and reboot or reload the driver, then re-validate",
        action=RepairAction.REBOOT,
    ),
    Reason.RETIRED_PAGES_HIGH: ReasonInfo(
        "the GPU has retired more memory pages than the configured maximum (NVIDIA's RMA "
        "threshold is 60 double-bit pages)",
        "take the node out of service and RMA the GPU",
        action=RepairAction.REPLACE,
    ),
    Reason.KERNEL_XID_RESTART_APP: ReasonInfo(
        "the kernel log since boot holds an XID whose documented action is to restart the "
        "application (usually an application or CUDA fault, not the hardware)",
        "read the XID's lines in the report or `dmesg | grep -i xid`; if it repeats without an "
        "application fault, drain the node and contact support",
        Severity.WARNING,
        action=RepairAction.RESTART_APP,
    ),
    Reason.KERNEL_XID_RESET_GPU: ReasonInfo(
        "the kernel log since boot holds an XID whose documented action is to reset the GPU",
        "drain the node, reset the GPU (`nvidia-smi -r`) or reboot, then re-validate; RMA if the "
        "XID returns",
        action=RepairAction.RESET_GPU,
    ),
    Reason.KERNEL_XID_REBOOT: ReasonInfo(
        "the kernel log since boot holds an XID whose documented action is to reboot the machine "
        "(e.g. XID 79, the GPU fell off the bus)",
        "drain the node and reboot it (a cold boot where possible); check the PCIe slot, riser "
        "and power; RMA if the XID returns",
        action=RepairAction.REBOOT,
    ),
    Reason.KERNEL_XID_CONTACT_SUPPORT: ReasonInfo(
        "the kernel log since boot holds an XID whose documented action is to contact NVIDIA "
        "support (or that this agent's catalogue does not know)",
        "drain the node and collect `nvidia-bug-report.sh` for your vendor; the message names the "
        "XID and its mnemonic",
        action=RepairAction.REPLACE,
    ),
    Reason.KERNEL_LOG_UNREADABLE: ReasonInfo(
        "the kernel log could not be read, so XIDs since boot were not checked",
        "run the agent privileged (the default) or give it CAP_SYSLOG; the message names what "
        "was tried",
        Severity.WARNING,
    ),
    Reason.NVLINK_DOWN: ReasonInfo(
        "an NVLink of the GPU is not active although the model and topology have it",
        "check `nvidia-smi nvlink -s`, the fabric manager and the baseboard; reset the GPU, RMA "
        "the board if the link stays down",
        action=RepairAction.RESET_GPU,
    ),
    Reason.NVLINK_SPEED_LOW: ReasonInfo(
        "an NVLink runs slower than the GPU's other links",
        "check `nvidia-smi nvlink -s`; reset the GPU and re-validate, RMA the board if it stays "
        "slow",
        action=RepairAction.RESET_GPU,
    ),
    Reason.NVLINK_ERRORS: ReasonInfo(
        "an NVLink's error counters (CRC, replay, recovery) are above the configured maximum",
        "check `nvidia-smi nvlink -e`; counters that keep climbing point to a failing link or "
        "NVSwitch port",
        Severity.WARNING,
    ),
    Reason.PCIE_LINK_DOWNTRAINED: ReasonInfo(
        "the PCIe link trained below its maximum width (or generation while busy)",
        "reseat the card or riser, check the slot and the BIOS PCIe settings (`lspci -vv`: "
        "LnkSta against LnkCap)",
        action=RepairAction.REPLACE,
    ),
    Reason.PCIE_AER_UNCORRECTABLE: ReasonInfo(
        "the PCIe device reported fatal or non-fatal uncorrectable errors (AER)",
        "drain the node; check the slot, riser and cabling, and the kernel log for AER lines",
        action=RepairAction.REPLACE,
    ),
    Reason.PCIE_AER_CORRECTABLE: ReasonInfo(
        "the PCIe device reported more correctable errors (AER) than the configured maximum",
        "a marginal link: reseat the card or riser; watch whether the count grows under load",
        Severity.WARNING,
    ),
    Reason.CLOCKS_THROTTLED_AT_IDLE: ReasonInfo(
        "the GPU reports a hardware slowdown, thermal or power-brake reason while idle",
        "check `nvidia-smi -q -d PERFORMANCE`: a hardware slowdown at idle points to the power "
        "supply, an external power-brake signal or cooling",
        action=RepairAction.REPLACE,
    ),
    Reason.POWER_LIMIT_BELOW_DEFAULT: ReasonInfo(
        "the enforced power limit is below the configured fraction of the part's default limit",
        "check `nvidia-smi -q -d POWER`; restore it with `nvidia-smi -pl <default>` unless the "
        "cap is intended",
        Severity.WARNING,
    ),
    Reason.GPU_FABRIC_NOT_READY: ReasonInfo(
        "on an NVSwitch system the GPU's fabric registration is not complete or failed",
        "check the nvidia-fabricmanager service and `nvidia-smi -q | grep -A3 Fabric`; restart "
        "the fabric manager, then reset the GPUs",
        action=RepairAction.REBOOT,
    ),
    Reason.FABRIC_MANAGER_NOT_RUNNING: ReasonInfo(
        "the node has NVSwitches but no nvidia-fabricmanager process runs",
        "start it (`systemctl start nvidia-fabricmanager`) with the driver's matching version",
    ),
    Reason.IB_PORT_DOWN: ReasonInfo(
        "an InfiniBand/RoCE port is not ACTIVE or its physical link is not up",
        "check the cable and the switch port (`ibstat`), and the subnet manager for InfiniBand",
        action=RepairAction.REPLACE,
    ),
    Reason.IB_PORT_RATE_LOW: ReasonInfo(
        "an InfiniBand/RoCE port runs below the expected rate",
        "check the cable and transceiver type and the switch port's speed and width (`ibstat`)",
        action=RepairAction.REPLACE,
    ),
    Reason.IB_LINK_FLAPPING: ReasonInfo(
        "an InfiniBand/RoCE port lost its link more often than the configured maximum "
        "(link_downed)",
        "replace or reseat the cable or transceiver; check the switch port's error counters",
        action=RepairAction.REPLACE,
    ),
    Reason.IB_PORT_ERRORS: ReasonInfo(
        "an InfiniBand/RoCE port's error counters (symbol, receive, link recovery) are above the "
        "configured maximum",
        "a marginal cable or transceiver: check `perfquery`, reseat or replace it",
        Severity.WARNING,
    ),
    Reason.NIC_GPU_LOCALITY: ReasonInfo(
        "a GPU has no network adapter on its own NUMA node while the node has adapters",
        "check the PCIe placement of the NICs (`nvidia-smi topo -m`); GPUDirect RDMA across "
        "sockets is slow",
        Severity.WARNING,
    ),
    Reason.ERROR_COUNTERS_GREW: ReasonInfo(
        "a hardware error counter (ECC, NVLink, PCIe, InfiniBand) grew while a load check ran",
        "the named link or memory fails under load: drain the node and look at that part first "
        "(the message names the counter, its growth and the check)",
        action=RepairAction.REPLACE,
    ),
    Reason.DCGM_NOT_AVAILABLE: ReasonInfo(
        "DCGM diagnostics were asked for but DCGM is not installed or its host engine is not "
        "reachable: not run, no evidence against the node",
        "install DCGM (`dcgmi`, nv-hostengine) on the node, or set checks.dcgm.dcgmiPath and "
        "checks.dcgm.hostEngine to where they are",
        Severity.WARNING,
        Verdict.NOT_RUN,
    ),
    Reason.DCGM_MEMORY_ERROR: ReasonInfo(
        "DCGM diagnostics found a GPU memory fault",
        "drain the node; reset the GPU and re-run the diagnostic; RMA if it fails again",
        action=RepairAction.RESET_GPU,
    ),
    Reason.DCGM_INTERCONNECT_ERROR: ReasonInfo(
        "DCGM diagnostics found an NVLink, NVSwitch or PCIe fault",
        "check `nvidia-smi nvlink -s`, the fabric manager and the PCIe link; reseat, then RMA",
        action=RepairAction.REPLACE,
    ),
    Reason.DCGM_THERMAL_POWER_ERROR: ReasonInfo(
        "DCGM diagnostics found a thermal or power fault",
        "check fans, airflow, inlet temperature and the power supply; the node should not take "
        "work",
        action=RepairAction.REPLACE,
    ),
    Reason.DCGM_PERFORMANCE_ERROR: ReasonInfo(
        "DCGM diagnostics measured a GPU below its performance threshold or violating a limit",
        "compare clocks and throttle reasons with a healthy node; re-run the diagnostic",
    ),
    Reason.DCGM_SOFTWARE_ERROR: ReasonInfo(
        "DCGM diagnostics failed for a software, driver or CUDA reason on the node",
        "read the DCGM message in the report; check the driver, CUDA libraries and DCGM versions",
    ),
    Reason.DCGM_DIAG_FAILED: ReasonInfo(
        "DCGM diagnostics reported a failure of another kind, or dcgmi itself failed",
        "read the DCGM message in the report and `dcgmi diag` output on the node",
    ),
    Reason.MEMORY_MISCOMPARE: ReasonInfo(
        "a word of GPU memory read back differently from what was written (a bit flipped)",
        "drain the node; read the ECC and row-remap counters (`nvidia-smi -q -d "
        "ECC,ROW_REMAPPER`), reset the GPU and re-run `gpuval-agent run --checks memory`; RMA "
        "it if words still differ",
        action=RepairAction.RESET_GPU,
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
        action=RepairAction.REPLACE,
    ),
    Reason.BURN_NAN: ReasonInfo(
        "a burn result contained NaN or Inf",
        "the GPU computes wrong results: drain the node, check ECC counters and temperatures, RMA",
        action=RepairAction.REPLACE,
    ),
    Reason.BURN_FINGERPRINT_MISMATCH: ReasonInfo(
        "the GPU's burn reference result differs from its peers' with the same GPU model, matrix "
        "size, precision and library versions: it computes the same wrong answer every time "
        "(silent data corruption suspect)",
        "drain the node; re-run the burn and compare its fingerprint with a healthy node's; RMA "
        "the GPU if it still differs",
        action=RepairAction.REPLACE,
    ),
    Reason.THERMAL_SLOWDOWN: ReasonInfo(
        "the GPU throttled its clocks for temperature during the burn",
        "check fans, airflow and the inlet temperature; the node should not take work",
        action=RepairAction.REPLACE,
    ),
    Reason.OVER_TEMPERATURE: ReasonInfo(
        "the GPU exceeded the configured maximum temperature during the burn",
        "check fans, airflow and the inlet temperature; the node should not take work",
        action=RepairAction.REPLACE,
    ),
    Reason.POWER_CAPPED: ReasonInfo(
        "the GPU throttled for its power limit well below the part's default limit",
        "check the enforced limit (`nvidia-smi -q -d POWER`); raise it with `nvidia-smi -pl`",
    ),
    Reason.LOW_THROUGHPUT: ReasonInfo(
        "burn throughput was below the configured threshold",
        "look at clocks and throttle reasons in the report; compare with a healthy node",
    ),
    Reason.LOW_TRAINING_THROUGHPUT: ReasonInfo(
        "a GPU trained the check's transformer more slowly (tokens per second) than the "
        "configured minimum",
        "compare the node's burn, bandwidth and NCCL figures with a healthy node's: a slow "
        "training step with healthy figures points at clocks under load, the host (CPU, launch "
        "overhead) or the all-reduce; re-run `gpuval-agent run --checks train` alone to confirm",
    ),
    Reason.TRAINING_LOSS_NOT_FINITE: ReasonInfo(
        "the training step's loss became NaN or Inf on a GPU, with fixed seeds and inputs that "
        "train finitely on a healthy node",
        "the GPU computes wrong results: drain the node, run the burn and the memory test, check "
        "ECC counters and temperatures, RMA if it repeats",
        action=RepairAction.REPLACE,
    ),
    Reason.TRAINING_MISMATCH: ReasonInfo(
        "the node's training loss differs from its peers' at some step, with the same model, "
        "seeds and deterministic settings: same stack, not bit-identical (or, across stacks, "
        "beyond the stated tolerance)",
        "drain the node; re-run the training check and compare its losses with a healthy "
        "node's (the message names the first step that differs); run the burn and the memory "
        "test; RMA a GPU that keeps differing",
        action=RepairAction.REPLACE,
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
    Reason.FABRIC_SLOW_PAIR: ReasonInfo(
        "the all-reduce between this node and its one partner was slow, and neither was tested "
        "with another partner (a group of two): the link or either node, which cannot be told "
        "apart; no evidence against this node alone",
        "test the two nodes with other partners: a fabric.groupSize of 3 or more names the node "
        "or the link; meanwhile check both nodes' NICs and the cable between them",
        verdict=Verdict.NOT_RUN,
    ),
    Reason.FABRIC_SLOW_DOMAIN: ReasonInfo(
        "the network path out of a topology domain is slow: its representative was fine inside "
        "its domain and slow with every other domain's (listed in the validation's "
        "status.fabric.slowPaths; no node is blamed)",
        "check the domain's uplinks (leaf to spine) and their error counters; the message names "
        "the domain and the representative it was tested through",
    ),
    Reason.FABRIC_SLOW_PATH: ReasonInfo(
        "the network path between two topology domains is slow: their representatives were "
        "fine inside their domains and with other domains (listed in the validation's "
        "status.fabric.slowPaths; no node is blamed)",
        "check the switches and links between the two domains (the message names both and the "
        "representatives they were tested through)",
    ),
    Reason.FABRIC_TRAIN_SLOW_NODE: ReasonInfo(
        "the node was slow in every data-parallel training pair it took part in across nodes "
        "(fabric.train), with different partners, while its all-reduce pairs were not",
        "compare its own train check and burn figures with its peers'; a node that trains "
        "slowly only across nodes points at the host side of the step (CPU and NUMA placement, "
        "the PCIe path between its GPUs and NICs, GPUDirect RDMA off) or its GPUs under a real "
        "gradient pattern: read its fabric pod's log",
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
    Reason.BELOW_BASELINE: ReasonInfo(
        "a figure was below the baseline of its GPU stack (GpuBaseline: what healthy nodes of this "
        "GPU model, count, power limit and PCIe link measure) by more than the spec's fraction",
        "compare the node's clocks, power limit and throttle reasons with a healthy node's; when "
        "most nodes are below (the run says systemic), suspect the stack: driver, firmware, "
        "settings",
    ),
    Reason.DRIFT_FROM_HISTORY: ReasonInfo(
        "a figure fell against the node's own recent runs by more than the history's drift "
        "fraction (a slow decline the fleet median hides); a failure with history.action Fail",
        "plot the node's recent reports (kubectl gpuval report); look at clocks, temperatures, "
        "throttle reasons and cooling; plan maintenance before it fails",
        Severity.WARNING,
    ),
    Reason.CHECK_ERROR: ReasonInfo(
        "the check itself could not run",
        "read the check's message; re-run `gpuval-agent run` on the node to reproduce",
    ),
    Reason.NOT_APPLICABLE: ReasonInfo(
        "the check does not apply to the devices the agent was given (on MIG instances: NCCL, "
        "peer copies and the training step, which need GPU-to-GPU communication MIG does not "
        "provide, and DCGM's diagnostic, which does not run on MIG)",
        "nothing to do; validate the whole GPUs with MIG off (a maintenance window) to test them",
        Severity.WARNING,
        verdict=Verdict.NOT_RUN,
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
    Reason.AGENT_POD_REFUSED: ReasonInfo(
        "the API server refused the agent pod (Pod Security admission, an admission webhook or "
        "policy, a ResourceQuota): the cluster's configuration, not the node; it waits (report "
        "phase Waiting, no verdict) and is tested in the same run once a pod is admitted",
        "read the GpuValidation's AgentPodsRefused condition (it names the namespace and gives "
        "the API server's words); a quota that admits fewer pods than the wave only paces it; "
        "let the agents' namespace admit them (Pod Security `privileged`, or `baseline` with "
        "spec.agent.privileged and hostPID false), raise the quota or fix the webhook: the run "
        "tries again on its own and goes on once a pod is admitted",
        verdict=Verdict.NOT_RUN,
    ),
    Reason.NODE_GONE: ReasonInfo(
        "the node was deleted while its agent ran",
        "see who or what deleted the node (an autoscaler, a person); it is validated when it "
        "joins again",
    ),
    Reason.NODE_GONE_UNTESTED: ReasonInfo(
        "the node was deleted before its agent started: it was not tested",
        "nothing to do for gpuval; the node is validated when it comes back",
        verdict=Verdict.NOT_RUN,
    ),
    Reason.NODE_NOT_READY: ReasonInfo(
        "the node was NotReady (its kubelet stopped reporting, or reported a problem) for longer "
        "than the operator's grace period while its agent ran or waited: it was not tested, and "
        "a node's readiness is no evidence against its GPUs",
        "check the node's kubelet, container runtime and network (`kubectl describe node`); the "
        "validation tries the node again once it is Ready (spec.retry)",
        verdict=Verdict.NOT_RUN,
    ),
    Reason.AGENT_KILLED: ReasonInfo(
        "the agent process was killed from outside (SIGKILL or SIGTERM, not for its memory "
        "limit) before it wrote a verdict, and nothing it had measured was failing: the node was "
        "not tested",
        "see what killed it (the node's kernel log for the host OOM killer, `kubectl describe "
        "pod`, a person); the validation tries the node again, and that attempt's state check "
        "reads the kernel log since boot (an XID at the moment of death is named there)",
        verdict=Verdict.NOT_RUN,
    ),
    Reason.AGENT_PREEMPTED: ReasonInfo(
        "the agent pod was preempted for a pod of higher priority (spec.agent.priorityClassName "
        "lets validation yield to real work): the node was not tested",
        "nothing, if work should come first; the validation tries the node again (spec.retry) "
        "and its next run",
        verdict=Verdict.NOT_RUN,
    ),
    Reason.GPU_REPLICAS_HELD: ReasonInfo(
        "the node shares its GPUs (time-slicing replicas) and the agent pod, which asks for every "
        "replica so that no tenant shares a GPU while it is tested, could not be scheduled for "
        "the whole timeout: workloads held replicas, and the node was not tested",
        "nothing, if the workloads should run; the validation tries again (spec.retry) and in "
        "its next run, or drain the pods that hold nvidia.com/gpu on the node",
        verdict=Verdict.NOT_RUN,
    ),
    Reason.DEVICES_CLAIMED: ReasonInfo(
        "the agent pod asks, through a ResourceClaim (spec.agent.devices dra), for every device "
        "the node publishes, and the scheduler could not allocate them for the whole timeout: "
        "workloads' ResourceClaims held some (the message names them), and the node was not "
        "tested",
        "nothing, if the workloads should run; the validation tries again (spec.retry) and in "
        "its next run, or end the workloads whose claims the message names",
        verdict=Verdict.NOT_RUN,
    ),
    Reason.DEVICE_POOL_INCOMPLETE: ReasonInfo(
        "the agent pod asks, through a ResourceClaim (spec.agent.devices dra), for every device "
        "the node publishes, and for the whole timeout the node's pool was incomplete: fewer "
        "ResourceSlices of its latest generation were seen than its resourceSliceCount says (the "
        "message says which, of how many), and the scheduler allocates nothing from such a pool; "
        "the node was not tested",
        "a DRA driver rewriting its pool completes it within seconds: the validation tries again "
        "(spec.retry); if it stays incomplete, look at the driver's kubelet plugin on the node "
        "(its logs; `kubectl get resourceslices --field-selector spec.nodeName=<node>`)",
        verdict=Verdict.NOT_RUN,
    ),
    Reason.DEVICES_PUBLISHED_TWICE: ReasonInfo(
        "the node's GPUs are handed out twice: its device plugin advertises nvidia.com/gpu and the "
        "DRA driver publishes them in ResourceSlices; a ResourceClaim does not keep device-plugin "
        "pods off them, so the agent could not hold them alone and no agent pod was made: the "
        "node was not tested",
        "run one of the two on the node (NVIDIA's DRA driver is not meant to run beside the "
        "device plugin for the same GPUs): disable the device plugin there (e.g. the label "
        "nvidia.com/gpu.deploy.device-plugin=false under the GPU Operator), or validate it with "
        "spec.agent.devices devicePlugin",
        verdict=Verdict.NOT_RUN,
    ),
    Reason.GPU_SHARING_UNSUPPORTED: ReasonInfo(
        "the node's GPU sharing lets no pod hold a GPU alone (MPS gives each container one "
        "replica; time-slicing with failRequestsGreaterThanOne refuses more): the agent cannot "
        "test a GPU without a tenant beside it, so the node was not tested",
        "validate the node with a device-plugin configuration without sharing (e.g. the label "
        "nvidia.com/device-plugin.config naming one, in a maintenance window), or run "
        "`gpuval-agent run` on the machine while it takes no work",
        verdict=Verdict.NOT_RUN,
    ),
    Reason.TIMED_OUT: ReasonInfo(
        "the node's agent did not finish within the run's timeout",
        "read the agent pod's logs; a hang in NCCL or a wedged GPU are the usual causes",
        action=RepairAction.RESET_GPU,
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


def action_of(reason: Reason | str | None) -> RepairAction:
    """NVIDIA's documented action for a reason (None, or one outside the catalogue: NONE)."""
    try:
        return REASONS[Reason(reason)].action if reason is not None else RepairAction.NONE
    except ValueError:
        return RepairAction.NONE


def hint(reason: Reason) -> str:
    """The one-line fix hint of a reason."""
    return REASONS[reason].hint


# The findings of the state check: each one's catalogue severity is its default, and
# `spec.checks.state.actions` may make it fail, only warn, or be ignored (gpuval_api.checks).
STATE_REASONS: tuple[Reason, ...] = (
    Reason.ECC_UNCORRECTABLE,
    Reason.ECC_AGGREGATE_UNCORRECTABLE,
    Reason.ECC_CORRECTABLE_HIGH,
    Reason.ROW_REMAP_PENDING,
    Reason.ROW_REMAP_FAILED,
    Reason.ROW_REMAP_SPARES_LOW,
    Reason.RETIRED_PAGES_PENDING,
    Reason.RETIRED_PAGES_HIGH,
    Reason.KERNEL_XID_RESTART_APP,
    Reason.KERNEL_XID_RESET_GPU,
    Reason.KERNEL_XID_REBOOT,
    Reason.KERNEL_XID_CONTACT_SUPPORT,
    Reason.KERNEL_LOG_UNREADABLE,
    Reason.NVLINK_DOWN,
    Reason.NVLINK_SPEED_LOW,
    Reason.NVLINK_ERRORS,
    Reason.PCIE_LINK_DOWNTRAINED,
    Reason.PCIE_AER_UNCORRECTABLE,
    Reason.PCIE_AER_CORRECTABLE,
    Reason.CLOCKS_THROTTLED_AT_IDLE,
    Reason.POWER_LIMIT_BELOW_DEFAULT,
    Reason.GPU_FABRIC_NOT_READY,
    Reason.FABRIC_MANAGER_NOT_RUNNING,
    Reason.IB_PORT_DOWN,
    Reason.IB_PORT_RATE_LOW,
    Reason.IB_LINK_FLAPPING,
    Reason.IB_PORT_ERRORS,
    Reason.NIC_GPU_LOCALITY,
    Reason.ERROR_COUNTERS_GREW,
)
