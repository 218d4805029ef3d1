"""JSON Schema generation with every default made explicit: the one source of defaults.

pydantic leaves a field's default out of its JSON Schema when the default comes from a
`default_factory`. The CRDs are generated from these schemas, so such a field's default was lost
in the cluster: the API server filled in `{}` for `checks.burn.minTflops` and the agent received
no threshold at all, while `gpuval-agent run` applied 0.8 of the part's figure (issue 9). Here the
factory is called and its value written into the schema, with nulls left out (a null is "unset",
and a CRD default must validate against its non-nullable schema).
"""

from __future__ import annotations

from typing import Any

from pydantic.json_schema import GenerateJsonSchema, NoDefault
from pydantic_core import core_schema


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


class ExplicitDefaults(GenerateJsonSchema):
    """Writes the value of every argument-less default factory as the field's default."""

    def get_default_value(self, schema: core_schema.WithDefaultSchema) -> Any:
        factory = schema.get("default_factory")
        if factory is not None and not schema.get("default_factory_takes_data"):
            return factory()  # type: ignore[call-arg]
        return super().get_default_value(schema)

    def encode_default(self, dft: Any) -> Any:
        if dft is NoDefault:
            return dft
        return _without_nulls(super().encode_default(dft))
