"""A run of one GpuValidation: the state the operator keeps of it (`state.RunState`, one home), the
facts of its reports (a pod's: gpuval_operator.podfacts), the pure decisions about it (lifecycle,
roll-up into the status, uniformity, burn fingerprints) and the API calls made on its behalf
(effects)."""
