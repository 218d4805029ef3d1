"""Pure: the figures an agent result (or a fabric result) holds, named as a baseline names them,
and the key that says which baseline they compare with.

One `Sample` is one measured value: a GPU's burn in one precision or its copy bandwidth, an
ordered GPU pair's peer copy, the node's all-reduce busbw at one size, a pair of nodes' fabric
busbw. Only what was measured is a sample (a crashed GPU's zero is not).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from gpuval_api.baselinemodel import BaselineKey, StackVersions, Unit
from gpuval_api.checks import CheckName, Precision
from gpuval_api.fabric import FABRIC_CHECK, FabricPair
from gpuval_api.result import (
    AgentResult,
    CheckResult,
    Environment,
    GpuCheckResult,
    Metric,
    untested_gpus,
)

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
# All-reduces below 1 MiB are latency, not bandwidth: not kept. Below 1 GiB they are kept and
# drawn but not judged, as nccl.minBusbwGBps applies its fraction from 1 GiB up.
MIN_NCCL_BYTES = MIB
JUDGED_NCCL_BYTES = GIB

H2D, D2H, DEVICE_COPY, P2P, FABRIC_PAIR = "h2d", "d2h", "deviceCopy", "p2p", "fabric.pair"
_COPIES = ((Metric.H2D, H2D), (Metric.D2H, D2H), (Metric.DEVICE_COPY, DEVICE_COPY))


class Scope(StrEnum):
    GPU = "gpu"  # one GPU's figure: compares across GPU counts of one model and power limit
    NODE = "node"  # the node's GPUs together: same GPU count only
    FABRIC = "fabric"  # between nodes: same transport and pair size only


@dataclass(frozen=True, slots=True)
class Sample:
    """One measured value of one figure."""

    figure: str
    value: float
    measured_with: str = ""
    gpu: int | None = None  # the GPU, or a pair's source GPU
    peer: int | None = None  # a pair's destination GPU
    peer_node: str | None = None  # a fabric pair's other node

    def where(self) -> str:
        """'GPU 3', 'GPU 0 -> GPU 1', 'with gpu-node-7', or '' for a node figure."""
        if self.peer_node is not None:
            return f"with {self.peer_node}"
        if self.gpu is not None and self.peer is not None:
            return f"GPU {self.gpu} -> GPU {self.peer}"
        return f"GPU {self.gpu}" if self.gpu is not None else ""


def burn_figure(precision: str) -> str:
    return f"burn.{precision}"


def nccl_figure(nbytes: int) -> str:
    """nccl.1MiB, nccl.4GiB; a size that is not a whole KiB/MiB/GiB keeps its bytes."""
    for unit, name in ((GIB, "GiB"), (MIB, "MiB"), (KIB, "KiB")):
        if nbytes % unit == 0:
            return f"nccl.{nbytes // unit}{name}"
    return f"nccl.{nbytes}B"


def nccl_bytes(figure: str) -> int:
    """The message size of an nccl.<size> figure."""
    size = figure.removeprefix("nccl.")
    for name, unit in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB), ("B", 1)):
        if size.endswith(name):
            return int(size.removesuffix(name)) * unit
    raise ValueError(f"{figure!r} is not an nccl.<size> figure")


def scope(figure: str) -> Scope:
    if figure == FABRIC_PAIR:
        return Scope.FABRIC
    if figure == P2P or figure.startswith("nccl."):
        return Scope.NODE
    return Scope.GPU


def unit(figure: str) -> Unit:
    return Unit.TFLOPS if figure.startswith("burn.") else Unit.GBPS


def check_of(figure: str) -> str:
    """The check that measures the figure (where a BelowBaseline finding is listed)."""
    if figure.startswith("burn."):
        return str(CheckName.BURN)
    if figure.startswith("nccl."):
        return str(CheckName.NCCL)
    return FABRIC_CHECK if figure == FABRIC_PAIR else str(CheckName.BANDWIDTH)


def judged(figure: str) -> bool:
    """Whether BelowBaseline applies (small all-reduces are kept and drawn, not judged)."""
    return not figure.startswith("nccl.") or nccl_bytes(figure) >= JUDGED_NCCL_BYTES


def order(figure: str) -> tuple[int, int]:
    """Reading order: burn by precision, copies, peer, NCCL by size, fabric."""
    if figure.startswith("burn."):
        names = [str(p) for p in Precision]
        precision = figure.removeprefix("burn.")
        return (0, names.index(precision) if precision in names else len(names))
    fixed = {H2D: 1, D2H: 2, DEVICE_COPY: 3, P2P: 4, FABRIC_PAIR: 6}
    if figure in fixed:
        return (fixed[figure], 0)
    return (5, nccl_bytes(figure))


def result_samples(result: AgentResult) -> list[Sample]:
    """Every figure the result's burn, bandwidth and NCCL checks measured on GPUs they tested (a
    GPU another process used, GpuInUse, is no evidence against a baseline)."""
    config = result.checks_config
    samples: list[Sample] = []
    burn = result.check(CheckName.BURN)
    matrix = f"matrixSize={config.burn.matrix_size}"
    for gpu in _tested(burn):
        for key, tflops in gpu.metrics.items():
            if key.startswith(f"{Metric.TFLOPS}.") and tflops > 0:
                precision = key.removeprefix(f"{Metric.TFLOPS}.")
                samples.append(Sample(burn_figure(precision), tflops, matrix, gpu.index))
    bandwidth = result.check(CheckName.BANDWIDTH)
    transfer = f"transferMiB={config.bandwidth.transfer_mib}"
    for gpu in _tested(bandwidth):
        for metric, figure in _COPIES:
            value = gpu.metrics.get(metric)
            if value is not None and value > 0:
                samples.append(Sample(figure, value, transfer, gpu.index))
    untested = untested_gpus(bandwidth) if bandwidth else set()
    for pair in bandwidth.pairs if bandwidth else []:
        if pair.gbps is not None and pair.gbps > 0 and not {pair.src, pair.dst} & untested:
            samples.append(Sample(P2P, pair.gbps, transfer, pair.src, pair.dst))
    nccl = result.check(CheckName.NCCL)
    for size in nccl.nccl_sizes if nccl and not untested_gpus(nccl) else []:
        if size.bytes >= MIN_NCCL_BYTES and size.busbw_gbps > 0:
            samples.append(Sample(nccl_figure(size.bytes), size.busbw_gbps))
    return samples


def _tested(check: CheckResult | None) -> list[GpuCheckResult]:
    if check is None:
        return []
    untested = untested_gpus(check)
    return [gpu for gpu in check.gpus if gpu.index not in untested]


def fabric_samples(node: str, pairs: Iterable[FabricPair], transport: str) -> list[Sample]:
    """The node's pair all-reduces (the pair rounds; confirmations repeat a pair) with the node
    at one end."""
    samples = []
    for pair in pairs:
        if pair.round >= 1 and node in (pair.a, pair.b) and pair.busbw_gbps:
            other = pair.b if pair.a == node else pair.a
            measured = f"pairBytes={pair.bytes},transport={transport}"
            samples.append(Sample(FABRIC_PAIR, pair.busbw_gbps, measured, peer_node=other))
    return samples


def _one(values: Iterable[object]) -> object | None:
    distinct = {v for v in values}
    return distinct.pop() if len(distinct) == 1 else None


def node_key(environment: Environment) -> tuple[BaselineKey | None, str]:
    """The key of a node, or None and why it has none (no GPU, mixed models or power limits)."""
    gpus = environment.gpus
    if not gpus:
        return None, "no GPU was found"
    product = _one(g.name for g in gpus)
    if not isinstance(product, str) or not product:
        return None, "its GPUs are of different models (or unnamed)"
    power = _one(round(g.power_limit_watts) for g in gpus if g.power_limit_watts is not None)
    if not isinstance(power, int) or power < 1:
        return None, "its GPUs' power limits differ or are unknown"
    links = {
        f"gen{g.pcie.max_gen}x{g.pcie.max_width}"
        if g.pcie.max_gen is not None and g.pcie.max_width is not None
        else "unknown"
        for g in gpus
    }
    link = links.pop() if len(links) == 1 else "unknown"
    count = environment.gpu_count or len(gpus)
    key = BaselineKey(gpu_product=product, gpu_count=count, power_limit_watts=power, pcie_link=link)
    return key, ""


def stack_versions(environments: Iterable[Environment]) -> StackVersions:
    """The distinct driver, CUDA, NCCL and torch versions of the environments."""
    found: dict[str, set[str]] = {"driver": set(), "cuda": set(), "nccl": set(), "torch": set()}
    for env in environments:
        for name, value in (
            ("driver", env.driver_version),
            ("cuda", env.cuda_driver_version),
            ("nccl", env.nccl_version),
            ("torch", env.torch_version),
        ):
            if value:
                found[name].add(value)

    def joined(name: str) -> str | None:
        return ", ".join(sorted(found[name]))[:256] or None

    return StackVersions(
        driver_version=joined("driver"),
        cuda_driver_version=joined("cuda"),
        nccl_version=joined("nccl"),
        torch_version=joined("torch"),
    )
