"""The checked-in JSON Schemas are generated from the pydantic models and must not go stale."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuval_api.result import SCHEMA_FILES

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "api" / "schemas"


@pytest.mark.parametrize("name", sorted(SCHEMA_FILES))
def test_checked_in_schema_matches_the_models(name: str) -> None:
    checked_in = (SCHEMA_DIR / name).read_text()
    assert checked_in == SCHEMA_FILES[name](), (
        f"api/schemas/{name} is stale: run "
        "`uv run python -m gpuval_api.result api/schemas` and commit it"
    )


def test_result_schema_pins_the_schema_version() -> None:
    text = (SCHEMA_DIR / "result.schema.json").read_text()
    assert '"const": "gpuval.dev/v1alpha1/result"' in text
