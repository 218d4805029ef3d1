"""The chart's Grafana-managed alert rule (templates/grafana-alert-configmap.yaml), checked as
Grafana would read it, without Grafana (AGPL, never run here): the provisioning file helm renders is
validated against the JSON Schema kept in charts/schemas/ (written from Grafana's documented
format), its cross-field rules are checked, and its PromQL goes through promtool: `check rules`
and `test rules` with series where one node fails its burn and others do not. The same query
against a real Prometheus scraping the real operator is in test_alerts_prometheus.py.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.support import chart
from tests.support.promtool import run_rule_tests

SCHEMA = chart.REPO_ROOT / "charts" / "schemas" / "grafana-alerting-provisioning.schema.json"
FILE_KEY = "gpuval-alert-rules.yaml"


def rendered(values: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the ConfigMap, the provisioning file it carries) as helm renders them."""
    objs = chart.render(values={"grafanaAlert.enabled": True, **(values or {})})
    configmap = chart.find(objs, "ConfigMap", "gpuval-grafana-alert")
    return configmap, yaml.safe_load(configmap["data"][FILE_KEY])


def schema_errors(document: Any) -> list[str]:
    validator = jsonschema.Draft7Validator(json.loads(SCHEMA.read_text()))
    return [
        f"{'.'.join(str(p) for p in e.absolute_path)}: {e.message}"
        for e in validator.iter_errors(document)
    ]


def grafana_rule(document: dict[str, Any]) -> dict[str, Any]:
    (group,) = document["groups"]
    (rule,) = group["rules"]
    assert isinstance(rule, dict)
    return rule


def burn_expr(document: dict[str, Any]) -> str:
    """The PromQL of the rule's data-source query (refId A)."""
    (query,) = [q for q in grafana_rule(document)["data"] if q["datasourceUid"] != "__expr__"]
    return str(query["model"]["expr"])


def test_the_grafana_alert_is_off_by_default() -> None:
    objs = chart.render()
    assert not [o for o in objs if "grafana_alert" in (o["metadata"].get("labels") or {})]


def test_the_schema_itself_is_a_valid_draft7_schema() -> None:
    jsonschema.Draft7Validator.check_schema(json.loads(SCHEMA.read_text()))


def test_the_rendered_provisioning_file_is_valid_against_grafanas_format() -> None:
    configmap, document = rendered()

    assert schema_errors(document) == []
    rule = grafana_rule(document)
    refs = [q["refId"] for q in rule["data"]]
    assert len(refs) == len(set(refs))
    assert rule["condition"] in refs
    for query in rule["data"]:
        if query["datasourceUid"] == "__expr__":
            assert query["model"]["expression"] in refs, query
    # Grafana expands $NAME in most fields of a provisioning file: the file uses none at all.
    assert "$" not in configmap["data"][FILE_KEY]
    assert configmap["metadata"]["labels"]["grafana_alert"] == "1"
    assert rule["noDataState"] == "OK", "the failure series exist only while a node fails"


def test_the_alert_file_follows_its_values() -> None:
    configmap, document = rendered(
        {
            "grafanaAlert.datasourceUid": "mimir-gpu",
            "grafanaAlert.folder": "GPU fleet",
            "grafanaAlert.namespace": "monitoring",
            "grafanaAlert.for": "5m",
            "grafanaAlert.alertLabels": {"severity": "warning", "team": "gpu-infra"},
        }
    )
    (group,) = document["groups"]
    rule = grafana_rule(document)
    assert configmap["metadata"]["namespace"] == "monitoring"
    assert group["folder"] == "GPU fleet"
    assert {q["datasourceUid"] for q in rule["data"]} == {"mimir-gpu", "__expr__"}
    assert rule["for"] == "5m"
    assert rule["labels"] == {"severity": "warning", "team": "gpu-infra"}
    assert schema_errors(document) == []


@pytest.mark.parametrize(
    ("path", "value", "named"),
    [
        (("noDataState",), "NoDate", "noDataState"),
        (("labels", "runbook"), "https://x/$RUNBOOK", "labels.runbook"),
        (("for",), "five minutes", "for"),
        (("uid",), "a" * 41, "uid"),
        (("data", 0, "relativeTimeRange"), None, "data.0"),
        (("dashboardUID",), "typo", "dashboardUID"),
    ],
)
def test_the_schema_refuses_what_would_stop_grafana_naming_the_field(
    path: tuple[str | int, ...], value: Any, named: str
) -> None:
    _, document = rendered()
    parent: Any = grafana_rule(document)
    for key in path[:-1]:
        parent = parent[key]
    if value is None:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    errors = schema_errors(document)
    assert any(named in error for error in errors), errors


def test_values_schema_refuses_a_dollar_in_an_alert_label() -> None:
    proc = chart.helm(
        "template",
        "gpuval",
        str(chart.CHART),
        "--kube-version",
        chart.KUBE_VERSION,
        *chart.set_args({"grafanaAlert.enabled": True, "grafanaAlert.alertLabels": {"a": "$HOME"}}),
        check=False,
    )
    assert proc.returncode != 0
    assert "/grafanaAlert/alertLabels/a" in proc.stderr, proc.stderr


def _as_prometheus_rules(expr: str, path: Path) -> Path:
    # Grafana's threshold B (A > 0) as the one PromQL a Prometheus rule can state.
    rules = {"groups": [{"name": "grafana", "rules": [{"alert": "Burn", "expr": f"({expr}) > 0"}]}]}
    path.write_text(yaml.safe_dump(rules))
    return path


def test_promtool_accepts_the_grafana_rules_query(promtool: Path, tmp_path: Path) -> None:
    _, document = rendered()
    rules = _as_prometheus_rules(burn_expr(document), tmp_path / "grafana-rules.yaml")

    proc = subprocess.run(
        [str(promtool), "check", "rules", str(rules)], capture_output=True, text=True, check=False
    )

    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS: 1 rules found" in proc.stdout


def test_the_grafana_rules_query_fires_for_the_node_failing_its_burn_only(
    promtool: Path, tmp_path: Path
) -> None:
    _, document = rendered()
    rules = _as_prometheus_rules(burn_expr(document), tmp_path / "grafana-rules.yaml")
    series = [
        ('check="burn",node="gpu-3",reason="BurnMismatch"', "1x5"),
        ('check="health",node="gpu-3",reason="EccUncorrectable"', "1x5"),
        ('check="health",node="gpu-5",reason="EccUncorrectable"', "1x5"),
    ]
    cases = [
        {
            "interval": "1m",
            "input_series": [
                {
                    "series": f'gpuval_node_check_failure_info{{validation="fleet",{labels}}}',
                    "values": values,
                }
                for labels, values in series
            ]
            + [{"series": 'gpuval_node_passed{validation="fleet",node="gpu-1"}', "values": "1x5"}],
            "alert_rule_test": [
                {
                    "eval_time": "1m",
                    "alertname": "Burn",
                    "exp_alerts": [
                        {
                            "exp_labels": {
                                "validation": "fleet",
                                "node": "gpu-3",
                                "reason": "BurnMismatch",
                            }
                        }
                    ],
                }
            ],
        }
    ]

    proc = run_rule_tests(promtool, [rules], cases, tmp_path / "grafana.test.yaml")

    assert proc.returncode == 0, proc.stdout + proc.stderr
