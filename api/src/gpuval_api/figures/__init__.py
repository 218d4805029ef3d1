"""The figure registry: every measured figure is declared here once, and every table that names
figures is derived from it (docs/contracts.md, "Adding a figure").

A `Figure` says which check measures it and where its values sit in the agent's result document
(`read`), its id and unit (from which its summary key, CRD field, history key and Prometheus name
are spelled), its label, whether higher or lower is better, its baseline name, and where it is
shown. Derived from here: the report summary (`gpuval_api.report.build_summary`) and the CRD's
`status.summary` and `spec.history` fields and printer columns, the pages' figures
(`gpuval_api.views`, `gpuval_api.machine`), the baselines' figure names, units, scopes and
samples (`gpuval_api.baseline`), the node history and DriftFromHistory, the operator's
Prometheus series, the Grafana dashboard and the docs' metrics table.

Pure data, in three modules: what a figure is (`kinds`), the registry and its questions
(`registry`), and the figures gpuval measures (`declared`), each imported from here; and the CRD
models' figure fields made from the registry (`model`, imported from there). How a `read`
is applied to a result document is `gpuval_api.figureread`'s.
"""

from gpuval_api.figures.declared import (
    BURN,
    D2H,
    DEVICE_COPY,
    FABRIC_PAIR,
    H2D,
    MAX_TEMPERATURE,
    NCCL_BUSBW,
    P2P,
    TRAIN_MFU,
    TRAIN_TOKENS,
)
from gpuval_api.figures.kinds import (
    FABRIC,
    GIB,
    KIB,
    MIB,
    SPELLINGS,
    Better,
    FabricPairs,
    Figure,
    GpuPairs,
    NodeMetric,
    PerGpu,
    PerPrecision,
    PerSize,
    Read,
    Scope,
    Shown,
    Unit,
    UnitSpelling,
    Worst,
    size_bytes,
    size_name,
)
from gpuval_api.figures.registry import (
    RegistryError,
    all_figures,
    baseline_check,
    baseline_judged,
    baseline_names_text,
    baseline_order,
    baseline_pattern,
    baseline_scope,
    baseline_unit,
    baseline_units,
    baselined,
    by_key,
    declare,
    history_figures,
    largest_value,
    of_baseline,
    page_figures,
    summary_figures,
)

__all__ = [
    "BURN",
    "D2H",
    "DEVICE_COPY",
    "FABRIC",
    "FABRIC_PAIR",
    "GIB",
    "H2D",
    "KIB",
    "MAX_TEMPERATURE",
    "MIB",
    "NCCL_BUSBW",
    "P2P",
    "SPELLINGS",
    "TRAIN_MFU",
    "TRAIN_TOKENS",
    "Better",
    "FabricPairs",
    "Figure",
    "GpuPairs",
    "NodeMetric",
    "PerGpu",
    "PerPrecision",
    "PerSize",
    "Read",
    "RegistryError",
    "Scope",
    "Shown",
    "Unit",
    "UnitSpelling",
    "Worst",
    "all_figures",
    "baseline_check",
    "baseline_judged",
    "baseline_names_text",
    "baseline_order",
    "baseline_pattern",
    "baseline_scope",
    "baseline_unit",
    "baseline_units",
    "baselined",
    "by_key",
    "declare",
    "history_figures",
    "largest_value",
    "of_baseline",
    "page_figures",
    "size_bytes",
    "size_name",
    "summary_figures",
]
