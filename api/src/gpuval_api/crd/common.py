"""What every gpuval kind shares: the group and version, the kinds' names, the base model, CEL rule
helpers, the bounds on what a user writes, and the object metadata the operator reads."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from gpuval_api import gfd

GROUP = "gpuval.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

VALIDATION_KIND = "GpuValidation"
VALIDATION_PLURAL = "gpuvalidations"
REPORT_KIND = "GpuNodeReport"
REPORT_PLURAL = "gpunodereports"
BASELINE_KIND = "GpuBaseline"
BASELINE_PLURAL = "gpubaselines"
# `kubectl get gpuval NAME` reads a short name; `kubectl get gpuval-all` the category of both kinds.
# kubectl expands a category before it looks up a short name, so the two must differ: with both
# `gpuval`, `kubectl get gpuval fleet` failed with "you must specify only one resource".
VALIDATION_SHORT_NAME = "gpuval"
REPORT_SHORT_NAME = "gpureport"
BASELINE_SHORT_NAME = "gpubaseline"
CATEGORY = "gpuval-all"

# The device plugin's resource, spelled in gpuval_api.gfd with the other names of NVIDIA's.
GPU_RESOURCE = gfd.GPU_RESOURCE


class CrdModel(BaseModel):
    """The base of every CRD type: camelCase names on the wire, unknown fields refused."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


def cel_rules(*rules: tuple[str, str]) -> dict[str, Any]:
    """CEL rules as `x-kubernetes-validations` (rule, message) for a model's or field's schema."""
    return {"x-kubernetes-validations": [{"rule": rule, "message": msg} for rule, msg in rules]}


def cel_rules_and(extra: dict[str, Any], *rules: tuple[str, str]) -> dict[str, Any]:
    return {**extra, **cel_rules(*rules)}


# Bounds on everything a user writes into a spec: the API server refuses bigger input, so nothing
# unbounded is ever copied into a status (issue 9: a 10 KiB driverVersion grew every outlier entry).
MAX_ITEMS = 64
MAX_NODES = 100_000
MAX_GPUS_PER_NODE = 64
MAX_SECONDS = 7 * 86400
VERSION_LENGTH = 64
PRODUCT_LENGTH = 128
# What the status copies from agents' environment records is cut to this.
OUTLIER_VALUE_LENGTH = 128


def map_bounds(key_length: int) -> dict[str, Any]:
    """A map's size and its keys' length (a structural schema has no propertyNames)."""
    return cel_rules_and(
        {"maxProperties": MAX_ITEMS},
        (f"self.all(k, size(k) <= {key_length})", f"keys are at most {key_length} characters"),
    )


# A qualified label key: an optional DNS-subdomain prefix (253) and '/', then a 63-char name.
LabelKey = Annotated[str, Field(min_length=1, max_length=317)]
LabelValue = Annotated[str, Field(max_length=63)]
ResourceName = Annotated[str, Field(min_length=1, max_length=317)]
Quantity = Annotated[str, Field(min_length=1, max_length=64)]


class ObjectMeta(CrdModel):
    """The parts of metadata the operator reads."""

    model_config = ConfigDict(extra="allow")

    name: str
    uid: str | None = None
    generation: int | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
