"""Every generated file is current: CRDs and the chart's copy, JSON schemas, docs tables."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuval_api import docgen, generate
from gpuval_api.env import OperatorEnv
from gpuval_devtools import operatordocs
from gpuval_operator import rbac
from gpuval_operator.config import OperatorConfig


def test_no_generated_file_is_stale() -> None:
    stale = [str(p.relative_to(generate.REPO_ROOT)) for p in generate.stale()]
    assert stale == [], f"stale generated files {stale}: run `make generate` and commit them"


def test_a_changed_table_is_reported_stale(tmp_path: Path) -> None:
    for path, render in generate.generated_files().items():
        target = tmp_path / path.relative_to(generate.REPO_ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(render(path.read_text() if path.exists() else None))
    assert generate.stale(tmp_path) == []
    agent_md = tmp_path / "docs" / "agent.md"
    agent_md.write_text(agent_md.read_text().replace("| `burn.durationSeconds` | `60.0`", "| x"))
    assert generate.stale(tmp_path) == [agent_md]


def test_a_document_without_its_markers_is_an_error_naming_them() -> None:
    with pytest.raises(ValueError, match="no 'reasons' markers"):
        docgen.render_section("no markers here", "reasons", "table")


def test_the_operator_index_lists_each_page_its_title_and_its_sections(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text(
        "# Page A\n\n## Runs (spec.x)\n```\n## not a heading\n```\n### Runs (spec.x)\n#### deep\n"
    )
    (tmp_path / "b.md").write_text("# Page B\n")
    toc = docgen.operator_toc(tmp_path, (("a.md", "what A says"), ("b.md", "what B says")))
    assert toc == (
        "- [Page A](a.md): what A says\n"
        "  - [Runs (spec.x)](a.md#runs-specx)\n"
        "    - [Runs (spec.x)](a.md#runs-specx-1)\n"
        "- [Page B](b.md): what B says\n"
    )
    (tmp_path / "b.md").write_text("no title\n")
    with pytest.raises(ValueError, match=r"b\.md has no title"):
        docgen.operator_toc(tmp_path, (("b.md", "what B says"),))


def test_every_operator_page_is_in_the_index() -> None:
    listed = {name for name, _ in docgen.OPERATOR_PAGES} | {"index.md"}
    assert {page.name for page in docgen.OPERATOR_DOCS.glob("*.md")} == listed


def test_the_reference_lists_every_spec_field_of_a_crd_with_its_type_and_default() -> None:
    table = docgen.spec_fields_table("gpuvalidations", frozenset({"checks"}))
    rows = {line.split(" | ")[0].removeprefix("| ") for line in table.splitlines()[2:]}
    spec = docgen._crd_version("gpuvalidations")["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert {f"`{name}`" for name in spec["properties"]} - {"`checks`"} <= rows
    assert not any(row.startswith("`checks") for row in rows)
    assert '| `maxConcurrent` | int or string | `"25%"` |' in table
    assert '| `agent.tolerations[].operator` | string | `"Equal"` |' in table
    assert "| `fabric.ncclEnv` | list of object | `[]` |" in table


def test_the_reference_says_which_columns_kubectl_shows_only_wide() -> None:
    table = docgen.printer_columns_table("gpunodereports")
    assert "| Run | `.spec.run` | with `-o wide` |" in table
    assert "| Node | `.spec.node` | always |" in table


def test_the_reference_rbac_table_is_current_and_names_every_rule_of_the_code() -> None:
    current = operatordocs.REFERENCE.read_text()
    assert operatordocs.render(current) == current, "run `make generate` and commit it"
    table = operatordocs.rbac_table()
    for rule in (
        *rbac.CLUSTER_RULES,
        *rbac.AGENT_NAMESPACE_RULES,
        *rbac.EVENT_RULES,
        *rbac.OWN_NAMESPACE_RULES,
        *rbac.AGENT_RULES,
        *rbac.AGENT_POD_RULES,
    ):
        assert rule.why, f"{rule.resources} says no why"
        assert f"`{rule.resources[0]}` | {', '.join(rule.verbs)} | {rule.why} |" in table
        assert "why" not in rule.as_dict()
    stale = current.replace("| `gpubaselines` | list, create |", "| `gpubaselines` | list |")
    assert operatordocs.render(stale) == current


def test_the_reference_settings_table_names_every_operator_variable_with_its_default() -> None:
    """docs/operator/reference.md's Settings table is prose around the one source: it must name
    every OperatorEnv variable, each with the default OperatorConfig applies when it is unset."""
    text = (docgen.OPERATOR_DOCS / "reference.md").read_text()
    section = text.split("## Settings (environment of the operator pod)", 1)[1].split("\n## ", 1)[0]
    rows = {
        cells[1].strip("` "): cells[2].strip()
        for line in section.splitlines()
        if line.startswith("| `GPUVAL_")
        for cells in [line.split("|")]
    }
    assert set(rows) == {str(variable) for variable in OperatorEnv}
    defaults = OperatorConfig.from_env({})
    for variable in OperatorEnv:
        value = getattr(defaults, variable.name.lower())
        shown = rows[str(variable)].split(" ")[0].strip("`")
        if value is None:
            assert shown == "unset:", f"{variable}: {rows[str(variable)]}"
        elif isinstance(value, bool):
            assert shown == str(value).lower(), f"{variable}: {rows[str(variable)]}"
        elif isinstance(value, int | float):
            assert float(shown) == value, f"{variable}: {rows[str(variable)]}"
        else:
            assert shown == value, f"{variable}: {rows[str(variable)]}"
