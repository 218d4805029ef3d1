"""gpuval agent: validates the GPUs of one machine, standalone or in a cluster."""
