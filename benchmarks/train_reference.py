"""A plain torch training loop of the training check's model and settings: the reference its
speed is compared with (benchmarks/train_bench.py). No verification, no reporting, no rank
manager: the model, the optimizer and the synthetic tokens of gpuval_agent.backends.torch.train,
stepped in a loop, timed with two CUDA events around the steps after the warm-up. Several GPUs:
one process each (torch.multiprocessing), DDP over NCCL, as the check.

    python benchmarks/train_reference.py --json ref.json [--model large --micro-batch 16]
        [--steps 60 --warmup 5 --attention flash] [--no-deterministic] [--gpus N]
    python benchmarks/train_reference.py --probe flash,efficient,cudnn,math --steps 6 --json p.json

--probe: for each attention backend, the same steps twice in one process with the deterministic
settings; whether the losses were bit-identical, the step time, or the error the backend gave.
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import sys
from typing import Any

# As the agent's ranks (gpuval_agent.backends.trainranks): cuBLAS's deterministic workspace, one
# NCCL algorithm and protocol, NVLink multicast off.
ENV = {
    "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
    "NCCL_ALGO": "Ring",
    "NCCL_PROTO": "Simple",
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
    "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
}
os.environ.update(ENV)

import torch  # noqa: E402 - the environment above must be set before CUDA starts
import torch.distributed as dist  # noqa: E402

from gpuval_agent.backends.torch import train as torch_train  # noqa: E402
from gpuval_agent.training import SHAPES, auto_micro_batch, auto_model  # noqa: E402
from gpuval_api.checks import TrainAttention, TrainCheck, TrainModel  # noqa: E402


def train(
    rank: int, world: int, args: argparse.Namespace, attention: str, keep_losses: bool
) -> dict[str, Any]:
    """The plain loop on CUDA device `rank`: tokens/s over the timed steps (and the losses)."""
    device = torch.device("cuda", rank)
    torch.cuda.set_device(device)
    if args.deterministic:
        torch_train.deterministic()
    shape = SHAPES[args.model].to_spec()
    model = torch_train.wrap(torch_train.build(shape, attention, args.seed, device), world, device)
    adam = torch_train.optimizer(model)
    batches = torch_train.Batches(shape, args.micro_batch, args.seed, rank, device)
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    losses = []
    torch.cuda.reset_peak_memory_stats(device)
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            start.record()
        for group in adam.param_groups:
            group["lr"] = torch_train.learning_rate(step)
        inputs, targets = batches.next()
        loss = model(inputs, targets)
        loss.backward()
        adam.step()
        adam.zero_grad(set_to_none=True)
        if keep_losses:
            losses.append(loss.detach())
    end.record()
    end.synchronize()
    seconds = start.elapsed_time(end) / 1000
    tokens = args.steps * args.micro_batch * shape["sequence"]
    return {
        "tokensPerSecond": tokens / seconds,
        "stepSeconds": seconds / args.steps,
        "peakMemoryBytes": torch.cuda.max_memory_allocated(device),
        "losses": [struct.pack(">f", v).hex() for v in torch.stack(losses).tolist()]
        if keep_losses
        else [],
    }


def _worker(rank: int, world: int, args: argparse.Namespace, port: int, queue: Any) -> None:
    dist.init_process_group(
        "nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    figures = train(rank, world, args, args.attention, keep_losses=False)
    queue.put((rank, figures))
    dist.barrier()


def run_reference(args: argparse.Namespace) -> dict[str, Any]:
    """Every GPU's plain loop; the node's tokens/s is the sum (DDP keeps them in step)."""
    if args.gpus <= 1:
        figures = train(0, 1, args, args.attention, keep_losses=False)
        per_gpu = [figures]
    else:
        import torch.multiprocessing as mp  # noqa: PLC0415

        context = mp.get_context("spawn")
        queue = context.SimpleQueue()
        port = 29_000 + os.getpid() % 1000
        mp.start_processes(
            _worker, args=(args.gpus, args, port, queue), nprocs=args.gpus, start_method="spawn"
        )
        per_gpu = [figures for _, figures in sorted(queue.get() for _ in range(args.gpus))]
    flops = SHAPES[args.model].flops_per_token
    rate = sum(f["tokensPerSecond"] for f in per_gpu)
    return {
        "model": str(args.model),
        "microBatch": args.micro_batch,
        "steps": args.steps,
        "warmupSteps": args.warmup,
        "attention": args.attention,
        "deterministic": args.deterministic,
        "gpus": args.gpus,
        "tokensPerSecond": rate,
        "tokensPerSecondPerGpu": rate / args.gpus,
        "modelTflopsPerGpu": rate / args.gpus * flops / 1e12,
        "stepSeconds": max(f["stepSeconds"] for f in per_gpu),
        "peakMemoryBytes": max(f["peakMemoryBytes"] for f in per_gpu),
    }


def probe(args: argparse.Namespace, backends: list[str]) -> list[dict[str, Any]]:
    """Each attention backend's two runs in this process: bit-identical losses? how fast?"""
    rows = []
    for backend in backends:
        row: dict[str, Any] = {"attention": backend}
        try:
            first = train(0, 1, args, backend, keep_losses=True)
            second = train(0, 1, args, backend, keep_losses=True)
            row |= {
                "identical": first["losses"] == second["losses"],
                "stepSeconds": min(first["stepSeconds"], second["stepSeconds"]),
                "tokensPerSecond": max(first["tokensPerSecond"], second["tokensPerSecond"]),
                "losses": [first["losses"], second["losses"]],
            }
        except Exception as error:  # a backend that refuses the shape or determinism says why
            row["error"] = f"{type(error).__name__}: {str(error)[:400]}"
        torch.cuda.empty_cache()
        rows.append(row)
        said = row.get("error") or (
            f"identical {row['identical']}, {row['stepSeconds'] * 1e3:.0f} ms a step"
        )
        print(f"probe {backend}: {said}", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    defaults = TrainCheck()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the figures here")
    parser.add_argument("--model", type=TrainModel, default=TrainModel.AUTO)
    parser.add_argument("--micro-batch", type=int)
    parser.add_argument("--steps", type=int, default=defaults.steps)
    parser.add_argument("--warmup", type=int, default=defaults.warmup_steps)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--attention", default=str(defaults.attention))
    parser.add_argument("--no-deterministic", dest="deterministic", action="store_false")
    parser.add_argument("--gpus", type=int, default=torch.cuda.device_count())
    parser.add_argument("--probe", help="attention backends to probe, comma-separated")
    args = parser.parse_args(argv)
    memory = torch.cuda.get_device_properties(0).total_memory
    if args.model is TrainModel.AUTO:
        args.model = auto_model(memory)
    args.micro_batch = args.micro_batch or auto_micro_batch(args.model, memory)
    if args.probe:
        backends = [b for b in args.probe.split(",") if b]
        for backend in backends:
            TrainAttention(backend)  # a typo fails before any GPU work
        output: Any = probe(args, backends)
    else:
        output = run_reference(args)
        print(
            f"reference: {output['tokensPerSecond']:,.0f} tokens/s "
            f"({output['tokensPerSecondPerGpu']:,.0f} per GPU), "
            f"{output['stepSeconds'] * 1e3:.0f} ms a step, {args.model} B{args.micro_batch}, "
            f"{args.attention}, deterministic {args.deterministic}",
            flush=True,
        )
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(output, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
