"""gpuval development tools: the local control plane built from Go modules, the demo."""
