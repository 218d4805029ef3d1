"""Copy bandwidth: host<->device (pinned), device-local, every peer pair; alone and all at once."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from gpuval_agent.checks.common import CheckBuilder, CheckContext, scaled_note
from gpuval_agent.telemetry import GpuWindow
from gpuval_api import Reason
from gpuval_api.checks import Threshold
from gpuval_api.figures import D2H, DEVICE_COPY, H2D, P2P
from gpuval_api.result import CheckResult, PairResult, PcieLink

_MIB = 1 << 20


def _below(
    builder: CheckBuilder,
    *,
    what: str,
    field: str,
    gbps: float,
    threshold: Threshold,
    expected: float | None,
    gpu: int,
    peer: int | None = None,
    share: float = 1.0,
) -> None:
    """`share`: of a MIG instance, its share of the whole GPU the absolute minimum is for."""
    minimum = threshold.minimum(expected, share)
    if minimum is not None and gbps < minimum:
        why = scaled_note(threshold.absolute, share)
        builder.add(
            Reason.LOW_BANDWIDTH,
            f"{what}: {gbps:.1f} GB/s, below the minimum {minimum:.1f} (bandwidth.{field}{why})",
            gpu=gpu,
            peer=peer,
        )


@contextmanager
def _polling(context: CheckContext, interval: float = 0.02) -> Iterator[None]:
    """Sample telemetry often while a short transfer runs, so the link state under load is seen."""
    done = threading.Event()

    def poll() -> None:
        while not done.wait(interval):
            context.sampler.sample_now()

    thread = threading.Thread(target=poll, name="link-poll", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


class _Steps:
    """The check's progress: one step per transfer measured."""

    def __init__(self, context: CheckContext, gpus: list[int]) -> None:
        config = context.config.bandwidth
        self.reporter, self.done = context.reporter, 0
        self.total = len(gpus) * 3 + (2 if config.concurrent and len(gpus) > 1 else 0)
        self.total += len(gpus) * (len(gpus) - 1) if config.peer and not context.on_mig else 0

    def __call__(self, detail: str) -> None:
        self.reporter.check_progress("bandwidth", self.done / max(self.total, 1), detail)
        self.done += 1


def run_bandwidth(context: CheckContext) -> CheckResult:
    builder = CheckBuilder("bandwidth", context)
    config = context.config.bandwidth
    gpus = context.usable_gpus
    context.note_excluded(builder)
    step = _Steps(context, gpus)
    for gpu in gpus:
        _one_gpu(context, builder, gpu, step)
    if config.concurrent and len(gpus) > 1:
        _all_at_once(context, builder, gpus, step)
    if config.peer and context.on_mig and len(gpus) > 1:
        # MIG gives an instance no peer access to another (no CUDA IPC, no NVLink between them).
        builder.add(
            Reason.NOT_APPLICABLE,
            f"peer copies not applicable: the {len(gpus)} units are MIG instances, which have no "
            "peer access to each other",
        )
    elif config.peer:
        _peers(context, builder, gpus, step)
    if builder.failed:
        return builder.finish()
    worst = {
        key: min(builder.gpu_metrics(g).get(key, 0.0) for g in gpus)
        for key in (H2D.metric, D2H.metric, DEVICE_COPY.metric)
    }
    p2p = [p.gbps for p in builder.pairs if p.gbps is not None]
    message = (
        f"worst GB/s: {H2D.id} {worst[H2D.metric]:.1f}, {D2H.id} {worst[D2H.metric]:.1f}, device "
        f"{worst[DEVICE_COPY.metric]:.0f}" + (f", {P2P.id} {min(p2p):.1f}" if p2p else "")
    )
    return builder.finish(message=message)


def _one_gpu(context: CheckContext, builder: CheckBuilder, gpu: int, step: _Steps) -> None:
    """Host->device, device->host and device-local copy of one GPU alone, and its PCIe link."""
    config, part, backend = context.config.bandwidth, context.part_for(gpu), context.backend
    share, unit = context.share_for(gpu), context.unit(gpu)
    nbytes = config.transfer_mib * _MIB
    step(f"{context.unit(gpu)} host->device")
    with context.sampler.window() as window, _polling(context):
        h2d = backend.host_device_bandwidth(H2D.id, [gpu], nbytes, config.iterations)[gpu]
    step(f"{context.unit(gpu)} device->host")
    d2h = backend.host_device_bandwidth(D2H.id, [gpu], nbytes, config.iterations)[gpu]
    step(f"{context.unit(gpu)} device copy")
    local = backend.device_copy_bandwidth(gpu, nbytes, config.iterations)
    builder.gpu_metric(gpu, H2D.metric, h2d)
    builder.gpu_metric(gpu, D2H.metric, d2h)
    builder.gpu_metric(gpu, DEVICE_COPY.metric, local)
    _below(
        builder,
        what=f"{unit} host->device",
        field=H2D.threshold,
        gbps=h2d,
        threshold=config.min_h2d_gbps,
        expected=part.h2d_gbps,
        gpu=gpu,
        share=share.compute,
    )
    _below(
        builder,
        what=f"{unit} device->host",
        field=D2H.threshold,
        gbps=d2h,
        threshold=config.min_d2h_gbps,
        expected=part.d2h_gbps,
        gpu=gpu,
        share=share.compute,
    )
    _below(
        builder,
        what=f"{unit} device-local copy",
        field=DEVICE_COPY.threshold,
        gbps=local,
        threshold=config.min_device_copy_gbps,
        expected=part.device_copy_gbps,
        gpu=gpu,
        share=share.memory,
    )
    # The link is read while the host->device copy loads it: idle links drop their generation.
    info = next(g for g in context.environment.gpus if g.index == gpu)
    _link_under_load(builder, gpu, window.gpu(gpu), info.pcie)


def _link_under_load(builder: CheckBuilder, gpu: int, seen: GpuWindow, link: PcieLink) -> None:
    builder.gpu_metric(gpu, "pcieGenUnderLoad", seen.max_pcie_gen)
    builder.gpu_metric(gpu, "pcieWidthUnderLoad", seen.max_pcie_width)
    degraded = []
    if seen.max_pcie_gen is not None and link.max_gen and seen.max_pcie_gen < link.max_gen:
        degraded.append(f"generation {seen.max_pcie_gen} of {link.max_gen}")
    if seen.max_pcie_width is not None and link.max_width and seen.max_pcie_width < link.max_width:
        degraded.append(f"width x{seen.max_pcie_width} of x{link.max_width}")
    if degraded:
        builder.add(
            Reason.PCIE_LINK_DEGRADED,
            f"GPU {gpu}: PCIe link under load runs at {' and '.join(degraded)}",
            gpu=gpu,
        )


def _all_at_once(
    context: CheckContext, builder: CheckBuilder, gpus: list[int], step: _Steps
) -> None:
    """Host<->device with every GPU copying at once: a shared PCIe switch or root port shows."""
    config = context.config.bandwidth
    for figure, threshold in ((H2D, config.min_h2d_gbps), (D2H, config.min_d2h_gbps)):
        step(f"all GPUs {figure.id}")
        figures = context.backend.host_device_bandwidth(
            figure.id, gpus, config.transfer_mib * _MIB, config.iterations
        )
        for gpu, gbps in figures.items():
            part = context.part_for(gpu)
            builder.gpu_metric(gpu, f"{figure.key}Concurrent", gbps)
            _below(
                builder,
                what=f"{context.unit(gpu)} {figure.id} with all units copying at once",
                field=figure.threshold,
                gbps=gbps,
                threshold=threshold,
                expected=part.h2d_gbps if figure is H2D else part.d2h_gbps,
                gpu=gpu,
                share=context.share_for(gpu).compute,
            )
        builder.metrics[f"{figure.key}ConcurrentTotal"] = round(sum(figures.values()), 3)


def _peers(context: CheckContext, builder: CheckBuilder, gpus: list[int], step: _Steps) -> None:
    """Every ordered pair of GPUs, peer to peer."""
    config, backend = context.config.bandwidth, context.backend
    for src, dst in ((s, d) for s in gpus for d in gpus if s != d):
        step(f"GPU {src} -> GPU {dst}")
        if not backend.peer_access(src, dst):
            builder.pairs.append(PairResult(src=src, dst=dst, gbps=None, peer_access=False))
            builder.add(
                Reason.PEER_ACCESS_UNAVAILABLE,
                f"GPU {src} cannot access GPU {dst} directly",
                gpu=src,
                peer=dst,
            )
            continue
        gbps = backend.peer_bandwidth(src, dst, config.transfer_mib * _MIB, config.iterations)
        builder.pairs.append(PairResult(src=src, dst=dst, gbps=round(gbps, 3)))
        _below(
            builder,
            what=f"GPU {src} -> GPU {dst}",
            field=P2P.threshold,
            gbps=gbps,
            threshold=config.min_p2p_gbps,
            expected=context.part.p2p_gbps,
            gpu=src,
            peer=dst,
        )
