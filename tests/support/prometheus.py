"""A real Prometheus (Debian's) on loopback for the integration tests: it scrapes an operator's
/metrics every second and evaluates the chart's rules (every `for` at 0) every second; and the
Grafana dashboard's queries, by the row that holds them, to run against it."""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

import yaml

from gpuval_devtools.controlplane import debian_binary
from tests.support import chart
from tests.support.kube import wait_for

DASHBOARD = chart.CHART / "files" / "dashboard.json"
# The dashboard's row whose series only a repair loop makes (test_operator_remediation runs one).
REPAIR_ROW = "Repairs (spec.remediation)"
# The proof-age row's series come from a validation with spec.maxProofAgeSeconds:
# test_operator_runs.
PROOF_ROW = "Proof age (spec.maxProofAgeSeconds)"


class Prometheus:
    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"

    def get(self, path: str, **params: str) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(self.base + path + query, timeout=10) as answer:
            return json.loads(answer.read())

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.base + "/-/ready", timeout=2) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False

    def query(self, expr: str) -> list[dict[str, Any]]:
        answer = self.get("/api/v1/query", query=expr)
        assert answer["status"] == "success", answer
        result: list[dict[str, Any]] = answer["data"]["result"]
        return result

    def alerts(self) -> list[dict[str, Any]]:
        alerts: list[dict[str, Any]] = self.get("/api/v1/alerts")["data"]["alerts"]
        return alerts

    def target_health(self) -> list[str]:
        targets = self.get("/api/v1/targets")["data"]["activeTargets"]
        return [t["health"] for t in targets]


@contextlib.contextmanager
def prometheus(metrics_port: int, workdir: Path) -> Iterator[Prometheus]:
    """Debian's prometheus on loopback, scraping the operator every second and evaluating the
    chart's rules (every `for` at 0 so the test waits seconds, not minutes) every second."""
    binary = debian_binary("prometheus", ["prometheus"], log=lambda _m: None)["prometheus"]
    objs = chart.render(
        values={
            "prometheusRule.enabled": True,
            "prometheusRule.nodeFailed.for": "0m",
            "prometheusRule.nodeNeedsRepair.for": "0m",
        }
    )
    rules = workdir / "gpuval-rules.yaml"
    rules.write_text(yaml.safe_dump(chart.find(objs, "PrometheusRule")["spec"]))
    config = workdir / "prometheus.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(rules)],
                "scrape_configs": [
                    {
                        "job_name": "gpuval-operator",
                        "static_configs": [{"targets": [f"127.0.0.1:{metrics_port}"]}],
                    }
                ],
            }
        )
    )
    port = chart.free_port()
    argv = [
        str(binary),
        f"--config.file={config}",
        f"--storage.tsdb.path={workdir / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    with (workdir / "prometheus.log").open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        try:
            server = Prometheus(port)
            wait_for("prometheus to be ready", server.ready, timeout=60)
            yield server
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def dashboard_queries(
    only: Collection[str] | None = None, without: Collection[str] = ()
) -> list[tuple[str, str]]:
    """(panel title, PromQL) of the dashboard's queries, the template variables set to match all.

    A row panel heads the panels after it. With `only`, the panels under those rows; else every
    panel's but those under the rows `without` names, and every template variable's query."""
    dashboard = json.loads(DASHBOARD.read_text())
    queries: list[tuple[str, str]] = []
    row = ""
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            row = panel["title"]
        elif (row in only) if only is not None else (row not in without):
            queries += [(panel["title"], target["expr"]) for target in panel.get("targets", [])]
    if only is None:
        for variable in dashboard["templating"]["list"]:
            if variable["type"] == "query":
                query = variable["query"]
                # label_values(expr, label) is Grafana's, not PromQL: its series selector is.
                selector = re.fullmatch(r"label_values\((.+), *\w+\)", query)
                assert selector, query
                queries.append((f"variable {variable['name']}", selector.group(1)))
    return [
        (title, expr.replace('"$validation"', '".*"').replace('"$node"', '".*"'))
        for title, expr in queries
    ]


def dashboard_rows() -> list[str]:
    """The titles of the dashboard's rows, in order."""
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [panel["title"] for panel in panels if panel["type"] == "row"]


def firing(server: Prometheus, alertname: str, node: str) -> dict[str, Any] | None:
    for alert in server.alerts():
        labels = alert["labels"]
        if (labels["alertname"], labels.get("node"), alert["state"]) == (alertname, node, "firing"):
            return alert
    return None
