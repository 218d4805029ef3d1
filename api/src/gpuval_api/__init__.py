"""gpuval shared types: the CRDs and the agent's result document."""
