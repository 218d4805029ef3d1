"""`kubectl gpuval` (the kubectl-gpuval script): arguments, the reads, what is printed or written,
and `release`, its one write (an annotation on the GpuValidation: gpuval_api.release).

Exit codes: 0 shown (or written), 1 the API, the credentials or the file said no, or there is
nothing to write (`evidence` of a node that passed; the message says why), 2 bad arguments.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import urllib3

from gpuval_api.evidence import EvidenceError, decode_evidence, evidence_gzip
from gpuval_api.views import FleetView, fleet_of_units
from gpuval_kubectl import evidence
from gpuval_kubectl.cluster import Cluster, PluginError, connect
from gpuval_kubectl.render import render_list, render_release, render_status

STDOUT = "-"


def write_html(view: FleetView, path: Path) -> Path:
    try:
        from gpuval_report import write_page  # noqa: PLC0415 - optional, heavy (plotly)
    except ImportError:
        raise PluginError(
            "kubectl gpuval report needs the report extra: pip install 'kubectl-gpuval[report]'"
        ) from None
    try:
        return write_page(view, path)
    except OSError as error:
        raise PluginError(f"--html {str(path)!r}: cannot write the report: {error}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kubectl gpuval", description="See gpuval's verdicts.")
    parser.add_argument(
        "--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)"
    )
    parser.add_argument("--context", help="the kubeconfig context to use (default: its current)")
    sub = parser.add_subparsers(dest="command", required=True)
    status = sub.add_parser("status", help="every GpuValidation, or one in detail")
    status.add_argument("name", nargs="?", help="a GpuValidation's name")
    report = sub.add_parser("report", help="write a self-contained HTML report of a GpuValidation")
    report.add_argument("name", help="a GpuValidation's name")
    report.add_argument(
        "--html", required=True, type=Path, metavar="FILE", help="where to write it"
    )
    release = sub.add_parser(
        "release",
        help="release a GpuValidation's held node actions (the circuit breaker, a systemic hold)",
    )
    release.add_argument("name", help="a GpuValidation's name")
    found = sub.add_parser(
        evidence.COMMAND,
        help="write a failing node's evidence bundle (gzip JSON) to a file",
        description="Writes the evidence bundle of the node's latest Failed GpuNodeReport "
        "(gzip-compressed JSON, its sha256 checked) and says what it holds.",
    )
    found.add_argument("node", help="the node's name")
    found.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="where to write it (default: NODE-evidence.json.gz; '-': the JSON on stdout)",
    )
    found.add_argument("--validation", help="only this GpuValidation's reports of the node")
    found.add_argument("--run", help="only this run's report (a run id, status.run.id)")
    return parser


def write_evidence(cluster: Cluster, args: argparse.Namespace) -> str:
    """The chosen report's bundle, checked against its sha256, into the file (or stdout)."""
    reports = cluster.node_reports(args.node, args.validation, args.run)
    try:
        chosen, later = evidence.choose(reports, args.node, args.validation, args.run)
        bundle = chosen.evidence or {}
        document = decode_evidence(bundle)
        compressed = evidence_gzip(bundle)
    except evidence.NoEvidenceError as error:
        raise PluginError(str(error)) from None
    except EvidenceError as error:
        raise PluginError(f"{chosen.label()}: {error}") from None
    if args.output == STDOUT:
        return json.dumps(document, indent=2)
    path = Path(args.output or f"{args.node}-evidence.json.gz")
    try:
        path.write_bytes(compressed)
    except OSError as error:
        raise PluginError(f"-o {str(path)!r}: cannot write the evidence: {error}") from None
    written = f"wrote {path.resolve()} ({len(compressed)} bytes, gzip)"
    return evidence.describe(chosen, later, document, written)


def show(cluster: Cluster, args: argparse.Namespace) -> str:
    """What the command prints (the report or the evidence is written as a side effect)."""
    if args.command == "release":
        return render_release(*cluster.release(args.name, time.time()))
    if args.command == evidence.COMMAND:
        return write_evidence(cluster, args)
    if args.name is None:
        return render_list(cluster.validations())
    validation = cluster.validation(args.name)
    view = fleet_of_units(validation, cluster.units(validation))
    if args.command == "report":
        path = write_html(view, args.html)
        return f"wrote {path.resolve()} ({len(view.units)} nodes)"
    return render_status(view, validation, time.time())


def run(args: argparse.Namespace) -> str:
    with connect(args.kubeconfig, args.context) as login:
        try:
            return show(Cluster(login), args)
        except urllib3.exceptions.HTTPError as error:
            host = login.identity.server
            raise PluginError(f"cannot reach the API server at {host}: {error}") from None


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        print(run(args))
    except PluginError as error:
        print(f"kubectl gpuval: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
