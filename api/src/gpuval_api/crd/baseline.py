"""The GpuBaseline kind: what healthy nodes of one GPU stack measure (its spec's types and the
rules that use them: gpuval_api.baseline)."""

from __future__ import annotations

from gpuval_api.baselinemodel import GpuBaselineSpec
from gpuval_api.crd.common import API_VERSION, BASELINE_KIND, CrdModel, ObjectMeta


class GpuBaseline(CrdModel):
    """What healthy nodes of one GPU stack (GPU model, count, power limit, PCIe link) measure,
    figure by figure: learned from a run's passing nodes, written by hand, or shipped with gpuval
    for a model measured with its own benchmark; exported and imported as a YAML file."""

    api_version: str = API_VERSION
    kind: str = BASELINE_KIND
    metadata: ObjectMeta
    spec: GpuBaselineSpec
