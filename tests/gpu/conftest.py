"""GPU tests: the agent's real backend on NVIDIA GPUs. Skipped where torch or a GPU is missing."""

from __future__ import annotations

import os

import pytest

# NVLink multicast stays off on the shared H200 hosts; NVML and CUDA number GPUs alike.
SAFE_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
    "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
}
for _key, _value in SAFE_ENV.items():
    os.environ.setdefault(_key, _value)


def _gpu_count() -> int:
    try:
        import torch  # noqa: PLC0415 - optional: absent on CPU machines

        return int(torch.cuda.device_count())
    except ImportError:
        return 0


GPUS = _gpu_count()


# Modules whose tests hold CUDA in the test process itself (torch keeps its contexts and cached
# memory until the process ends). They run last: an agent a later test starts would rightly see
# this process on its GPUs and leave them untested (GpuInUse).
IN_PROCESS_CUDA = ("test_gpu_burn.py", "test_gpu_memory.py", "test_gpu_state.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip = pytest.mark.skip(reason="needs torch and an NVIDIA GPU")
    for item in items:
        if "gpu" in item.keywords and GPUS == 0:
            item.add_marker(skip)
    items.sort(key=lambda item: item.path.name in IN_PROCESS_CUDA)
