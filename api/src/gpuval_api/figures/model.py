"""The CRD models' figure fields, made from the figure registry (gpuval_api.figures): a
GpuNodeReport's `status.summary` and a node's `spec.history` entry hold one optional number per
figure, keyed as the registry spells it, described as it says."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, Field, create_model

from gpuval_api.figures.kinds import Figure


def snake(key: str) -> str:
    """The Python name of a figure's field: h2dGBps -> h2d_gbps."""
    out = []
    for index, char in enumerate(key):
        if char.isupper() and index and not key[index - 1].isupper():
            out.append("_")
        out.append(char.lower())
    return "".join(out)


def with_figures(
    base: type[BaseModel], name: str, figures: Iterable[Figure], *, bounded: bool
) -> type[BaseModel]:
    """`base` with an optional float field per figure (aliased by its key); `bounded`: at least 0
    and at most the figure's maximum, as an object the operator carries forward must be."""
    fields: dict[str, Any] = {}
    for figure in figures:
        limits: dict[str, Any] = {"ge": 0, "le": figure.maximum} if bounded else {}
        fields[snake(figure.key)] = (
            float | None,
            Field(default=None, alias=figure.key, description=figure.description, **limits),
        )
    model: type[BaseModel] = create_model(
        name, __base__=base, __doc__=base.__doc__, __module__=base.__module__, **fields
    )
    return model
