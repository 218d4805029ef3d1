"""Baselines and history: judge a node against what its GPU stack should do and against its own
past (issue 18; docs/operator/baselines.md, "Baselines and history").

- `samples`: the samples a result holds of the baselined figures, and the key that makes them
  comparable (pure);
- `learn`, `pool`, `modes`: a baseline from a run's passing nodes, SuperBench's way: the rounds of
  learning and a stack whose passing nodes are of two kinds (pure);
- `rules`: a result against a baseline (BelowBaseline) and a fleet below its baseline (pure);
- `history`: a node's last runs' key figures and DriftFromHistory (pure);
- `fleet`: the above over a run's GpuNodeReports, for the operator and `kubectl gpuval` (pure);
- `bands`: a baseline as the pages draw it (pure);
- `files`: a baseline as a YAML file (export, import, the ones shipped in this package);
- `shippedgen`: how the shipped baselines are made from benchmarks/results (make generate).

The types these rules read and write sit below the CRDs and the result document that hold them,
and so outside this package (the result document imports them, and this package imports the
result document): `gpuval_api.baselinemodel` (a GpuBaseline's spec, `spec.baseline`, the history
entry) and `gpuval_api.baselinecomparison` (a result's comparison with its baseline).
Nothing here calls the Kubernetes API.
"""
