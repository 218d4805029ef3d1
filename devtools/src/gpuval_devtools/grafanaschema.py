"""A JSON Schema of Grafana's dashboard JSON, derived from grafana-foundation-sdk's typed models.

The SDK's release on PyPI (pinned in devtools/pyproject.toml) carries Grafana's dashboard model as
typed Python classes generated from Grafana's own schema, but no JSON Schema file. This derives one
from those classes: each model's JSON keys and which of them it always writes (its `to_json`), and
each field's type (its annotations): strings, numbers, enums, lists, maps, nested models and
unions. Unknown keys are refused, so a typo or a misplaced field fails here instead of being
silently dropped by Grafana. Panel options and queries are plugin-defined (`object` in the SDK)
and stay open. Nothing is written to disk: tests derive it from the installed SDK each run.
"""

from __future__ import annotations

import enum
import inspect
import re
import types
import typing
from typing import Any

from grafana_foundation_sdk.models import dashboard as dashboard_models

_ALWAYS = re.compile(r'^\s*"([^"]+)":\s*self\.(\w+),?\s*$', re.MULTILINE)
_OPTIONAL = re.compile(r'payload\["([^"]+)"\]\s*=\s*self\.(\w+)')
_SCALARS: dict[type, dict[str, Any]] = {
    str: {"type": "string"},
    bool: {"type": "boolean"},
    int: {"type": "integer"},
    float: {"type": "number"},
}


class _Deriver:
    def __init__(self) -> None:
        self.definitions: dict[str, dict[str, Any]] = {}

    def model(self, cls: type) -> dict[str, Any]:
        name = f"{cls.__module__.rsplit('.', 1)[-1]}.{cls.__name__}"
        if name not in self.definitions:
            self.definitions[name] = {}  # a placeholder first: models refer to themselves
            self.definitions[name] = self._object(cls)
        return {"$ref": f"#/definitions/{name}"}

    def _object(self, cls: type) -> dict[str, Any]:
        source = inspect.getsource(cls.to_json)  # type: ignore[attr-defined]
        always = dict(_ALWAYS.findall(source))
        keys = {**always, **dict(_OPTIONAL.findall(source))}
        hints = typing.get_type_hints(cls)
        # A key written always carries null when its Optional field is None (a threshold's base
        # step has value null); a key written only when set never does.
        properties = {
            key: self.type_of(hints[attr], nullable=key in always) for key, attr in keys.items()
        }
        return {
            "type": "object",
            "additionalProperties": False,
            "properties": properties,
            "required": sorted(always),
        }

    def type_of(self, hint: Any, *, nullable: bool = False) -> dict[str, Any]:
        origin = typing.get_origin(hint)
        args = typing.get_args(hint)
        if hint in _SCALARS:
            return dict(_SCALARS[hint])
        if hint is object or hint is Any:
            return {}
        if origin in (typing.Union, types.UnionType):
            options = [self.type_of(a) for a in args if a is not type(None)]
            if nullable and type(None) in args:
                options.append({"type": "null"})
            return options[0] if len(options) == 1 else self._union(options)
        if origin is list:
            return {"type": "array", "items": self.type_of(args[0])}
        if origin is dict:
            return {"type": "object", "additionalProperties": self.type_of(args[1])}
        if origin is typing.Literal:
            return {"enum": list(args)}
        if isinstance(hint, type) and issubclass(hint, enum.Enum):
            return {"enum": [member.value for member in hint]}
        if isinstance(hint, type) and hint.__module__.endswith("cog.variants"):
            return {"type": "object"}  # a variant interface (a panel's query): plugin-defined
        if isinstance(hint, type) and callable(getattr(hint, "to_json", None)):
            return self.model(hint)
        raise TypeError(f"no JSON Schema for the SDK type {hint!r}")

    def _union(self, options: list[dict[str, Any]]) -> dict[str, Any]:
        """anyOf, or if/then/else on `type` where one model fixes it (a row is `type: row`), as
        the SDK decodes panels: errors then point into the one model that applies."""
        fixed = [o for o in options if len(self._fixed_type(o)) == 1]
        rest = [o for o in options if o not in fixed]
        if len(fixed) != 1 or len(rest) != 1:
            return {"anyOf": options}
        return {
            "if": {
                "properties": {"type": {"enum": self._fixed_type(fixed[0])}},
                "required": ["type"],
            },
            "then": fixed[0],
            "else": rest[0],
        }

    def _fixed_type(self, option: dict[str, Any]) -> list[Any]:
        ref = option.get("$ref", "")
        definition = self.definitions.get(ref.rsplit("/", 1)[-1], {})
        enum_values: list[Any] = definition.get("properties", {}).get("type", {}).get("enum", [])
        return enum_values


def dashboard_schema() -> dict[str, Any]:
    """The draft-07 JSON Schema of a dashboard, with a definition per SDK model."""
    deriver = _Deriver()
    root = deriver.model(dashboard_models.Dashboard)
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "Grafana dashboard (derived from grafana-foundation-sdk's typed models)",
        **root,
        "definitions": deriver.definitions,
    }
