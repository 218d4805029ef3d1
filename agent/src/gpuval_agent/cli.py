"""`gpuval-agent run` (any GPU machine) and `gpuval-agent cluster` (the agent pod).

Exit codes: 0 every check passed, 1 a check failed, 2 the agent itself could not run (the reason
is on stderr; in cluster mode also in the report when it could still be written), and for `run`
130 when SIGTERM/SIGINT stopped it before the checks finished (it prints the partial table). A
stopped `cluster` agent exits 2 and writes no final report: the operator writes why it stopped
(evicted, deleted, timed out), which a partial result must not overwrite.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType

from pydantic import ValidationError

from gpuval_agent import __version__
from gpuval_agent.backends import BACKENDS, select_backend
from gpuval_agent.display import Display, render_table
from gpuval_agent.errors import AgentError
from gpuval_agent.kube import ApiServer, ReportWriter
from gpuval_agent.metrics import AgentMetrics
from gpuval_agent.runner import run_checks
from gpuval_api.checks import (
    CHECKS_ENV,
    CheckName,
    ChecksConfig,
    Precision,
    camel,
    parse_checks,
)
from gpuval_api.machine import machine_view
from gpuval_api.reasons import REASONS, Reason
from gpuval_api.report import build_report_status, build_running_status
from gpuval_api.result import AgentResult, CheckResult, Environment, Finding, Verdict

EXIT_PASSED, EXIT_FAILED, EXIT_ERROR, EXIT_INTERRUPTED = 0, 1, 2, 130
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpuval-agent", description="Prove this machine's NVIDIA GPUs are fit for work."
    )
    parser.add_argument("--version", action="version", version=f"gpuval-agent {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="validate this machine's GPUs and print a table")
    run.add_argument("--checks", type=_names, help="comma-separated checks (default: all): "
                     + ",".join(c.value for c in CheckName))  # fmt: skip
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
    run.add_argument("--metrics-port", type=int, help="serve live Prometheus metrics on this port")
    run.add_argument("--backend", choices=BACKENDS, help="GPU backend (default cuda)")
    run.add_argument("--simulate", help="simulated backend's configuration JSON (test double)")
    run.add_argument("--quiet", action="store_true", help="no progress line")
    cluster = sub.add_parser("cluster", help="in-cluster mode: write this node's GpuNodeReport")
    cluster.add_argument("--backend", choices=BACKENDS)
    cluster.add_argument("--simulate")
    return parser


def config_from_args(args: argparse.Namespace) -> ChecksConfig:
    config = parse_checks(args.config.read_text()) if args.config is not None else ChecksConfig()
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


def _validation_message(error: ValidationError, source: str) -> str:
    problems = "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or '(document)'}: {e['msg']} (got {e.get('input')!r})"
        for e in error.errors()[:5]
    )
    return f"{source} is invalid: {problems}"


def _stop_on_signals(stop: threading.Event) -> None:
    def handler(signum: int, _frame: FrameType | None) -> None:
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, handler)


def _write_json(result: AgentResult, path: str) -> None:
    if path == "-":
        sys.stdout.write(result.to_json() + "\n")
    else:
        Path(path).write_text(result.to_json() + "\n")


def _metrics(port: int | None, backend: str) -> AgentMetrics:
    metrics = AgentMetrics()
    metrics.set_backend(backend)
    if port is not None:
        try:
            metrics.serve(port)
        except OSError as error:
            raise AgentError(f"cannot serve metrics on port {port}: {error}") from None
    return metrics


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
        raise AgentError(_validation_message(error, "the checks configuration")) from None
    write_html = _html_writer(args.html)
    backend = select_backend(args.backend, args.simulate)
    metrics = _metrics(args.metrics_port, backend.name)
    display = Display(metrics=metrics, quiet=args.quiet)
    stop = threading.Event()
    _stop_on_signals(stop)
    try:
        result = run_checks(
            config, backend, display, on_samples=display.samples, stop=stop,
        )  # fmt: skip
    finally:
        display.close()
        backend.close()
    table_stream = sys.stderr if args.json_path == "-" else sys.stdout
    print(render_table(result), file=table_stream)
    if args.json_path:
        _write_json(result, args.json_path)
    if write_html is not None:
        write_html(result)
    if result.reason is Reason.AGENT_STOPPED:
        return EXIT_INTERRUPTED
    return EXIT_PASSED if result.verdict is Verdict.PASSED else EXIT_FAILED


def _invalid_config_result(message: str, node: str | None, backend: str) -> AgentResult:
    now = datetime.now(UTC)
    info = REASONS[Reason.INVALID_CONFIG]
    finding = Finding(reason=Reason.INVALID_CONFIG, message=message, hint=info.hint)
    check = CheckResult(
        name="config", verdict=Verdict.FAILED, reason=Reason.INVALID_CONFIG, hint=info.hint,
        message=message, findings=[finding],
    )  # fmt: skip
    return AgentResult(
        agent_version=__version__, backend=backend, node=node, started_at=now, completed_at=now,
        verdict=Verdict.FAILED, reason=Reason.INVALID_CONFIG, message=message,
        checks_config=ChecksConfig(), environment=Environment(), checks=[check],
    )  # fmt: skip


def cmd_cluster(args: argparse.Namespace) -> int:
    report = os.environ.get("GPUVAL_REPORT_NAME")
    if not report:
        raise AgentError("GPUVAL_REPORT_NAME is not set: the operator names the report to write")
    node = os.environ.get("GPUVAL_NODE_NAME")
    writer = ReportWriter(ApiServer.in_cluster(), report)
    started = datetime.now(UTC)
    writer.patch_status(build_running_status(started, f"agent {__version__} started on {node}"))
    backend_name = args.backend or os.environ.get("GPUVAL_BACKEND") or "cuda"
    try:
        config = parse_checks(os.environ.get(CHECKS_ENV) or "{}")
        expected_text = os.environ.get("GPUVAL_EXPECTED_GPUS")
        expected = int(expected_text) if expected_text else None
    except (ValidationError, ValueError) as error:
        message = (
            _validation_message(error, CHECKS_ENV)
            if isinstance(error, ValidationError)
            else f"GPUVAL_EXPECTED_GPUS={os.environ.get('GPUVAL_EXPECTED_GPUS')!r} is not a "
            "whole number of GPUs"
        )
        writer.patch_status(
            build_report_status(_invalid_config_result(message, node, backend_name))
        )
        raise AgentError(message) from None
    port_text = os.environ.get("GPUVAL_METRICS_PORT")
    backend = select_backend(args.backend, args.simulate)
    metrics = _metrics(int(port_text) if port_text else None, backend.name)
    display = Display(metrics=metrics)
    stop = threading.Event()
    _stop_on_signals(stop)
    try:
        result = run_checks(
            config, backend, display, node=node, expected_gpus=expected,
            expected_gpus_source="the node's nvidia.com/gpu (GPUVAL_EXPECTED_GPUS)",
            on_samples=display.samples, stop=stop,
        )  # fmt: skip
    finally:
        display.close()
        backend.close()
    print(render_table(result), file=sys.stderr)
    if result.reason is Reason.AGENT_STOPPED:
        # Stopped means evicted, deleted or timed out: the operator writes that reason, and a
        # partial result written now could overwrite it.
        raise AgentError("stopped before the checks finished; the report is left to the operator")
    writer.patch_status(build_report_status(result))
    return EXIT_PASSED if result.verdict is Verdict.PASSED else EXIT_FAILED


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "run":
            return cmd_run(args)
        return cmd_cluster(args)
    except AgentError as error:
        print(f"gpuval-agent: {error}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("gpuval-agent: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
