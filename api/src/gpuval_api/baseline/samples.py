"""Pure: the samples an agent result (or a fabric result) holds of the registry's baselined
figures (gpuval_api.figures), named as a baseline names them, and the key that says which
baseline they compare with.

One `Sample` is one measured value: a GPU's burn in one precision or its copy bandwidth, an
ordered GPU pair's peer copy, the node's all-reduce busbw at one size, a pair of nodes' fabric
busbw. Only what was measured is a sample (a crashed GPU's zero is not; a zero of a figure where
lower is better, a count none happened of, is).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpuval_api import figureread, mig
from gpuval_api import figures as registry
from gpuval_api.baselinemodel import BaselineKey, StackVersions
from gpuval_api.fabric import FabricPair
from gpuval_api.figures import FABRIC_PAIR, PerPrecision, PerSize
from gpuval_api.result import AgentResult, Environment


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


def result_samples(result: AgentResult) -> list[Sample]:
    """Every baselined figure the result's checks measured on GPUs they tested (a GPU another
    process used, GpuInUse, is no evidence against a baseline)."""
    samples: list[Sample] = []
    for figure in registry.baselined():
        measured_with = figure.settings(result.checks_config) if figure.settings else ""
        read = figure.read
        for value in figureread.values(figure, result):
            if value.value < 0 or (value.value == 0 and not figure.lower):
                continue  # a crashed GPU's 0; where lower is better 0 is the best measured
            if isinstance(read, PerPrecision) and value.precision is None:
                continue  # the first precision's figure again, under its own name too
            if isinstance(read, PerSize) and (value.nbytes or 0) < read.min_bytes:
                continue
            name = figure.baseline_name(value.precision, value.nbytes)
            if name is not None:
                samples.append(Sample(name, value.value, measured_with, value.gpu, value.peer))
    return samples


def fabric_samples(node: str, pairs: Iterable[FabricPair], transport: str) -> list[Sample]:
    """The node's pair all-reduces (the pair rounds; confirmations repeat a pair) with the node
    at one end."""
    samples = []
    for pair in pairs:
        if pair.round >= 1 and node in (pair.a, pair.b) and pair.busbw_gbps:
            other = pair.b if pair.a == node else pair.a
            measured = f"pairBytes={pair.bytes},transport={transport}"
            samples.append(Sample(FABRIC_PAIR.baseline, pair.busbw_gbps, measured, peer_node=other))
    return samples


def _one(values: Iterable[object]) -> object | None:
    distinct = {v for v in values}
    return distinct.pop() if len(distinct) == 1 else None


def node_key(environment: Environment) -> tuple[BaselineKey | None, str]:
    """The key of a node, or None and why it has none (no GPU, mixed models or power limits)."""
    gpus = environment.gpus
    if not gpus:
        return None, "no GPU was found"
    # A MIG instance's figures are its profile's, never a whole GPU's: the key names it.
    product = _one(
        mig.key_product(g.name, g.mig.profile) if g.mig is not None and g.name else g.name
        for g in gpus
    )
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
