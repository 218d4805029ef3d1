"""Reading objects another version of gpuval wrote: fields this version does not know are dropped.

The models forbid unknown fields because they define the CRDs; a reader (kubectl gpuval, the
report) meets objects from a newer operator or agent, and one new status field must not make the
whole object unreadable.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)


def read_model(model: type[M], data: Mapping[str, Any]) -> M:
    """`data` as `model`, dropping fields this version does not know (a newer operator or agent
    may add some) instead of refusing the whole object; any other mismatch is raised."""
    document: Any = copy.deepcopy(dict(data))
    # Each round drops every unknown field pydantic reported; nesting bounds the rounds.
    for _ in range(100):
        try:
            return model.model_validate(document)
        except ValidationError as error:
            problems = error.errors()
            if any(p["type"] != "extra_forbidden" for p in problems):
                raise
            for problem in problems:
                _drop(document, problem["loc"])
    return model.model_validate(document)


def _drop(document: Any, loc: tuple[int | str, ...]) -> None:
    parent = document
    for key in loc[:-1]:
        parent = parent[key]
    parent.pop(loc[-1], None)
