"""The chart's Grafana dashboard: generated from gpuval_devtools.dashboard (grafana-foundation-sdk's
typed builders) and valid against the dashboard JSON Schema derived from the same SDK's typed
models, which refuses what Grafana's published schema refuses (the hand-written dashboard this one
replaced had 8 errors there, all in its template variables; the same faults fail here)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from gpuval_devtools import dashboard
from gpuval_devtools.grafanaschema import dashboard_schema

CHART_DASHBOARD = (
    Path(__file__).resolve().parents[3] / "charts" / "gpuval" / "files" / "dashboard.json"
)


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft7Validator:
    schema = dashboard_schema()
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def errors(validator: jsonschema.Draft7Validator, document: Any) -> list[str]:
    return sorted(
        f"{'.'.join(str(p) for p in e.absolute_path)}: {e.message}"
        for e in validator.iter_errors(document)
    )


def test_the_charts_dashboard_is_what_its_source_generates() -> None:
    assert CHART_DASHBOARD.read_text() == dashboard.render(), "run `make dashboard` and commit"
    assert dashboard.main(["--check"]) == 0


def test_the_charts_dashboard_is_valid_against_the_sdks_dashboard_schema(
    validator: jsonschema.Draft7Validator,
) -> None:
    assert errors(validator, json.loads(CHART_DASHBOARD.read_text())) == []


def test_the_schema_refuses_the_template_variables_of_the_old_hand_written_dashboard(
    validator: jsonschema.Draft7Validator,
) -> None:
    board = json.loads(CHART_DASHBOARD.read_text())
    old_style = copy.deepcopy(board["templating"]["list"][1])
    old_style["current"] = {}  # Grafana's VariableOption needs text and value
    old_style["definition"] = old_style["query"]  # not a field of Grafana's variable model
    board["templating"]["list"][1] = old_style

    assert set(errors(validator, board)) == {
        "templating.list.1: Additional properties are not allowed ('definition' was unexpected)",
        "templating.list.1.current: 'text' is a required property",
        "templating.list.1.current: 'value' is a required property",
    }


@pytest.mark.parametrize(
    ("path", "value", "named"),
    [
        (("schemaVersion",), "41", "schemaVersion"),
        (("panels", 1, "gridPos", "w"), "half", "panels.1.gridPos.w"),
        (("panels", 1, "datasource", "uuid"), "x", "panels.1.datasource"),
        (("graphTooltip",), 7, "graphTooltip"),
    ],
)
def test_the_schema_refuses_a_wrong_field_naming_it(
    validator: jsonschema.Draft7Validator, path: tuple[str | int, ...], value: Any, named: str
) -> None:
    board = json.loads(CHART_DASHBOARD.read_text())
    parent = board
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    found = errors(validator, board)
    assert any(e.startswith(named) for e in found), found
