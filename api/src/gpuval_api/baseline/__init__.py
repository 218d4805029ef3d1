"""Baselines and history: judge a node against what its GPU stack should do and against its own
past (issue 18; docs/operator/baselines.md, "Baselines and history").

- `figures`: which figures a result holds, and the key that makes them comparable (pure);
- `learn`: a baseline from a run's passing nodes, SuperBench's way (pure);
- `rules`: a result against a baseline (BelowBaseline) and a fleet below its baseline (pure);
- `history`: a node's last runs' key figures and DriftFromHistory (pure);
- `files`: a baseline as a YAML file (export, import, the ones shipped in this package);
- `shippedgen`: how the shipped H200 baseline is made from benchmarks/results (make generate).

The types these rules read and write sit below the CRDs and the result document that hold them:
`gpuval_api.baselinemodel` (a GpuBaseline's spec, `spec.baseline`, the history entry; `model` here
still names them) and `gpuval_api.baselinecomparison` (a result's comparison; `comparison` here).
Nothing here calls the Kubernetes API.
"""
