"""One GPU's rank process (`python -m gpuval_agent.backends.rankprocess --spec JSON`), for the
node's NCCL check (one node, its GPUs) and the fabric (every GPU of a group of nodes) alike.

Started by the agent (gpuval_agent.backends.ranks), one per GPU; global rank = the node's offset +
the local GPU. The world meets at a torch TCPStore that global rank 0 hosts (rank 0's address,
the generation's port), with no device_id: communicators are created lazily at their first
collective, so a fabric generation started for the pair rounds never builds the world's
communicator (a hung node cannot hang the pairs it is not in), and `new_group` (called by every
rank for every pair, in the same order) needs no collective over the world. The NCCL check sends
`check` as soon as its ranks start: their communicator forms and its sum is checked during the
burn, and `group` runs the sweep the moment the check needs it. The training check's ranks
(started with its deterministic settings in their environment) get one `train` command
(gpuval_agent.backends.torch.train), rank 0 writing its progress as it goes; the fabric's training
phase sends the same command to a group's world, then with `pairs` (one round): every rank makes
every pair's communicator, in the same order, and the ranks of each pair train data-parallel over
theirs.

Commands arrive as JSON lines on stdin; each ends with one JSON line in the events file
(`{"id": n, ...}`). Figures are in-place float32 all-reduces timed like nccl-tests
(gpuval_agent.backends.torch.collective: CUDA-graph replays timed with CUDA events), each the
slowest rank's. A failure writes its error and exits 1: a broken communicator is not reused.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import timedelta
from typing import Any, TextIO

import torch  # type: ignore[import-not-found,unused-ignore]
import torch.distributed as dist  # type: ignore[import-not-found,unused-ignore]

from gpuval_agent.backends.torch.collective import seconds_per_all_reduce

_CHECK_ELEMENTS = 1 << 18
_ERROR_CHARS = 1500


class RankProcess:
    process_group: Any = None  # the training step's: None, the world's

    def __init__(self, spec: dict[str, Any], events: TextIO) -> None:
        self.spec = spec
        self.events = events
        self.rank: int = spec["rank"]
        self.world: int = spec["world"]
        self.node: int = spec["node"]
        self.layout: list[list[int]] = spec["layout"]  # per node: [first global rank, GPUs]
        self.device = torch.device("cuda", spec["device"])
        self.phase = timedelta(seconds=spec["phaseSeconds"])
        self.buffer: torch.Tensor | None = None

    def emit(self, **event: Any) -> None:
        self.events.write(json.dumps(event) + "\n")
        self.events.flush()

    def init(self) -> None:
        torch.cuda.set_device(self.device)
        store = dist.TCPStore(
            self.spec["storeHost"],
            self.spec["storePort"],
            world_size=self.world,
            is_master=self.rank == 0,
            timeout=timedelta(seconds=self.spec["initSeconds"]),
            wait_for_workers=False,
        )
        dist.init_process_group(
            "nccl", store=store, rank=self.rank, world_size=self.world, timeout=self.phase
        )

    def ranks_of(self, node: int) -> list[int]:
        first, count = self.layout[node]
        return list(range(first, first + count))

    def view(self, nbytes: int) -> torch.Tensor:
        elements = nbytes // 4
        if self.buffer is None or self.buffer.numel() < elements:
            self.buffer = None
            torch.cuda.empty_cache()
            self.buffer = torch.zeros(elements, dtype=torch.float32, device=self.device)
        return self.buffer[:elements]

    def checked_sum(self, group: Any, ranks: list[int]) -> bool:
        """One all-reduce whose result is known (1 + 2 + ... + n), agreed on by every rank."""
        position = ranks.index(self.rank)
        values = torch.full((_CHECK_ELEMENTS,), float(position + 1), device=self.device)
        dist.all_reduce(values, group=group)
        expected = len(ranks) * (len(ranks) + 1) / 2
        flag = torch.tensor([0 if bool((values == expected).all()) else 1], device=self.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=group)
        return int(flag.item()) == 0

    def slowest(self, seconds: float, group: Any) -> float:
        value = torch.tensor([seconds], device=self.device)
        dist.all_reduce(value, op=dist.ReduceOp.MAX, group=group)
        return float(value.item())

    def check(self, command: dict[str, Any]) -> None:
        ok = self.checked_sum(None, list(range(self.world)))
        self.emit(id=command["id"], sumOk=ok)

    def group(self, command: dict[str, Any]) -> None:
        sizes: list[int] = command["sizes"]
        self.view(max(sizes))
        figures = []
        for size in sizes:
            measured = seconds_per_all_reduce(self.view(size), command["iterations"])
            figures.append([size, self.slowest(measured, None)])
            print(f"gpuval: rank {self.rank} size {size} {figures[-1][1] * 1e6:.1f} us", flush=True)
        self.emit(id=command["id"], sizes=figures)

    def pairs(self, command: dict[str, Any]) -> None:
        pairs = [(int(a), int(b)) for a, b in command["pairs"]]
        groups = [
            dist.new_group(self.ranks_of(a) + self.ranks_of(b), timeout=self.phase)
            for a, b in pairs
        ]
        for (a, b), group in zip(pairs, groups, strict=True):
            if self.node not in (a, b):
                continue
            ranks = self.ranks_of(a) + self.ranks_of(b)
            ok = self.checked_sum(group, ranks)
            measured = seconds_per_all_reduce(
                self.view(command["bytes"]), command["iterations"], group
            )
            seconds = self.slowest(measured, group)
            print(f"gpuval: rank {self.rank} pair {a}-{b} {seconds * 1e3:.2f} ms", flush=True)
            self.emit(id=command["id"], pair=[a, b], seconds=seconds, sumOk=ok)
            return
        self.emit(id=command["id"], idle=True)

    def train(self, command: dict[str, Any]) -> None:
        from gpuval_agent.backends.torch import train as torch_train  # noqa: PLC0415 - only the training ranks

        if command.get("pairs") is None:
            torch_train.run(self, command)
            return
        pairs = [(int(a), int(b)) for a, b in command["pairs"]]
        groups = [
            dist.new_group(self.ranks_of(a) + self.ranks_of(b), timeout=self.phase)
            for a, b in pairs
        ]
        for (a, b), group in zip(pairs, groups, strict=True):
            if self.node in (a, b):
                torch_train.run(PairRank(self, (a, b), group), command)
                return
        self.emit(id=command["id"], idle=True)


class PairRank:
    """A rank process as one rank of its pair's data-parallel run (backends/torch/train.py's Rank):
    its rank among the pair's GPUs, and every event saying which pair."""

    def __init__(self, process: RankProcess, pair: tuple[int, int], group: Any) -> None:
        ranks = process.ranks_of(pair[0]) + process.ranks_of(pair[1])
        self.rank, self.world = ranks.index(process.rank), len(ranks)
        self.device, self.process_group = process.device, group
        self.process, self.pair = process, pair

    def emit(self, **event: Any) -> None:
        self.process.emit(**event, pair=list(self.pair))


def _unreachable(error: BaseException) -> bool:
    kinds = tuple(
        k
        for k in (getattr(dist, "DistNetworkError", None), getattr(dist, "DistStoreError", None))
        if isinstance(k, type)
    )
    return isinstance(error, kinds) or "connect" in str(error).lower()


def _fail(events: TextIO, step: int, error: BaseException, **extra: Any) -> None:
    text = f"{type(error).__name__}: {error}"
    print(f"gpuval: rank failed at step {step}: {text}", file=sys.stderr, flush=True)
    events.write(json.dumps({"id": step, "error": text[:_ERROR_CHARS], **extra}) + "\n")
    events.flush()
    os._exit(1)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--spec", required=True, help="JSON: rank, world, node, layout, ...")
    parser.add_argument("--group", required=True, help="the fabric group (for ps)")
    args = parser.parse_args(argv)
    spec = json.loads(args.spec)
    with open(spec["events"], "a") as events:
        process = RankProcess(spec, events)
        try:
            process.init()
        except Exception as error:  # the agent reads why from the event
            _fail(events, 0, error, unreachable=_unreachable(error))
        process.emit(id=0, ready=True)
        handlers = {
            "check": process.check,
            "group": process.group,
            "pairs": process.pairs,
            "train": process.train,
        }
        for line in sys.stdin:
            command = json.loads(line)
            if command.get("op") == "exit":
                break
            if command.get("op") == spec.get("testHang"):
                time.sleep(86400)  # fault injection for the GPU tests: never join this step
            try:
                handlers[command["op"]](command)
            except Exception as error:
                _fail(events, int(command.get("id", -1)), error)
    sys.stdout.flush()
    # No teardown: NCCL's destroy can block on peers that are gone; the agent is done with us.
    os._exit(0)


if __name__ == "__main__":
    main()
