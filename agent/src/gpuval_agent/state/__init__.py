"""The hardware state at rest: what NVML, sysfs and the kernel log say about every GPU and network
port, read before the load checks and again after each (checks/state.py judges it).

model: the readings; read: one reading; sysfs and kernellog: the host side (read through a root
path, so tests feed recorded trees); xids: NVIDIA's XID catalogue; judge and hostjudge: pure
decisions (findings); counters: the error counters compared before and after the load checks.
"""
