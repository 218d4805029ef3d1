"""`gpuval-agent fabric`: by hand on every machine, or `--cluster` in the fabric pod.

By hand (no cluster): the same command on every machine, each with its own --rank; rank 0's
machine listens on the --master port (and the rank processes' store on the next ports, PORT+1 up
to PORT+5), the others dial it. While the group forms, each prints every few seconds which ranks
joined and which it still waits for, with the time left (gpuval_api.fabric.FabricWait).

In the pod, the same from GPUVAL_FABRIC_RANK, _NODES (JSON list of node names by rank), _MASTER
(rank 0's pod IP:PORT; or _MASTER_POD, rank 0's pod name and port, whose IP the agent reads from
the API server: fabric.locate), _GROUP and _CONFIG (FabricConfig JSON); the waiting lines go to
the pod's log, and the result goes to the node's GpuNodeReport as `status.fabric` (merge patch,
retried until GPUVAL_DEADLINE), after the compact fabric status is left in the termination
message.

Exit codes: 0 Passed, 1 Failed (the fabric named this node, or the group failed as a whole), 2
the agent could not run, 3 NotRun (not tested: the group did not form, or another process used
a GPU of the group; no evidence against this node), 130 stopped by a signal (by hand; in the pod
a stopped agent exits 2 and writes nothing).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import socket
import sys
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

from pydantic import ValidationError

from gpuval_agent.backends import BACKENDS
from gpuval_agent.backends.simulated.config import SimulationConfig
from gpuval_agent.cluster import deadline_from_env, write_termination_text
from gpuval_agent.errors import AgentError
from gpuval_agent.fabric.coordinator import StoppedError
from gpuval_agent.fabric.driver import FabricPlan, master_unknown, run_fabric
from gpuval_agent.fabric.locate import MasterUnknownError, locate_master, parse_master_pod
from gpuval_agent.fabric.simulated import SimulatedFabric
from gpuval_agent.fabric.steps import Executor
from gpuval_agent.fabric.table import render_fabric
from gpuval_agent.kube import ApiServer, PodReader, ReportUnreachableError, ReportWriter
from gpuval_agent.outcome import (
    EXIT_INTERRUPTED,
    stop_on_signals,
    validation_message,
    verdict_exit_code,
)
from gpuval_api import AgentEnv
from gpuval_api.checks import TrainModel
from gpuval_api.fabric import (
    FABRIC_SUBCOMMAND,
    MAX_GROUP,
    ExpectedTransport,
    FabricConfig,
    FabricResult,
    FabricWait,
    build_fabric_status,
    build_fabric_termination_message,
    describe_wait,
)
from gpuval_api.report import StatusKey

DEFAULT_GROUP = "by-hand"
_HANG_STEPS = ("check", "group", "pairs")


def add_fabric_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], size: Callable[[str], int]
) -> None:
    fabric = sub.add_parser(
        FABRIC_SUBCOMMAND, help="NCCL all-reduce across machines: the same command on every machine"
    )
    fabric.add_argument(
        "--cluster", action="store_true", help="in the pod: read GPUVAL_FABRIC_*, write the report"
    )
    fabric.add_argument("--rank", type=int, help="this machine's rank, 0 .. world-1")
    fabric.add_argument("--world", type=int, help="how many machines take part")
    fabric.add_argument("--master", help="rank 0's ADDR:PORT (rank 0 listens on PORT..PORT+5)")
    fabric.add_argument("--nodes", help="the machines' names by rank, comma-separated")
    fabric.add_argument("--group", default=DEFAULT_GROUP, help="the group's name")
    fabric.add_argument("--config", type=Path, help="FabricConfig JSON file (flags override it)")
    fabric.add_argument("--max-size", type=size, help="largest all-reduce of the sweep (8G)")
    fabric.add_argument("--pair-size", type=size, help="all-reduce size of the pairs (1G)")
    fabric.add_argument("--iterations", type=int, help="timed all-reduces per size (20)")
    fabric.add_argument(
        "--expected-transport",
        choices=[str(t) for t in ExpectedTransport],
        help="IB: sockets fail the node; Socket; Any (default)",
    )
    fabric.add_argument(
        "--train",
        action="store_true",
        help="then train the train check's model data-parallel across the machines, and in pairs",
    )
    fabric.add_argument("--train-steps", type=int, help="timed training steps (20)")
    fabric.add_argument(
        "--train-model",
        choices=[str(m) for m in TrainModel],
        help="training model shape (auto: by the smallest GPU memory)",
    )
    fabric.add_argument("--gpus", type=int, help="GPUs of this machine to use (default: all)")
    fabric.add_argument("--json", dest="json_path", help="write the result here ('-': stdout)")
    fabric.add_argument("--backend", choices=BACKENDS, help="GPU backend (default cuda)")
    fabric.add_argument("--simulate", help="simulated backend's configuration JSON (test double)")
    # Fault injection for the GPU tests: this machine's rank processes never join that step.
    fabric.add_argument("--test-hang", choices=_HANG_STEPS, help=argparse.SUPPRESS)


def parse_master(text: str, source: str) -> tuple[str, int]:
    host, _, port = text.strip().rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not host or not port.isdigit() or not 0 < int(port) < 65530:
        raise AgentError(
            f"{source}={text!r} is not ADDR:PORT (e.g. 10.0.0.1:29500; the port and the five "
            "after it must be free on rank 0)"
        )
    return host, int(port)


def _config(args: argparse.Namespace) -> FabricConfig:
    try:
        base = json.loads(args.config.read_text()) if args.config is not None else {}
    except (OSError, ValueError) as error:
        raise AgentError(f"--config {str(args.config)!r}: {error}") from None
    flags = {
        "maxBytes": args.max_size,
        "pairBytes": args.pair_size,
        "iterations": args.iterations,
        "expectedTransport": args.expected_transport,
    }
    merged = base | {key: value for key, value in flags.items() if value is not None}
    train = {
        "enabled": True if args.train else None,
        "steps": args.train_steps,
        "model": args.train_model,
    }
    if any(value is not None for value in train.values()):
        given = base.get("train")
        known = dict(given) if isinstance(given, dict) else {}
        merged["train"] = known | {key: value for key, value in train.items() if value is not None}
    if args.max_size is not None and "minBytes" not in base:
        merged["minBytes"] = min(FabricConfig().min_bytes, args.max_size)
    try:
        return FabricConfig.model_validate(merged)
    except ValidationError as error:
        raise AgentError(validation_message(error, "the fabric configuration")) from None


def plan_from_args(args: argparse.Namespace) -> FabricPlan:
    missing = [f for f in ("rank", "world", "master") if getattr(args, f) is None]
    if missing:
        raise AgentError(
            f"--{', --'.join(missing)} needed: run the same command on every machine with its "
            "own --rank, e.g. --rank 0 --world 2 --master 10.0.0.1:29500 (or --cluster in a pod)"
        )
    if not 1 <= args.world <= MAX_GROUP or not 0 <= args.rank < args.world:
        raise AgentError(
            f"--rank {args.rank} --world {args.world}: the world is 1 to {MAX_GROUP} machines "
            "and the rank 0 to world-1"
        )
    nodes = [n.strip() for n in args.nodes.split(",")] if args.nodes else None
    if nodes is not None and (len(nodes) != args.world or not all(nodes)):
        raise AgentError(f"--nodes {args.nodes!r}: give {args.world} names, one per rank")
    return FabricPlan(
        rank=args.rank,
        world=args.world,
        master=parse_master(args.master, "--master"),
        group=args.group,
        node=nodes[args.rank] if nodes else socket.gethostname(),
        config=_config(args),
        nodes=nodes,
    )


def plan_from_env(environ: Mapping[str, str]) -> FabricPlan:
    """The fabric pod's plan; AgentError naming the variable when one is wrong."""
    try:
        rank = int(environ.get(AgentEnv.FABRIC_RANK, ""))
        nodes = json.loads(environ.get(AgentEnv.FABRIC_NODES, ""))
    except ValueError:
        raise AgentError(
            f"{AgentEnv.FABRIC_RANK} (an integer) and {AgentEnv.FABRIC_NODES} (a JSON list of "
            "node names) must be set: the operator sets them on the fabric pod"
        ) from None
    if not isinstance(nodes, list) or not 0 <= rank < len(nodes) <= MAX_GROUP:
        raise AgentError(
            f"{AgentEnv.FABRIC_RANK}={rank} is not a rank of {AgentEnv.FABRIC_NODES}={nodes!r}"
        )
    try:
        config = FabricConfig.model_validate_json(environ.get(AgentEnv.FABRIC_CONFIG) or "{}")
    except ValidationError as error:
        raise AgentError(validation_message(error, AgentEnv.FABRIC_CONFIG)) from None
    master_pod = None
    if (text := environ.get(AgentEnv.FABRIC_MASTER_POD)) and rank > 0:
        master_pod = parse_master_pod(text, AgentEnv.FABRIC_MASTER_POD)
        master = ("", master_pod.port)
    else:
        master = parse_master(environ.get(AgentEnv.FABRIC_MASTER, ""), AgentEnv.FABRIC_MASTER)
    return FabricPlan(
        rank=rank,
        world=len(nodes),
        master=master,
        group=environ.get(AgentEnv.FABRIC_GROUP) or DEFAULT_GROUP,
        node=str(nodes[rank]),
        config=config,
        nodes=[str(n) for n in nodes],
        master_pod=master_pod,
    )


def make_executor(args: argparse.Namespace, plan: FabricPlan, stop: threading.Event) -> Executor:
    chosen = args.backend or os.environ.get(AgentEnv.BACKEND) or "cuda"
    if chosen == "simulated":
        text = args.simulate if args.simulate is not None else os.environ.get(AgentEnv.SIMULATE)
        simulation = SimulationConfig.parse(text or "{}")
        if args.gpus is not None:
            simulation.gpus = args.gpus
        return SimulatedFabric(simulation, plan.config, plan.node, stop)
    if chosen != "cuda":
        raise AgentError(f"backend {chosen!r} is not known; use one of {', '.join(BACKENDS)}")
    from gpuval_agent.fabric.torchfabric import TorchFabric  # noqa: PLC0415 - the real stack

    return TorchFabric(
        plan.config, plan.master, plan.group, stop, gpus=args.gpus, test_hang=args.test_hang
    )


def say_wait(wait: FabricWait) -> None:
    """While the group forms, every few seconds: who joined, who is awaited, the time left (on
    stderr: by hand, and in the fabric pod's log)."""
    print(f"gpuval-agent: {describe_wait(wait)}", file=sys.stderr, flush=True)


# Rank 0's (IP, port) for a plan that names rank 0's pod, waiting until the stop event is set.
FindMaster = Callable[[threading.Event], tuple[str, int]]


def _measure(
    args: argparse.Namespace, plan: FabricPlan, find_master: FindMaster | None = None
) -> FabricResult | None:
    """The result, or None when a signal stopped it."""
    stop = threading.Event()
    stop_on_signals(stop)
    unknown: MasterUnknownError | None = None
    if find_master is not None:
        try:
            plan = dataclasses.replace(plan, master=find_master(stop))
        except StoppedError:
            return None
        except MasterUnknownError as error:
            unknown = error
    executor = make_executor(args, plan, stop)
    try:
        if unknown is not None:
            return master_unknown(plan, executor, str(unknown))
        return run_fabric(plan, executor, stop, on_wait=say_wait)
    except StoppedError:
        return None
    finally:
        executor.close()


def _say(line: str) -> None:
    print(f"gpuval-agent: {line}", file=sys.stderr, flush=True)


def master_finder(server: ApiServer, plan: FabricPlan) -> FindMaster | None:
    """How this rank learns rank 0's address from its pod (None: its plan has the address)."""
    pod = plan.master_pod
    if pod is None:
        return None
    reader = PodReader(server)
    seconds = plan.config.timeouts.gang_seconds
    return lambda stop: locate_master(reader.pod, pod, seconds=seconds, stop=stop, say=_say)


def cmd_fabric(args: argparse.Namespace) -> int:
    if args.cluster:
        return cmd_fabric_cluster(args)
    plan = plan_from_args(args)
    result = _measure(args, plan)
    if result is None:
        print("gpuval-agent: fabric stopped by a signal", file=sys.stderr)
        return EXIT_INTERRUPTED
    print(render_fabric(result), file=sys.stderr if args.json_path == "-" else sys.stdout)
    if args.json_path:
        text = result.model_dump_json(by_alias=True, indent=2) + "\n"
        if args.json_path == "-":
            sys.stdout.write(text)
        else:
            Path(args.json_path).write_text(text)
    return verdict_exit_code(result.verdict)


def cmd_fabric_cluster(args: argparse.Namespace) -> int:
    report = os.environ.get(AgentEnv.REPORT_NAME)
    if not report:
        raise AgentError(f"{AgentEnv.REPORT_NAME} is not set: the operator names the report")
    server = ApiServer.in_cluster()
    writer = ReportWriter(server, report, deadline=deadline_from_env(os.environ))
    plan = plan_from_env(os.environ)
    result = _measure(args, plan, master_finder(server, plan))
    if result is None:
        raise AgentError("stopped before the fabric finished; the report is left to the operator")
    print(render_fabric(result), file=sys.stderr)
    fabric = build_fabric_status(result)
    write_termination_text(build_fabric_termination_message(fabric))
    try:
        writer.patch_status({str(StatusKey.FABRIC): fabric})
    except ReportUnreachableError as error:
        print(f"gpuval-agent: {error}; the verdict is in the termination message", file=sys.stderr)
    return verdict_exit_code(result.verdict)
