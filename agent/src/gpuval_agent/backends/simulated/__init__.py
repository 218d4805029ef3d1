"""The simulated backend: a TEST DOUBLE that pretends to be a GPU node and measures nothing
(docs/contracts.md, "Simulated backend"), kept apart from the real backends beside it.

- `backend`: `SimulatedBackend`, chosen only by name (`--backend simulated`, never a fallback);
- `config`: what it pretends to have and the faults it plays (GPUVAL_SIMULATE / --simulate);
- `units`: the GPUs, or the MIG devices, it tests;
- `hardware`: the node's hardware state (NVML answers and a host tree) for the state check;
- `burn`, `memory`, `train`: its burn of one GPU (numpy, really verified), its memory test and
  its training step;
- `foreign`: other processes on its GPUs, as NVML would list them.

It sits inside `backends` rather than beside it: `backends.select_backend` chooses it by name and
it implements `backends.base.Backend`, so a package of its own would make a circle with
`backends`. The fabric's double (gpuval_agent.fabric.simulated) reads `config` and `foreign`.
"""
