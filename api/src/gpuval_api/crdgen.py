"""Generate crds/*.yaml from gpuval_api.crd (`make generate` runs it with the other generators).

Pydantic's JSON Schema is turned into a Kubernetes structural schema: `$ref`s inlined, optional
fields' `null` alternatives dropped, `int | str` as `x-kubernetes-int-or-string`, free-form objects
as `x-kubernetes-preserve-unknown-fields`, titles dropped, JSON Schema 2020 exclusive bounds in the
OpenAPI v3.0 form. `--check` exits 1 when a file on disk differs from what the models give, so a
stale CRD fails CI.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from gpuval_api import crd, figures
from gpuval_api.baselinemodel import GpuBaselineSpec
from gpuval_api.jsonschema import ExplicitDefaults

_DROP = {"title", "$defs"}
_PASS_THROUGH = {
    "description",
    "default",
    "enum",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "maxProperties",
    "pattern",
    "format",
    "x-kubernetes-validations",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
}


class SchemaError(ValueError):
    """A model uses a construct the structural-schema conversion does not handle."""


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    if "$ref" not in node:
        return node
    name = node["$ref"].rsplit("/", 1)[-1]
    merged = dict(defs[name])
    merged.update({k: v for k, v in node.items() if k != "$ref"})
    return merged


def _optional(node: dict[str, Any]) -> bool:
    return any(branch.get("type") == "null" for branch in node.get("anyOf", []))


def structural(node: dict[str, Any], defs: dict[str, Any], path: str = "") -> dict[str, Any]:
    """One JSON Schema node (pydantic's) as a Kubernetes structural schema node."""
    node = _resolve(node, defs)
    out: dict[str, Any] = {}
    if "anyOf" in node:
        branches = [_resolve(b, defs) for b in node["anyOf"] if b.get("type") != "null"]
        types = sorted(b.get("type", "") for b in branches)
        outer = {k: v for k, v in node.items() if k != "anyOf"}
        if types == ["integer", "string"]:
            out["x-kubernetes-int-or-string"] = True
            # Iterate the node's own key order, not the set's: set order follows the hash
            # seed, and the generated file must be identical on every run.
            for key, value in outer.items():
                if key in _PASS_THROUGH:
                    out[key] = value
            return out
        if len(branches) != 1:
            raise SchemaError(f"{path or '<root>'}: a union of {types} has no structural form")
        merged = dict(branches[0])
        merged.update(outer)
        return structural(merged, defs, path)
    if "const" in node:
        node = {**node, "enum": [node["const"]]}
    for key, value in node.items():
        if key in _DROP or key not in _PASS_THROUGH or (key == "default" and value is None):
            continue
        out[key] = value
    for bound, flag in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if bound in node:
            out[flag] = node[bound]
            out[bound] = True
    kind = node.get("type")
    if kind == "object" or "properties" in node:
        out["type"] = "object"
        props = node.get("properties", {})
        if props:
            out["properties"] = {}
            for name, sub in props.items():
                converted = structural(sub, defs, f"{path}.{name}")
                # A non-optional object whose fields all have defaults defaults to {}, so the API
                # server fills in nested defaults and `kubectl get -o yaml` shows the whole spec.
                if (
                    converted.get("type") == "object"
                    and "properties" in converted
                    and "required" not in converted
                    and "default" not in converted
                    and not _optional(sub)
                ):
                    converted["default"] = {}
                out["properties"][name] = converted
            required = [r for r in node.get("required", []) if r in props]
            if required:
                out["required"] = required
        extra = node.get("additionalProperties")
        if isinstance(extra, dict) and extra:
            out["additionalProperties"] = structural(extra, defs, f"{path}[*]")
        elif not props:
            out["x-kubernetes-preserve-unknown-fields"] = True
    elif kind == "array":
        out["type"] = "array"
        out["items"] = structural(node.get("items", {}), defs, f"{path}[]")
    elif kind is not None:
        out["type"] = kind
    elif not out.get("x-kubernetes-int-or-string"):
        raise SchemaError(f"{path or '<root>'}: no type; give the field a concrete type")
    return out


def model_schema(model: type[BaseModel]) -> dict[str, Any]:
    """A model's structural schema (validation mode, camelCase)."""
    schema = model.model_json_schema(
        by_alias=True, mode="validation", schema_generator=ExplicitDefaults
    )
    defs = schema.get("$defs", {})
    return structural(schema, defs, model.__name__)


def _crd(
    *,
    kind: str,
    plural: str,
    short_names: list[str],
    spec_model: type[BaseModel],
    status_model: type[BaseModel] | None,
    columns: list[dict[str, Any]],
    description: str,
    spec_required: bool,
) -> dict[str, Any]:
    """A CRD; without a status model, an object of spec only (no status subresource)."""
    spec = model_schema(spec_model)
    root: dict[str, Any] = {
        "type": "object",
        "description": description,
        "properties": {
            "apiVersion": {"type": "string", "description": "API version of the object."},
            "kind": {"type": "string", "description": "Kind of the object."},
            "metadata": {"type": "object"},
            "spec": spec,
        },
    }
    if status_model is not None:
        root["properties"]["status"] = model_schema(status_model)
    if spec_required:
        root["required"] = ["spec"]
    else:
        spec["default"] = {}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{crd.GROUP}",
            "annotations": {"gpuval.dev/generated-by": "python -m gpuval_api.crdgen"},
        },
        "spec": {
            "group": crd.GROUP,
            "scope": "Cluster",
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": short_names,
                "categories": [crd.CATEGORY],
            },
            "versions": [
                {
                    "name": crd.VERSION,
                    "served": True,
                    "storage": True,
                    **({"subresources": {"status": {}}} if status_model is not None else {}),
                    "additionalPrinterColumns": columns,
                    "schema": {"openAPIV3Schema": root},
                }
            ],
        },
    }


def _condition_column(name: str, condition: str) -> dict[str, Any]:
    return {
        "name": name,
        "type": "string",
        "jsonPath": f'.status.conditions[?(@.type=="{condition}")].status',
    }


def _doc(model: type[BaseModel]) -> str:
    """A kind's docstring on one line: its description in the CRD."""
    return " ".join((model.__doc__ or "").split())


def _figure_columns() -> list[dict[str, Any]]:
    """A GpuNodeReport's printer column for each summary figure of the registry that has one."""
    return [
        {"name": f.shown.column, "type": "number", "jsonPath": f".status.summary.{f.key}"}
        for f in figures.summary_figures()
        if f.shown.column
    ]


def build_crds() -> dict[str, dict[str, Any]]:
    """File name -> CRD object, for every gpuval CRD."""
    validation = _crd(
        kind=crd.VALIDATION_KIND,
        plural=crd.VALIDATION_PLURAL,
        short_names=[crd.VALIDATION_SHORT_NAME],
        spec_model=crd.GpuValidationSpec,
        status_model=crd.GpuValidationStatus,
        description=_doc(crd.GpuValidation),
        spec_required=False,
        columns=[
            {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
            {"name": "Nodes", "type": "integer", "jsonPath": ".status.nodes.total"},
            {"name": "Passed", "type": "integer", "jsonPath": ".status.nodes.passed"},
            {"name": "Failed", "type": "integer", "jsonPath": ".status.nodes.failed"},
            _condition_column("Uniform", "Uniform"),
            {"name": "Fabric", "type": "string", "jsonPath": ".status.fabric.summary"},
            {"name": "Last Run", "type": "date", "jsonPath": ".status.run.startedAt"},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ],
    )
    report = _crd(
        kind=crd.REPORT_KIND,
        plural=crd.REPORT_PLURAL,
        short_names=[crd.REPORT_SHORT_NAME],
        spec_model=crd.GpuNodeReportSpec,
        status_model=crd.GpuNodeReportStatus,
        description=_doc(crd.GpuNodeReport),
        spec_required=True,
        columns=[
            {"name": "Node", "type": "string", "jsonPath": ".spec.node"},
            {"name": "Run", "type": "string", "jsonPath": ".spec.run", "priority": 1},
            {"name": "Phase", "type": "string", "jsonPath": ".status.phase", "priority": 1},
            {"name": "Result", "type": "string", "jsonPath": ".status.verdict"},
            *_figure_columns(),
            {"name": "Fabric", "type": "string", "jsonPath": ".status.fabric.verdict"},
            {"name": "Fabric GB/s", "type": "number", "jsonPath": ".status.fabric.busbwGBps"},
            {"name": "Reason", "type": "string", "jsonPath": ".status.reason"},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ],
    )
    baseline = _crd(
        kind=crd.BASELINE_KIND,
        plural=crd.BASELINE_PLURAL,
        short_names=[crd.BASELINE_SHORT_NAME],
        spec_model=GpuBaselineSpec,
        status_model=None,
        description=_doc(crd.GpuBaseline),
        spec_required=True,
        columns=[
            {"name": "Product", "type": "string", "jsonPath": ".spec.key.gpuProduct"},
            {"name": "GPUs", "type": "integer", "jsonPath": ".spec.key.gpuCount"},
            {"name": "Power W", "type": "integer", "jsonPath": ".spec.key.powerLimitWatts"},
            {"name": "PCIe", "type": "string", "jsonPath": ".spec.key.pcieLink"},
            {"name": "Source", "type": "string", "jsonPath": ".spec.source.kind"},
            {"name": "Run", "type": "string", "jsonPath": ".spec.source.run", "priority": 1},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ],
    )
    return {
        f"{crd.GROUP}_{crd.VALIDATION_PLURAL}.yaml": validation,
        f"{crd.GROUP}_{crd.REPORT_PLURAL}.yaml": report,
        f"{crd.GROUP}_{crd.BASELINE_PLURAL}.yaml": baseline,
    }


def render(obj: dict[str, Any]) -> str:
    header = "# Generated by `make generate` (gpuval_api.crdgen) from api/src/gpuval_api/crd.py.\n"
    return header + yaml.safe_dump(obj, sort_keys=False, width=110, allow_unicode=True)


def default_out_dir() -> Path:
    """crds/ at the repository root (this file is api/src/gpuval_api/crdgen.py)."""
    return Path(__file__).resolve().parents[3] / "crds"


def stale_files(out: Path) -> list[str]:
    """Names of generated files that are missing or differ on disk."""
    stale = []
    for name, obj in build_crds().items():
        path = out / name
        if not path.exists() or path.read_text() != render(obj):
            stale.append(name)
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpuval_api.crdgen", description=__doc__)
    parser.add_argument("--out", type=Path, default=default_out_dir(), help="output directory")
    parser.add_argument(
        "--check", action="store_true", help="exit 1 when a generated file is stale, write nothing"
    )
    args = parser.parse_args(argv)
    out: Path = args.out
    if args.check:
        stale = stale_files(out)
        if stale:
            print(
                f"stale CRDs in {out}: {', '.join(stale)}; "
                "run `python -m gpuval_api.crdgen` and commit the result",
                file=sys.stderr,
            )
            return 1
        return 0
    out.mkdir(parents=True, exist_ok=True)
    for name, obj in build_crds().items():
        (out / name).write_text(render(obj))
        print(f"wrote {out / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
