"""gpuval agent: validates one machine's GPUs, standalone (`gpuval-agent run`) or in a cluster."""

__version__ = "0.1.0"
