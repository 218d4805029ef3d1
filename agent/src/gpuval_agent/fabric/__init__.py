"""`gpuval-agent fabric`: NCCL all-reduce across nodes, and which node or link is slow.

One agent per node, the same command on every node (by hand: `--rank --world --master`; in a pod:
`--cluster`, from the GPUVAL_FABRIC_* variables). The agents meet at rank 0's coordinator
(coordinator.py, plain TCP), run the phases together (driver.py) through an executor that measures
(torchfabric.py over backends/rankprocess.py: one rank process per GPU; simulated.py: the test
double), and each concludes its own node's verdict from the group's evidence (analysis.py).
"""
