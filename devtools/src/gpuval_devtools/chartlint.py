"""The chart's lint (``make chart-lint``): kubeconform, kube-score and checkov on charts/gpuval
rendered with its defaults and with every option on, each finding compared with the justified
ones in charts/gpuval/lint-findings.yaml (gpuval_devtools.chartfindings).

kubeconform validates strictly (no unknown field) against schemas vendored under
charts/schemas/kubeconform: the Kubernetes kinds made from the local API server's OpenAPI v3
(the version the tests run), the Prometheus Operator's from its CRDs in its Go module, both by
``vendor-schemas``; gpuval's own CRDs are converted from crds/ at each run, and the examples
(examples/*.yaml, the chart's Artifact Hub example) are validated against them.

Command line: ``python -m gpuval_devtools.chartlint [run|vendor-schemas]``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpuval_devtools import chartfindings as cf
from gpuval_devtools import chartschemas as cs
from gpuval_devtools.binaries import KUBE_VERSION, ChartTools, build, chart_tools
from gpuval_devtools.buildsteps import REPO_ROOT, BuildError, Log, cache_dir, go_env, stderr_log
from gpuval_devtools.controlplane import running_cluster

CHART = REPO_ROOT / "charts" / "gpuval"
FINDINGS_FILE = CHART / "lint-findings.yaml"
SCHEMA_DIR = REPO_ROOT / "charts" / "schemas" / "kubeconform"
CRD_DIR = REPO_ROOT / "crds"
EXAMPLES = REPO_ROOT / "examples"
# The scenarios the tools see: the defaults, and every option on.
SCENARIOS: dict[str, tuple[Path, ...]] = {
    "defaults": (),
    "all-on": (CHART / "ci" / "all-on-values.yaml",),
}
RELEASE, NAMESPACE = "gpuval", "gpuval-system"

# The kinds the chart renders in any scenario, and Pod (the `helm test` pod): their schemas are
# vendored. A kind not here fails kubeconform ("could not find schema"): add it and run
# `python -m gpuval_devtools.chartlint vendor-schemas`.
KUBERNETES_KINDS = (
    cs.Gvk("", "v1", "ConfigMap"),
    cs.Gvk("", "v1", "Namespace"),
    cs.Gvk("", "v1", "Pod"),
    cs.Gvk("", "v1", "Service"),
    cs.Gvk("", "v1", "ServiceAccount"),
    cs.Gvk("admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicy"),
    cs.Gvk("admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicyBinding"),
    cs.Gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
    cs.Gvk("apps", "v1", "Deployment"),
    cs.Gvk("networking.k8s.io", "v1", "NetworkPolicy"),
    cs.Gvk("policy", "v1", "PodDisruptionBudget"),
    cs.Gvk("rbac.authorization.k8s.io", "v1", "ClusterRole"),
    cs.Gvk("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding"),
    cs.Gvk("rbac.authorization.k8s.io", "v1", "Role"),
    cs.Gvk("rbac.authorization.k8s.io", "v1", "RoleBinding"),
    cs.Gvk("scheduling.k8s.io", "v1", "PriorityClass"),
)
# The Prometheus Operator's CRDs (ServiceMonitor, PrometheusRule), from its Go module's
# example/prometheus-operator-crd/ through the Go module proxy.
PROMETHEUS_OPERATOR_MODULE = "github.com/prometheus-operator/prometheus-operator"
PROMETHEUS_OPERATOR_VERSION = "v0.85.0"
PROMETHEUS_OPERATOR_CRDS = ("servicemonitors", "prometheusrules")


@dataclass(frozen=True)
class LintResult:
    findings: list[cf.Finding]
    # Per scenario (kubeconform's over every file it validated: "all"), per tool.
    counts: dict[str, dict[str, cf.Counts]]
    verdict: cf.Verdict


def render(values_files: Sequence[Path], *, include_crds: bool = False) -> str:
    """`helm template` of the chart (tests included) as the lint sees it."""
    helm = build(log=lambda _m: None).helm
    argv = [str(helm), "template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    argv += ["--kube-version", KUBE_VERSION.lstrip("v")]
    if include_crds:
        argv.append("--include-crds")
    for path in values_files:
        argv += ["--values", str(path)]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)
    if proc.returncode != 0:
        raise BuildError(f"helm template failed ({proc.returncode}):\n{proc.stderr}")
    return proc.stdout


def _tool(argv: Sequence[str], *, ok_codes: Iterable[int] = (0, 1)) -> str:
    """A lint tool's stdout; an exit code outside ``ok_codes`` (1: it found something) is a
    failure of the tool itself, reported with its stderr."""
    proc = subprocess.run(list(argv), capture_output=True, text=True, check=False, timeout=600)
    if proc.returncode not in set(ok_codes):
        raise BuildError(
            f"{Path(argv[0]).name} exited {proc.returncode}: {' '.join(argv[1:])}\n"
            f"{proc.stderr[-3000:]}"
        )
    return proc.stdout


def write_crd_schemas(crd_files: Iterable[Path], out: Path) -> None:
    """gpuval's CRDs as kubeconform schemas under ``out`` (cs.LOCATION_TEMPLATE)."""
    for path in crd_files:
        for gvk, schema in cs.crd_schemas(yaml.safe_load(path.read_text())).items():
            target = out / gvk.schema_path()
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(json.dumps(schema, indent=1, sort_keys=True) + "\n")


def _examples(work: Path) -> Path:
    """examples/*.yaml and the chart's Artifact Hub example, in one file to validate."""
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    docs: list[Any] = yaml.safe_load(chart["annotations"]["artifacthub.io/crdsExamples"])
    for path in sorted(EXAMPLES.glob("*.yaml")):
        docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    target = work / "examples.yaml"
    target.write_text(yaml.safe_dump_all(docs))
    return target


def kubeconform(tools: ChartTools, files: Sequence[Path], crd_schemas: Path) -> str:
    return _tool(
        [
            str(tools.kubeconform),
            "-strict",
            "-summary",
            "-output",
            "json",
            "-kubernetes-version",
            KUBE_VERSION.lstrip("v"),
            "-schema-location",
            str(SCHEMA_DIR / cs.LOCATION_TEMPLATE),
            "-schema-location",
            str(crd_schemas / cs.LOCATION_TEMPLATE),
            *map(str, files),
        ]
    )


def kube_score(tools: ChartTools, manifest: Path) -> str:
    major_minor = ".".join(KUBE_VERSION.split(".")[:2])
    argv = [str(tools.kube_score), "score", "--output-format", "json"]
    return _tool([*argv, "--kubernetes-version", major_minor, str(manifest)])


def checkov(tools: ChartTools, manifest: Path) -> str:
    # --skip-download: no policy or guideline download (the machines reach no such service).
    argv = [str(tools.checkov), "--framework", "kubernetes", "--output", "json", "--compact"]
    return _tool([*argv, "--skip-download", "--file", str(manifest)])


def lint(*, log: Log = stderr_log) -> LintResult:
    """Renders every scenario, runs the three tools on it, compares with the justified list."""
    tools = chart_tools(log=log)
    findings: list[cf.Finding] = []
    counts: dict[str, dict[str, cf.Counts]] = {}
    with tempfile.TemporaryDirectory(prefix="gpuval-chartlint-") as tmp:
        work = Path(tmp)
        crd_schemas = work / "crd-schemas"
        write_crd_schemas(sorted(CRD_DIR.glob("*.yaml")), crd_schemas)
        validated = [_examples(work)]
        for name, values in SCENARIOS.items():
            manifest = work / f"{name}.yaml"
            manifest.write_text(render(values))
            with_crds = work / f"{name}-with-crds.yaml"
            with_crds.write_text(render(values, include_crds=True))
            validated.append(with_crds)
            scored, score_counts = cf.kube_score_findings(kube_score(tools, manifest))
            checked, checkov_counts = cf.checkov_findings(
                checkov(tools, manifest), manifest.read_text()
            )
            findings += scored + checked
            counts[name] = {"kube-score": score_counts, "checkov": checkov_counts}
        conformed, conform_counts = cf.kubeconform_findings(
            kubeconform(tools, validated, crd_schemas)
        )
        findings += conformed
        counts["all"] = {"kubeconform": conform_counts}
    justified = cf.parse_justifications(FINDINGS_FILE.read_text(), str(FINDINGS_FILE))
    return LintResult(
        findings=cf.unique(findings),
        counts=counts,
        verdict=cf.compare(findings, justified),
    )


def _openapi_documents(kubectl: Path, kubeconfig: Path, gvks: Iterable[cs.Gvk]) -> list[Any]:
    def raw(path: str) -> Any:
        argv = [str(kubectl), "--kubeconfig", str(kubeconfig), "get", "--raw", path]
        proc = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=120)
        return json.loads(proc.stdout)

    index = raw("/openapi/v3")["paths"]
    wanted = sorted({f"apis/{g.api_version}" if g.group else f"api/{g.version}" for g in gvks})
    return [raw(index[path]["serverRelativeURL"]) for path in wanted]


def kubernetes_schemas(kubectl: Path, kubeconfig: Path) -> dict[cs.Gvk, dict[str, Any]]:
    """The vendored kinds' schemas as the API server behind ``kubeconfig`` serves them."""
    documents = _openapi_documents(kubectl, kubeconfig, KUBERNETES_KINDS)
    return cs.wanted_schemas(documents, KUBERNETES_KINDS)


def prometheus_operator_schemas(*, log: Log) -> dict[cs.Gvk, dict[str, Any]]:
    """ServiceMonitor's and PrometheusRule's schemas from the Prometheus Operator's CRDs."""
    module = f"{PROMETHEUS_OPERATOR_MODULE}@{PROMETHEUS_OPERATOR_VERSION}"
    log(f"go mod download {module}")
    proc = subprocess.run(
        ["go", "mod", "download", "-json", module],
        env=go_env(cache_dir()),
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
        cwd=tempfile.gettempdir(),
    )
    if proc.returncode != 0:
        raise BuildError(f"go mod download {module} failed:\n{proc.stdout}\n{proc.stderr}")
    crd_dir = Path(json.loads(proc.stdout)["Dir"]) / "example" / "prometheus-operator-crd"
    out: dict[cs.Gvk, dict[str, Any]] = {}
    for plural in PROMETHEUS_OPERATOR_CRDS:
        crd = yaml.safe_load((crd_dir / f"monitoring.coreos.com_{plural}.yaml").read_text())
        out.update(cs.crd_schemas(crd))
    return out


def schema_files(schemas: dict[cs.Gvk, dict[str, Any]]) -> dict[str, str]:
    """Relative path -> the file's text, as vendored."""
    return {
        gvk.schema_path(): json.dumps(schema, indent=1, sort_keys=True) + "\n"
        for gvk, schema in sorted(schemas.items())
    }


def vendor_schemas(kubeconfig: Path, *, log: Log = stderr_log) -> list[Path]:
    """Rewrites charts/schemas/kubeconform from the API server and the Prometheus Operator."""
    kubectl = build(log=log).kubectl
    files = schema_files(
        {**kubernetes_schemas(kubectl, kubeconfig), **prometheus_operator_schemas(log=log)}
    )
    written = []
    for relative, text in files.items():
        target = SCHEMA_DIR / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        written.append(target)
    stale = {p for p in SCHEMA_DIR.rglob("*.json")} - set(written)
    for path in stale:
        path.unlink()
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gpuval_devtools.chartlint", description=__doc__
    )
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("run", help="lint the rendered chart (the default)")
    vendor = sub.add_parser(
        "vendor-schemas", help="rewrite charts/schemas/kubeconform from a running API server"
    )
    vendor.add_argument("--kubeconfig", type=Path, help="default: start a local control plane")
    args = parser.parse_args(argv)
    try:
        if args.command == "vendor-schemas":
            return _vendor(args.kubeconfig)
        result = lint()
    except (BuildError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    for scenario, counts in result.counts.items():
        print(f"{scenario}: {cf.summary(counts)}")
    for finding in result.findings:
        print(f"  {finding.line()}")
    if not result.verdict.ok:
        print(result.verdict.explain(str(FINDINGS_FILE.relative_to(REPO_ROOT))), file=sys.stderr)
        return 1
    print(f"every finding is justified in {FINDINGS_FILE.relative_to(REPO_ROOT)}")
    return 0


def _vendor(kubeconfig: Path | None) -> int:
    if kubeconfig is not None:
        written = vendor_schemas(kubeconfig)
    else:
        with running_cluster("gpuval-schemas") as cluster:
            written = vendor_schemas(cluster.kubeconfig)
    print(f"wrote {len(written)} schemas under {SCHEMA_DIR.relative_to(REPO_ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
