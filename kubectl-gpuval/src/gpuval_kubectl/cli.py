"""`kubectl gpuval` (the kubectl-gpuval script): arguments, the reads, what is printed or written,
and `release`, its one write to a GpuValidation (an annotation: gpuval_api.release). `status` and
`report` show a GpuValidation; `baseline` shows, learns, compares, exports and imports GpuBaselines
(gpuval_kubectl.baselines prints them); `evidence` writes a failing node's bundle.

Exit codes: 0 shown (or written), 1 the API, the credentials or the file said no, or there is
nothing to write (`evidence` of a node that passed; the message says why), 2 bad arguments.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import urllib3
from pydantic import ValidationError

from gpuval_api.baseline import files, fleet
from gpuval_api.baselinemodel import BaselineSettings, GpuBaselineSpec
from gpuval_api.crd import GpuBaseline, GpuValidation, ObjectMeta
from gpuval_api.evidence import EvidenceError, decode_evidence, evidence_gzip
from gpuval_api.views import FleetView, fleet_of_units
from gpuval_kubectl import baselines, evidence, imports
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
    release.add_argument(
        "--repair",
        action="store_true",
        help="also ask spec.remediation's engine to repair the nodes of a systemic failure "
        "(without it a release lets their taint and cordon through, never their repairs)",
    )
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
    _baseline_parser(sub.add_parser("baseline", help="show, learn, diff, export, import"))
    return parser


def _baseline_parser(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    show = sub.add_parser("show", help="every GpuBaseline, or one in detail")
    show.add_argument("name", nargs="?", help="a GpuBaseline's name")
    learn = sub.add_parser("learn", help="learn GpuBaselines from a run's passing nodes")
    learn.add_argument("validation", help="the GpuValidation whose run to learn from")
    learn.add_argument("--run", help="the run's id (default: its current run)")
    learn.add_argument(
        "--fraction", type=float, help="leave out nodes off a centre by more (default: spec's)"
    )
    learn.add_argument("--min-nodes", type=int, help="nodes that must agree (default: spec's)")
    learn.add_argument("--name", help="the GpuBaseline's name (one GPU stack only)")
    learn.add_argument("--replace", action="store_true", help="put it over one of the same name")
    learn.add_argument("--dry-run", action="store_true", help="say what it would learn")
    diff = sub.add_parser("diff", help="two baselines figure by figure (names or YAML files)")
    diff.add_argument("first", help="a GpuBaseline's name or a file")
    diff.add_argument("second", help="a GpuBaseline's name or a file")
    export = sub.add_parser("export", help="GpuBaselines as one YAML file")
    export.add_argument("names", nargs="*", help="GpuBaselines (default: every one)")
    export.add_argument("-o", "--output", type=Path, metavar="FILE", help="default: stdout")
    load = sub.add_parser(
        "import", help=f"create the GpuBaselines of a YAML file ({imports.LIMITS})"
    )
    load.add_argument("file", type=Path, help="as `baseline export` writes it")
    load.add_argument("--replace", action="store_true", help="put them over ones of their names")


def _settings(validation: GpuValidation, args: argparse.Namespace) -> BaselineSettings:
    """The validation's spec.baseline (or the defaults) with the flags over it."""
    settings = validation.spec.baseline or BaselineSettings()
    update = {"fraction": args.fraction, "min_nodes": args.min_nodes}
    try:
        return BaselineSettings.model_validate(
            settings.model_dump() | {k: v for k, v in update.items() if v is not None}
        )
    except ValidationError as error:
        problem = error.errors()[0]
        flag = "--" + str(problem["loc"][0]).replace("_", "-")
        raise PluginError(f"{flag}: {problem.get('input')!r}: {problem['msg']}") from None


def learn(cluster: Cluster, args: argparse.Namespace) -> str:
    """`baseline learn`: every GPU stack of the run, from its passing nodes only."""
    validation = cluster.validation(args.validation)
    settings = _settings(validation, args)
    reports = cluster.run_reports(validation, args.run)
    outcomes = fleet.learn_run(
        reports,
        settings,
        validation=args.validation,
        run=reports[0].spec.run,
        at=datetime.now(UTC),
        choose_mode=True,  # a person asked: of a bimodal stack, the better mode
    )
    learned = [o for o in outcomes if o.spec is not None]
    if args.name and len(learned) > 1:
        raise PluginError(
            f"--name {args.name!r}: the run has {len(learned)} GPU stacks; leave --name out to "
            "name each after its key"
        )
    done = []
    for outcome in outcomes:
        made = fleet.learned_object(outcome)
        name = args.name or outcome.key.default_name()
        if made is None or args.dry_run:
            done.append((outcome, name, "would create"))
            continue
        made.metadata.name = name
        done.append((outcome, name, cluster.put_baseline(made, replace=args.replace)))
    return baselines.render_learned(done)


def _one(cluster: Cluster, given: str) -> tuple[str, GpuBaselineSpec]:
    """A baseline named by a file (its only document) or by its name in the cluster."""
    path = Path(given)
    if path.is_file():
        found = _read(path)
        if len(found) != 1:
            raise PluginError(f"{given}: holds {len(found)} GpuBaselines; diff compares one each")
        return f"{given} ({found[0].metadata.name})", found[0].spec
    return given, cluster.baseline(given).spec


def _read(path: Path) -> list[GpuBaseline]:
    try:
        return files.read_file(path)
    except files.BaselineFileError as error:
        raise PluginError(str(error)) from None


def export(cluster: Cluster, args: argparse.Namespace) -> str:
    chosen = [cluster.baseline(n) for n in args.names] if args.names else cluster.baselines()
    if not chosen:
        raise PluginError("no GpuBaselines to export")
    host = cluster.api.configuration.host
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    clean = [GpuBaseline(metadata=ObjectMeta(name=b.metadata.name), spec=b.spec) for b in chosen]
    text = files.to_yaml(
        clean,
        header=f"GpuBaselines exported from {host} at {stamp} by kubectl gpuval baseline "
        "export;\nkubectl gpuval baseline import FILE (or kubectl apply -f FILE) takes them in.",
    )
    if args.output is None:
        return text.rstrip("\n")
    try:
        args.output.write_text(text)
    except OSError as error:
        raise PluginError(f"--output {str(args.output)!r}: cannot write it: {error}") from None
    return f"wrote {len(clean)} GpuBaselines to {args.output}"


def baseline(cluster: Cluster, args: argparse.Namespace) -> str:
    """What `kubectl gpuval baseline ACTION` prints."""
    match args.action:
        case "show" if args.name:
            return baselines.render_one(cluster.baseline(args.name))
        case "show":
            return baselines.render_list(cluster.baselines())
        case "learn":
            return learn(cluster, args)
        case "diff":
            return baselines.render_diff(_one(cluster, args.first), _one(cluster, args.second))
        case "export":
            return export(cluster, args)
        case _:
            return imports.import_file(cluster, args.file, replace=args.replace)


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
        return render_release(*cluster.release(args.name, time.time(), repair=args.repair))
    if args.command == evidence.COMMAND:
        return write_evidence(cluster, args)
    if args.command == "baseline":
        return baseline(cluster, args)
    if args.name is None:
        return render_list(cluster.validations())
    validation = cluster.validation(args.name)
    units, judged = cluster.units(validation)
    view = fleet_of_units(validation, units, cluster.judged_against(judged))
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
