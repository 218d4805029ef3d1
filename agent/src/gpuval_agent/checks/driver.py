"""Driver layer: NVML answers, the GPU count, the driver's CUDA version, CUDA on every GPU."""

from __future__ import annotations

from gpuval_agent.checks.common import CheckBuilder, CheckContext, version_tuple
from gpuval_agent.inuse import describe, is_out_of_memory
from gpuval_api import Reason
from gpuval_api.result import CheckResult


def run_driver(context: CheckContext) -> CheckResult:
    builder = CheckBuilder("driver", context)
    environment = context.environment
    config = context.config.driver
    builder.metrics["gpuCount"] = environment.gpu_count

    expected, source = context.expected_gpus, context.expected_gpus_source
    if config.expected_gpus is not None:
        expected, source = config.expected_gpus, "spec.checks.driver.expectedGpus"
    for uuid in context.missing_devices:
        builder.add(
            Reason.GPU_MISSING,
            f"{uuid}, published by the node and given to this pod, is not visible to NVML",
        )
    if expected is not None:
        builder.metrics["expectedGpus"] = expected
        # A missing device named by its UUID says more than the count it leaves short.
        if environment.gpu_count != expected and not context.missing_devices:
            builder.add(
                Reason.GPU_COUNT_MISMATCH,
                f"NVML shows {environment.gpu_count} GPUs, expected {expected} ({source})",
            )

    required = config.min_cuda_version or environment.cuda_runtime_version
    required_source = (
        "driver.minCudaVersion" if config.min_cuda_version else "the agent's CUDA runtime"
    )
    driver_cuda = environment.cuda_driver_version
    if required and driver_cuda and version_tuple(driver_cuda) < version_tuple(required)[:2]:
        builder.add(
            Reason.CUDA_DRIVER_TOO_OLD,
            f"driver {environment.driver_version} supports CUDA up to {driver_cuda}, older than "
            f"CUDA {required} ({required_source})",
        )

    busy = context.watch.baseline if context.watch is not None else {}
    for gpu, error in sorted(context.backend.cuda_init(context.gpus).items()):
        builder.gpu_metric(gpu, "cudaInitialised", 0.0 if error else 1.0)
        if error and gpu in busy and is_out_of_memory(error):
            # No room for a context beside another process's memory: not the GPU's fault.
            builder.add(
                Reason.GPU_IN_USE,
                f"{context.unit(gpu)} is in use by {describe(busy[gpu])}: CUDA could not create a "
                "context "
                f"beside it ({error})",
                gpu=gpu,
            )
        elif error:
            builder.add(
                Reason.CUDA_INIT_FAILED,
                f"{context.unit(gpu)}: CUDA did not initialise: {error}",
                gpu=gpu,
            )
    return builder.finish(
        message=""
        if builder.failed
        else f"{context.units()}, driver {environment.driver_version}, CUDA {driver_cuda}"
    )
