"""Kept so that imports from before the move keep working: a node's figures against a baseline,
as the result document records them, are `gpuval_api.baselinecomparison`, below the result
document that holds them (this package's rules read results, so they sit above it). New code
imports from there."""

from gpuval_api.baselinecomparison import (
    BaselineComparison,
    FigureRatio,
    Match,
)

__all__ = [
    "BaselineComparison",
    "FigureRatio",
    "Match",
]
