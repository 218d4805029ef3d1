"""The checked-in JSON Schemas (generated from the pydantic models; tests/unit/api/test_generated.py
keeps them current)."""

from __future__ import annotations

from pathlib import Path

SCHEMA_DIR = Path(__file__).resolve().parents[3] / "api" / "schemas"


def test_result_schema_pins_the_schema_version() -> None:
    text = (SCHEMA_DIR / "result.schema.json").read_text()
    assert '"const": "gpuval.dev/v1alpha1/result"' in text
