"""Static checks of charts/gpuval that need no helm: CRDs in sync with their one source, every value
documented and described by the schema, the dashboard well-formed.

Rendering, linting and the schema's verdicts on bad values are in
tests/integration/chart/test_chart_render.py (they need the helm binary).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuval_api.report import Settler, StatusKey

REPO_ROOT = Path(__file__).resolve().parents[3]
CHART = REPO_ROOT / "charts" / "gpuval"


def _leaves(node: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """Dotted paths of the values a user sets: scalars, lists, and maps that are empty by default
    (free-form ones such as labels)."""
    if isinstance(node, dict) and node and path not in FREE_FORM_WITH_DEFAULTS:
        for key, value in node.items():
            yield from _leaves(value, f"{path}.{key}" if path else key)
    else:
        yield path, node


# Maps with default content that are one value to the user (replaced whole, like resources).
FREE_FORM_WITH_DEFAULTS = {
    "operator.resources",
    "operator.podSecurityContext",
    "operator.securityContext",
    "networkPolicy.dns.namespaceSelector",
    "networkPolicy.dns.podSelector",
    "networkPolicy.metrics.namespaceSelector",
    "dashboard.labels",
    "grafanaAlert.labels",
    "grafanaAlert.alertLabels",
}


def _documented_keys(text: str) -> set[str]:
    """Dotted paths of the keys in values.yaml preceded by a `# --` comment block."""
    documented: set[str] = set()
    stack: list[tuple[int, str]] = []
    in_doc = False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("# --"):
            in_doc = True
            continue
        if stripped.startswith("#"):
            continue  # a continuation line of the block, or a plain comment
        match = re.match(r"^(\s*)([A-Za-z0-9_]+):", line)
        if not match:
            in_doc = False
            continue
        indent, key = len(match.group(1)), match.group(2)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, key))
        if in_doc:
            documented.add(".".join(k for _, k in stack))
        in_doc = False
    return documented


def test_every_value_has_a_doc_comment() -> None:
    text = (CHART / "values.yaml").read_text()
    values = yaml.safe_load(text)
    documented = _documented_keys(text)

    undocumented = [path for path, _ in _leaves(values) if path not in documented]

    assert not undocumented, f"values without a `# --` comment in values.yaml: {undocumented}"


def _schema_node(schema: dict[str, Any], path: str) -> dict[str, Any] | None:
    node: dict[str, Any] | None = schema
    for key in path.split("."):
        if node is None:
            return None
        node = (node.get("properties") or {}).get(key)
    return node


def test_schema_describes_every_value_and_refuses_unknown_keys() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())

    missing = [path for path, _ in _leaves(values) if _schema_node(schema, path) is None]
    assert not missing, f"values.yaml keys values.schema.json does not describe: {missing}"

    def open_objects(node: dict[str, Any], path: str = "") -> Iterator[str]:
        if "properties" in node:
            if node.get("additionalProperties") is not False:
                yield path or "<root>"
            for key, sub in node["properties"].items():
                yield from open_objects(sub, f"{path}.{key}" if path else key)

    # A typo such as `operator.replica` must fail the install instead of being ignored.
    assert list(open_objects(schema)) == []


def test_schema_types_match_the_default_values() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    python_types: dict[str, type | tuple[type, ...]] = {
        "string": str,
        "boolean": bool,
        "integer": int,
        "number": (int, float),
        "object": dict,
        "array": list,
    }
    wrong = []
    for path, value in _leaves(values):
        node = _schema_node(schema, path)
        assert node is not None
        declared = node.get("type")
        kinds: list[str] = declared if isinstance(declared, list) else [str(declared)]
        if declared is not None and not any(
            isinstance(value, python_types[k]) and not (k == "integer" and isinstance(value, bool))
            for k in kinds
        ):
            wrong.append(f"{path}: default {value!r} is not {declared}")
    assert not wrong, wrong


def _dashboard() -> dict[str, Any]:
    dashboard: dict[str, Any] = json.loads((CHART / "files" / "dashboard.json").read_text())
    return dashboard


def test_dashboard_panels_have_unique_ids_and_queries_through_the_datasource_variable() -> None:
    panels = _dashboard()["panels"]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    for panel in panels:
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"], f"panel {panel['title']!r} has no query"
        for target in panel["targets"]:
            assert re.search(r"\bgpuval_[a-z0-9_]+", target["expr"]), target["expr"]


@pytest.mark.parametrize(
    "subject",
    [
        "verdict",
        "burn throughput",
        "bandwidth",
        "bus bandwidth",
        "temperature",
        "per gpu",
    ],
)
def test_dashboard_has_a_panel_for_each_figure_the_issue_names(subject: str) -> None:
    titles = " | ".join(p["title"].lower() for p in _dashboard()["panels"])
    assert subject in titles, f"no dashboard panel about {subject!r}: {titles}"


@pytest.mark.parametrize(
    "document",
    [CHART / "templates" / "NOTES.txt", REPO_ROOT / "docs" / "install.md"],
    ids=lambda p: p.name,
)
def test_notes_and_the_install_guide_name_every_alert_the_prometheus_rule_defines(
    document: Path,
) -> None:
    rules = (CHART / "templates" / "prometheusrule.yaml").read_text()
    alerts = re.findall(r"^\s*- alert: (\w+)$", rules, flags=re.MULTILINE)
    named = set(re.findall(r"\bGpuval[A-Z][A-Za-z]+\b", document.read_text()))

    assert len(alerts) == 10, alerts
    assert sorted(set(alerts) - named) == [], f"alerts {document.name} does not name"
    assert sorted(named - set(alerts)) == [], f"{document.name} names alerts the rules lack"


def test_the_admission_policy_reads_the_settled_mark_the_api_defines() -> None:
    """The policy refuses an agent's write to a report the operator settled: it must spell the
    key and the value as gpuval_api.report does (issue 34 part 6)."""
    policy = (CHART / "templates" / "admission-policy.yaml").read_text()
    assert f"oldObject.status.{StatusKey.SETTLED_BY} != '{Settler.OPERATOR}'" in policy
