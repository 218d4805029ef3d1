"""`gpuval-agent run` (any GPU machine), `gpuval-agent cluster` (the agent pod) and
`gpuval-agent fabric` (NCCL across machines, by hand or in the fabric pod: gpuval_agent.fabric).

Exit codes: 0 every check passed, 1 a check failed, 2 the agent itself could not run (the reason
is on stderr; in cluster mode also in the report when it could still be written), 3 not tested:
nothing failed, but a GPU was not tested because another process used it (GpuInUse: the table
names the GPU, the process and what to do; run again once it is free), and for `run` 130 when
SIGTERM/SIGINT stopped it before the checks finished (it prints the partial table). A stopped
`cluster` agent exits 2 and writes no final report: the operator writes why it stopped (evicted,
deleted, timed out), which a partial result must not overwrite. The cluster front end lives in
gpuval_agent.cluster.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

from pydantic import ValidationError

from gpuval_agent import __version__
from gpuval_agent import baseline as baselines
from gpuval_agent.backends import BACKENDS, select_backend
from gpuval_agent.cluster import cmd_cluster
from gpuval_agent.display import Display, render_table
from gpuval_agent.errors import AgentError
from gpuval_agent.evidence import build_evidence
from gpuval_agent.fabric.frontend import add_fabric_parser, cmd_fabric
from gpuval_agent.outcome import (
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    exit_code,
    start_metrics,
    stop_on_signals,
    validation_message,
)
from gpuval_agent.record import RunRecord
from gpuval_agent.runner import run_checks
from gpuval_agent.watch import POLL_SECONDS
from gpuval_api.baselinemodel import BaselineSettings
from gpuval_api.checks import CheckName, ChecksConfig, Precision, Profile, camel
from gpuval_api.evidence import evidence_gzip, evidence_status
from gpuval_api.fabric import FABRIC_SUBCOMMAND
from gpuval_api.machine import machine_view
from gpuval_api.result import AgentResult

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def _size(text: str) -> int:
    """'4G' -> 4 GiB, '512M', '1048576'."""
    value = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = value[-1] if value and value[-1] in _UNITS else ""
    try:
        return int(float(value[: len(value) - len(unit)]) * _UNITS[unit])
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a size; give bytes or a number with K, M or G (e.g. 4G)"
        ) from None


def _names(text: str) -> list[CheckName]:
    names = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        try:
            names.append(CheckName(part))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"--checks: {part!r} is not a check; choose from "
                f"{', '.join(c.value for c in CheckName)}"
            ) from None
    return names


def _precisions(text: str) -> list[Precision]:
    found = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        try:
            found.append(Precision(part))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"--precisions: {part!r} is not a precision; choose from "
                f"{', '.join(p.value for p in Precision)}"
            ) from None
    return found


def _fraction(text: str) -> float:
    """--baseline-fraction, within spec.baseline.fraction's bounds."""
    try:
        return BaselineSettings.model_validate({"fraction": text}).fraction
    except ValidationError as error:
        raise argparse.ArgumentTypeError(
            f"--baseline-fraction: {text!r}: {error.errors()[0]['msg']}; e.g. 0.1 fails a figure "
            "below 0.9 of its baseline"
        ) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpuval-agent", description="Prove this machine's NVIDIA GPUs are fit for work."
    )
    parser.add_argument("--version", action="version", version=f"gpuval-agent {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="validate this machine's GPUs and print a table")
    run.add_argument(
        "--checks",
        type=_names,
        help="comma-separated checks (default: all but memory): "
        + ",".join(c.value for c in CheckName),
    )
    run.add_argument(
        "--profile",
        choices=[p.value for p in Profile],
        help="a named check list: default (all but memory and train), full (every check but "
        "dcgm: adds the memory test and the training step); --checks overrides it",
    )
    run.add_argument("--duration", type=float, help="burn seconds per precision (default 60)")
    run.add_argument("--precisions", type=_precisions, help="burn precisions, e.g. bf16,tf32,fp64")
    run.add_argument("--matrix-size", type=int, help="burn GEMM size n (default 16384)")
    run.add_argument("--transfer-size", type=_size, help="bandwidth copy size (default 1G)")
    run.add_argument("--nccl-max-size", type=_size, help="largest all-reduce (default 4G)")
    run.add_argument("--expected-gpus", type=int, help="fail unless exactly this many GPUs show")
    run.add_argument("--config", type=Path, help="ChecksConfig JSON file (flags override it)")
    run.add_argument(
        "--json", dest="json_path", help="write the result document here ('-': stdout)"
    )
    run.add_argument(
        "--html", type=Path, help="also write a self-contained HTML report here (report extra)"
    )
    run.add_argument(
        "--evidence",
        type=Path,
        help="write the evidence bundle (gzip JSON, at most 64 KiB encoded) here, whatever the "
        "verdict",
    )
    run.add_argument(
        "--baseline",
        default=baselines.SHIPPED,
        help="compare with this GpuBaseline YAML file (then the shipped ones); 'shipped' "
        "(default): the baselines shipped with gpuval (H200); 'none': no baseline rule",
    )
    run.add_argument(
        "--baseline-fraction",
        type=_fraction,
        default=BaselineSettings().fraction,
        help="BelowBaseline when a figure is below (1 - this) x its baseline (default 0.1)",
    )
    run.add_argument("--metrics-port", type=int, help="serve live Prometheus metrics on this port")
    run.add_argument("--backend", choices=BACKENDS, help="GPU backend (default cuda)")
    run.add_argument("--simulate", help="simulated backend's configuration JSON (test double)")
    run.add_argument("--quiet", action="store_true", help="no progress line")
    # The benchmark of the in-use poll's cost: its period in seconds, 0 to turn it off.
    run.add_argument("--test-inuse-poll", type=float, default=POLL_SECONDS, help=argparse.SUPPRESS)
    cluster = sub.add_parser("cluster", help="in-cluster mode: write this node's GpuNodeReport")
    cluster.add_argument("--backend", choices=BACKENDS)
    cluster.add_argument("--simulate")
    add_fabric_parser(sub, _size)
    return parser


def _base_config(args: argparse.Namespace) -> ChecksConfig:
    """--config's document (or the defaults), with --profile's checks turned on."""
    text = args.config.read_text() if args.config is not None else "{}"
    try:
        document = json.loads(text)
    except ValueError:
        document = None
    if not args.profile or not isinstance(document, dict):
        # pydantic's own parse names where a broken document breaks.
        return ChecksConfig.model_validate_json(text)
    return ChecksConfig.model_validate(document | {"profile": args.profile})


def config_from_args(args: argparse.Namespace) -> ChecksConfig:
    config = _base_config(args)
    updates: dict[str, dict[str, object]] = {}
    if args.duration is not None:
        updates.setdefault("burn", {})["duration_seconds"] = args.duration
    if args.precisions:
        updates.setdefault("burn", {})["precisions"] = args.precisions
    if args.matrix_size is not None:
        updates.setdefault("burn", {})["matrix_size"] = args.matrix_size
    if args.transfer_size is not None:
        updates.setdefault("bandwidth", {})["transfer_mib"] = max(1, args.transfer_size >> 20)
    if args.nccl_max_size is not None:
        updates.setdefault("nccl", {})["max_bytes"] = args.nccl_max_size
        updates["nccl"]["min_bytes"] = min(config.nccl.min_bytes, args.nccl_max_size)
    if args.expected_gpus is not None:
        updates.setdefault("driver", {})["expected_gpus"] = args.expected_gpus
    # Validate the merged document, so a bad flag is reported with the field it sets.
    merged = config.model_dump(by_alias=True)
    for section, values in updates.items():
        merged[section].update({camel(key): value for key, value in values.items()})
    config = ChecksConfig.model_validate(merged)
    if args.checks:
        config = config.only(args.checks)
    return config


def _write_json(result: AgentResult, path: str) -> None:
    if path == "-":
        sys.stdout.write(result.to_json() + "\n")
    else:
        Path(path).write_text(result.to_json() + "\n")


def _html_writer(path: Path | None) -> Callable[[AgentResult], None] | None:
    """The --html writer, resolved before the checks run: a missing extra is said at once, not
    after a minute of burn."""
    if path is None:
        return None
    try:
        from gpuval_report import write_page  # noqa: PLC0415 - optional, heavy (plotly)
    except ImportError:
        raise AgentError(
            "--html needs the report extra: pip install 'gpuval-agent[report]'"
        ) from None

    def write(result: AgentResult) -> None:
        try:
            write_page(machine_view(result), path)
        except OSError as error:
            raise AgentError(f"--html {str(path)!r}: cannot write the report: {error}") from None

    return write


def cmd_run(args: argparse.Namespace) -> int:
    try:
        config = config_from_args(args)
    except ValidationError as error:
        raise AgentError(validation_message(error, "the checks configuration")) from None
    write_html = _html_writer(args.html)
    compare_with = baselines.candidates(args.baseline)
    backend = select_backend(args.backend, args.simulate)
    metrics = start_metrics(args.metrics_port, backend.name)
    display = Display(metrics=metrics, quiet=args.quiet)
    stop = threading.Event()
    stop_on_signals(stop)
    record = RunRecord()
    try:
        result = run_checks(
            config,
            backend,
            display,
            on_samples=display.samples,
            stop=stop,
            record=record,
            on_reading=display.state_reading,
            inuse_poll=args.test_inuse_poll or None,
        )
    finally:
        display.close()
        backend.close()
    if args.baseline != baselines.NONE:
        result = baselines.judge(result, compare_with, args.baseline_fraction)
    table_stream = sys.stderr if args.json_path == "-" else sys.stdout
    print(render_table(result), file=table_stream)
    if args.json_path:
        _write_json(result, args.json_path)
    if write_html is not None:
        write_html(result)
    if args.evidence is not None:
        _write_evidence(result, record, args.evidence, table_stream)
    return exit_code(result)


def _write_evidence(result: AgentResult, record: RunRecord, path: Path, stream: TextIO) -> None:
    bundle = build_evidence(result, record)
    try:
        path.write_bytes(evidence_gzip(evidence_status(bundle)))
    except OSError as error:
        raise AgentError(f"--evidence {str(path)!r}: cannot write the bundle: {error}") from None
    cut = f"; cut: {'; '.join(bundle.cut)}" if bundle.cut else ""
    print(
        f"evidence: {path} ({bundle.json_bytes} bytes of JSON, {bundle.encoded_bytes} encoded, "
        f"sections {', '.join(bundle.sections)}{cut})",
        file=stream,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "run":
            return cmd_run(args)
        if args.command == FABRIC_SUBCOMMAND:
            return cmd_fabric(args)
        return cmd_cluster(args)
    except AgentError as error:
        print(f"gpuval-agent: {error}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("gpuval-agent: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def entry() -> None:
    """The console script: `main`, then an exit that skips the interpreter's teardown (torch's
    and CUDA's take over a second on 2x H200, after every result is written and flushed)."""
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    entry()
