"""The training check's model and its loop on one GPU, in a rank process (imported only where torch
is; benchmarks/train_reference.py trains the same model with a plain loop).

A decoder-only transformer written with torch alone: token embedding, pre-norm blocks of causal
self-attention (torch.nn.functional.scaled_dot_product_attention on one pinned backend) and a
4x GELU MLP, a final norm, the LM head tied to the embedding; bf16 weights, AdamW (fused), the
loss in float32. Tokens are synthetic, from a seeded generator per rank: a skewed distribution
(u^3 over the vocabulary, so the loss has something to learn in a few steps), each sequence's
second half a copy of its first (something for attention to learn). Data-parallel over the node's
GPUs with DDP over NCCL when there are several; in the fabric's training phase over every GPU of a
group of nodes, or of a pair of them (the rank's `group`: the pair's communicator).

Determinism: torch's deterministic algorithms (with CUBLAS_WORKSPACE_CONFIG, set by the agent in
the rank's environment with NCCL_ALGO=Ring and NCCL_PROTO=Simple), cuDNN's deterministic mode, no
TF32, one attention backend pinned. The loop records each step's loss into pinned host memory and
an event after each step, without a synchronisation: the live line reads the last finished
step's loss from there, and the step times come from the events at the end.
"""

from __future__ import annotations

import itertools
import math
import time
from typing import Any, Protocol

import torch  # type: ignore[import-not-found,unused-ignore]
import torch.nn.functional as F  # type: ignore[import-not-found,unused-ignore]  # noqa: N812
from torch import nn  # type: ignore[import-not-found,unused-ignore]
from torch.nn.attention import (  # type: ignore[import-not-found,unused-ignore]
    SDPBackend,
    sdpa_kernel,
)

from gpuval_agent.backends.trainranks import PROGRESS_ID
from gpuval_api.training import encode_loss

BACKENDS = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "math": SDPBackend.MATH,
}
LEARNING_RATE = 3e-4
LR_WARMUP_STEPS = 10
INIT_STD = 0.02
PERTURBATION = 0.01  # added to one weight by the test hook

_PROGRESS_SECONDS = 1.0


def deterministic() -> None:
    """The settings under which one stack computes bit-identical losses (module docstring)."""
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


class Block(nn.Module):  # type: ignore[misc]
    def __init__(self, d_model: int, heads: int, backend: Any) -> None:
        super().__init__()
        self.heads = heads
        self.backend = backend
        self.norm1 = nn.LayerNorm(d_model, bias=False)
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.proj = nn.Linear(d_model, d_model, bias=False)
        self.norm2 = nn.LayerNorm(d_model, bias=False)
        self.fc = nn.Linear(d_model, 4 * d_model, bias=False)
        self.out = nn.Linear(4 * d_model, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, sequence, d_model = x.shape
        qkv = self.qkv(self.norm1(x)).view(batch, sequence, 3, self.heads, d_model // self.heads)
        q, k, v = (t.transpose(1, 2) for t in qkv.unbind(2))
        with sdpa_kernel([self.backend]):
            attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(batch, sequence, d_model))
        return x + self.out(F.gelu(self.fc(self.norm2(x)), approximate="tanh"))


class Model(nn.Module):  # type: ignore[misc]
    def __init__(
        self, d_model: int, layers: int, heads: int, vocab: int, attention: str = "flash"
    ) -> None:
        super().__init__()
        backend = BACKENDS[attention]
        self.embedding = nn.Embedding(vocab, d_model)
        self.blocks = nn.ModuleList(Block(d_model, heads, backend) for _ in range(layers))
        self.norm = nn.LayerNorm(d_model, bias=False)
        self.layers = layers

    def reset(self) -> None:
        """GPT-2's initialisation: N(0, 0.02), the residual projections scaled by 1/sqrt(2L)."""
        for name, parameter in self.named_parameters():
            if parameter.dim() < 2:
                continue
            residual = name.endswith(("proj.weight", "out.weight"))
            std = INIT_STD / math.sqrt(2 * self.layers) if residual else INIT_STD
            nn.init.normal_(parameter, 0.0, std)

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        x = self.embedding(tokens)
        for block in self.blocks:
            x = block(x)
        logits = F.linear(self.norm(x), self.embedding.weight)
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.reshape(-1))


def build(shape: dict[str, int], attention: str, seed: int, device: torch.device) -> Model:
    """The model on `device` in bf16, initialised from `seed`."""
    torch.manual_seed(seed)
    with torch.device(device):
        model = Model(shape["dModel"], shape["layers"], shape["heads"], shape["vocab"], attention)
        model.reset()
    model.to(torch.bfloat16)  # in place: a module's .to returns itself
    return model


def optimizer(model: nn.Module) -> torch.optim.Optimizer:
    fused = next(model.parameters()).is_cuda
    return torch.optim.AdamW(
        model.parameters(), lr=LEARNING_RATE, betas=(0.9, 0.95), weight_decay=0.1, fused=fused
    )


def learning_rate(step: int) -> float:
    """Linear warm-up over the first LR_WARMUP_STEPS steps (0-based `step`), then constant."""
    return LEARNING_RATE * min(1.0, (step + 1) / LR_WARMUP_STEPS)


class Batches:
    """Synthetic tokens for one rank: (inputs, targets) per step from its own seeded generator."""

    def __init__(
        self, shape: dict[str, int], micro_batch: int, seed: int, rank: int, device: torch.device
    ) -> None:
        self.vocab = shape["vocab"]
        self.sequence = shape["sequence"]
        self.micro_batch = micro_batch
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(seed * 1_000_003 + rank)
        self.device = device

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        half = (self.sequence + 2) // 2
        u = torch.rand((self.micro_batch, half), generator=self.generator, device=self.device)
        first = (u.pow(3) * self.vocab).long().clamp_(max=self.vocab - 1)
        tokens = torch.cat([first, first], dim=1)[:, : self.sequence + 1]
        return tokens[:, :-1], tokens[:, 1:]


class Rank(Protocol):
    rank: int  # in the run's ranks (its `group`'s, else the world's)
    world: int
    device: torch.device
    process_group: Any  # what the run is data-parallel over; None: the whole world

    def emit(self, **event: Any) -> None: ...


def wrap(model: nn.Module, world: int, device: torch.device, group: Any = None) -> nn.Module:
    """DDP over the run's ranks (`group`: a process group, else the world); a world of one
    trains the model as it is."""
    if world <= 1:
        return model
    return nn.parallel.DistributedDataParallel(
        model,
        device_ids=[device],
        broadcast_buffers=False,
        gradient_as_bucket_view=True,
        process_group=group,
    )


def perturb(model: nn.Module) -> None:
    """The test hook: one weight of the first attention layer moves by PERTURBATION."""
    core = model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model
    with torch.no_grad():
        core.blocks[0].qkv.weight[0, 0] += PERTURBATION


def run(rank: Rank, command: dict[str, Any]) -> None:
    """The `train` command of the rank process: every step, then one event with this rank's
    losses and figures."""
    deterministic()
    device = rank.device
    shape = command["shape"]
    total = int(command["warmupSteps"]) + int(command["steps"])
    warmup = int(command["warmupSteps"])
    tokens_per_step = int(command["microBatch"]) * shape["sequence"]
    seed = int(command["seed"])
    model = wrap(
        build(shape, command["attention"], seed, device), rank.world, device, rank.process_group
    )
    adam = optimizer(model)
    batches = Batches(shape, int(command["microBatch"]), seed, rank.rank, device)
    losses = torch.zeros(total, dtype=torch.float32, pin_memory=True)
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(total)]
    start = torch.cuda.Event(enable_timing=True)
    torch.cuda.reset_peak_memory_stats(device)
    perturb_at = command.get("perturbStep")
    progress = _Progress(
        rank, start=start, ends=ends, losses=losses, warmup=warmup, tokens=tokens_per_step
    )
    for step in range(total):
        if step == warmup:
            start.record()
        if perturb_at == step + 1 and rank.rank == int(command.get("perturbRank") or 0):
            perturb(model)
        for group in adam.param_groups:
            group["lr"] = learning_rate(step)
        inputs, targets = batches.next()
        loss = model(inputs, targets)
        loss.backward()
        adam.step()
        adam.zero_grad(set_to_none=True)
        losses[step].copy_(loss.detach(), non_blocking=True)
        ends[step].record()
        progress.maybe(step)
    torch.cuda.synchronize(device)
    progress.maybe(total - 1, final=True)
    timed = [start, *ends[warmup:]] if total > warmup else []
    step_seconds = [a.elapsed_time(b) / 1000 for a, b in itertools.pairwise(timed)]
    rank.emit(
        id=command["id"],
        losses=[encode_loss(value) for value in losses.tolist()],
        stepSeconds=step_seconds,
        timedSeconds=sum(step_seconds),
        tokens=tokens_per_step * (total - warmup),
        peakMemoryBytes=int(torch.cuda.max_memory_allocated(device)),
        versions=versions(),
    )


def versions() -> dict[str, str | None]:
    """What this rank ran with: torch, its CUDA runtime, its NCCL."""
    nccl = None
    try:
        version = torch.cuda.nccl.version()
        nccl = ".".join(str(v) for v in version) if isinstance(version, tuple) else str(version)
    except (RuntimeError, AttributeError):
        nccl = None
    return {"torch": torch.__version__, "cuda": torch.version.cuda, "nccl": nccl}


class _Progress:
    """Rank 0's live figures, from the steps the GPU finished (events queried, never waited on)."""

    def __init__(
        self,
        rank: Rank,
        *,
        start: Any,
        ends: list[Any],
        losses: torch.Tensor,
        warmup: int,
        tokens: int,
    ) -> None:
        self.rank = rank
        self.start = start
        self.ends = ends
        self.losses = losses
        self.warmup = warmup
        self.tokens = tokens
        self.done = -1
        self.last = time.monotonic()

    def maybe(self, launched: int, final: bool = False) -> None:
        """Report the last finished step of those launched, at most once a second (`final`:
        now, every step being done)."""
        if self.rank.rank != 0 or (time.monotonic() - self.last < _PROGRESS_SECONDS and not final):
            return
        self.last = time.monotonic()
        while self.done < launched and self.ends[self.done + 1].query():
            self.done += 1
        if self.done < 0:
            return
        rate = None
        if self.done >= self.warmup:
            seconds = self.start.elapsed_time(self.ends[self.done]) / 1000
            steps = self.done - self.warmup + 1
            if seconds > 0:
                rate = steps * self.tokens * self.rank.world / seconds
        loss = float(self.losses[self.done])
        self.rank.emit(id=PROGRESS_ID, step=self.done + 1, loss=loss, tokensPerSecond=rate)
