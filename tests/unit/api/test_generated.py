"""Every generated file is current: CRDs and the chart's copy, JSON schemas, docs tables."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuval_api import docgen, generate


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
