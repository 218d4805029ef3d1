"""NVIDIA DCGM diagnostics where a node has DCGM: the parser of `dcgmi diag -j` (pure) and the
runner of dcgmi (checks/dcgm.py is the check)."""
