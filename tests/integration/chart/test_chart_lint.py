"""`make chart-lint`: kubeconform (strict, vendored schemas), kube-score and checkov on the chart
rendered with its defaults and with every option on; every finding left is justified in
charts/gpuval/lint-findings.yaml (gpuval_devtools.chartlint). The vendored schemas are what the
API server of the tests serves, and strict: an unknown field fails. The chart README is what
helm-docs makes of values.yaml now."""

from __future__ import annotations

from pathlib import Path

import yaml

from gpuval_devtools import chartdocs, chartlint
from gpuval_devtools.binaries import chart_tools
from gpuval_devtools.chartfindings import kubeconform_findings, summary
from gpuval_devtools.controlplane import Cluster


def test_the_rendered_chart_has_no_finding_that_is_not_justified() -> None:
    result = chartlint.lint(log=lambda _m: None)

    for scenario, counts in result.counts.items():
        print(f"{scenario}: {summary(counts)}")
    assert result.verdict.ok, result.verdict.explain("charts/gpuval/lint-findings.yaml")
    # kubeconform validated every object of both scenarios and every example: none skipped.
    conformed = result.counts["all"]["kubeconform"]
    assert conformed.failed == 0 and conformed.ok >= 50


def test_kubeconform_refuses_an_unknown_field_in_a_kubernetes_kind_and_in_a_gpuval_crd(
    tmp_path: Path,
) -> None:
    (deployment,) = [
        doc
        for doc in yaml.safe_load_all(chartlint.render(()))
        if doc and doc["kind"] == "Deployment"
    ]
    deployment["spec"]["replica"] = 2
    validation = {
        "apiVersion": "gpuval.dev/v1alpha1",
        "kind": "GpuValidation",
        "metadata": {"name": "typo"},
        "spec": {"maxConcurent": 2},
    }
    manifest = tmp_path / "typos.yaml"
    manifest.write_text(yaml.safe_dump_all([deployment, validation]))
    crd_schemas = tmp_path / "crd-schemas"
    chartlint.write_crd_schemas(sorted(chartlint.CRD_DIR.glob("*.yaml")), crd_schemas)

    output = chartlint.kubeconform(chart_tools(log=lambda _m: None), [manifest], crd_schemas)
    found, counts = kubeconform_findings(output)

    assert {f.object for f in found} == {"Deployment/gpuval-operator", "GpuValidation/typo"}
    messages = " ".join(f.message for f in found)
    assert "replica" in messages and "maxConcurent" in messages
    assert counts.ok == 0


def test_the_vendored_kubernetes_schemas_are_what_the_api_server_serves(cluster: Cluster) -> None:
    served = chartlint.schema_files(
        chartlint.kubernetes_schemas(cluster.binaries.kubectl, cluster.kubeconfig)
    )
    for relative, text in served.items():
        vendored = chartlint.SCHEMA_DIR / relative
        assert vendored.is_file(), f"{relative} is not vendored: make chart-schemas"
        assert vendored.read_text() == text, (
            f"{relative} differs from the API server's: make chart-schemas"
        )


def test_the_vendored_prometheus_operator_schemas_are_made_from_its_crds() -> None:
    made = chartlint.schema_files(chartlint.prometheus_operator_schemas(log=lambda _m: None))
    assert set(made) == {
        "monitoring.coreos.com/servicemonitor_v1.json",
        "monitoring.coreos.com/prometheusrule_v1.json",
    }
    for relative, text in made.items():
        assert (chartlint.SCHEMA_DIR / relative).read_text() == text, relative


def test_the_chart_readme_is_what_helm_docs_makes_of_the_values_comments_now() -> None:
    readme = chartdocs.README.read_text()
    assert readme == chartdocs.render(), "charts/gpuval/README.md is stale: make generate"
    assert '| agent.namespace.name | string | `""` |' in readme
    assert "| networkPolicy.enabled | bool | `false` |" in readme
