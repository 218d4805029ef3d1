"""Copy bandwidth on torch: pinned host<->device through the copy engines, device-local, peer.

Every figure is bytes moved once per second (10^9 bytes = 1 GB), timed with CUDA events around
`iterations` back-to-back copies after one untimed warm-up copy, as nvbandwidth counts them.
"""

from __future__ import annotations

import torch  # type: ignore[import-not-found,unused-ignore]

from gpuval_api.figures import H2D

_host_buffers: dict[tuple[int, int], torch.Tensor] = {}


def _pinned(gpu: int, nbytes: int) -> torch.Tensor:
    # Pinning a GiB takes a noticeable fraction of a second: keep one buffer per GPU and size.
    key = (gpu, nbytes)
    if key not in _host_buffers:
        _host_buffers[key] = torch.empty(nbytes, dtype=torch.uint8).pin_memory()
    return _host_buffers[key]


def release() -> None:
    _host_buffers.clear()
    torch.cuda.empty_cache()


def host_device(direction: str, gpus: list[int], nbytes: int, iterations: int) -> dict[int, float]:
    """GB/s per GPU, all `gpus` copying at once (each on its own stream)."""
    plan = []
    for gpu in gpus:
        device = torch.device("cuda", gpu)
        stream = torch.cuda.Stream(device)
        host = _pinned(gpu, nbytes)
        dev = torch.empty(nbytes, dtype=torch.uint8, device=device)
        src, dst = (host, dev) if direction == H2D.id else (dev, host)
        with torch.cuda.stream(stream):
            dst.copy_(src, non_blocking=True)
        plan.append((gpu, stream, src, dst))
    for _, stream, _, _ in plan:
        stream.synchronize()
    timings = []
    for gpu, stream, src, dst in plan:
        with torch.cuda.device(gpu), torch.cuda.stream(stream):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iterations):
                dst.copy_(src, non_blocking=True)
            end.record()
        timings.append((gpu, start, end))
    figures = {}
    for gpu, start, end in timings:
        end.synchronize()
        figures[gpu] = nbytes * iterations / (start.elapsed_time(end) / 1000) / 1e9
    return figures


def device_local(gpu: int, nbytes: int, iterations: int) -> float:
    device = torch.device("cuda", gpu)
    with torch.cuda.device(device):
        src = torch.empty(nbytes, dtype=torch.uint8, device=device)
        dst = torch.empty_like(src)
        dst.copy_(src)
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iterations):
            dst.copy_(src)
        end.record()
        end.synchronize()
        seconds: float = start.elapsed_time(end) / 1000
        return nbytes * iterations / seconds / 1e9


def peer_access(src: int, dst: int) -> bool:
    return bool(torch.cuda.can_device_access_peer(src, dst))


def peer(src: int, dst: int, nbytes: int, iterations: int) -> float:
    """GB/s from GPU `src` to GPU `dst`; torch issues a peer copy on the source's current stream."""
    source = torch.empty(nbytes, dtype=torch.uint8, device=torch.device("cuda", src))
    target = torch.empty(nbytes, dtype=torch.uint8, device=torch.device("cuda", dst))
    with torch.cuda.device(src):
        target.copy_(source)
        torch.cuda.synchronize(dst)
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iterations):
            target.copy_(source)
        end.record()
        end.synchronize()
        torch.cuda.synchronize(dst)
        elapsed: float = start.elapsed_time(end) / 1000
        return nbytes * iterations / elapsed / 1e9
