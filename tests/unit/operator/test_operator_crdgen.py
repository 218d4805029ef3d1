"""The CRDs in crds/ are generated from api/src/gpuval_api/crd.py and must not drift from it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuval_api import crdgen
from gpuval_api.baselinemodel import GpuBaselineSpec
from gpuval_api.checks import ChecksConfig
from gpuval_api.crd import GpuNodeReportSpec, GpuNodeReportStatus, GpuValidationSpec


def test_check_fails_when_a_crd_file_is_edited(tmp_path: Path) -> None:
    assert crdgen.main(["--out", str(tmp_path)]) == 0
    target = next(tmp_path.glob("*gpuvalidations.yaml"))
    target.write_text(target.read_text().replace("maxConcurrent", "maxParallel"))
    assert crdgen.main(["--check", "--out", str(tmp_path)]) == 1
    assert crdgen.stale_files(tmp_path) == [target.name]


def _walk(node: object, path: str = "") -> list[tuple[str, dict[str, object]]]:
    found: list[tuple[str, dict[str, object]]] = []
    if isinstance(node, dict):
        found.append((path, node))
        for key, value in node.get("properties", {}).items():
            found.extend(_walk(value, f"{path}.{key}"))
        if "items" in node:
            found.extend(_walk(node["items"], f"{path}[]"))
        if isinstance(node.get("additionalProperties"), dict):
            found.extend(_walk(node["additionalProperties"], f"{path}{{}}"))
    return found


@pytest.mark.parametrize(
    "model", [GpuValidationSpec, GpuNodeReportStatus, GpuNodeReportSpec, GpuBaselineSpec]
)
def test_schema_is_structural_with_a_description_on_every_field(model: type) -> None:
    schema = crdgen.model_schema(model)
    for path, node in _walk(schema):
        assert "$ref" not in node and "anyOf" not in node and "title" not in node, path
        assert node.get("default", 0) is not None, f"{path}: null default"
        assert (
            "type" in node
            or node.get("x-kubernetes-int-or-string")
            or node.get("x-kubernetes-preserve-unknown-fields")
        ), f"{path}: no type"
        if path and not path.endswith("[]") and not path.endswith("{}"):
            assert node.get("description"), f"{path}: no description"


def test_int_or_string_concurrency_and_cel_rules_reach_the_schema() -> None:
    schema = crdgen.model_schema(GpuValidationSpec)
    concurrency = schema["properties"]["maxConcurrent"]
    assert concurrency["x-kubernetes-int-or-string"] is True and "type" not in concurrency
    assert concurrency["default"] == "25%"
    assert "self >= 1" in concurrency["x-kubernetes-validations"][0]["rule"]
    rules = [r["rule"] for r in schema["x-kubernetes-validations"]]
    assert any("expectedGpus" in r for r in rules)
    assert schema["properties"]["checks"]["default"] == ChecksConfig().model_dump(
        mode="json", by_alias=True, exclude_none=True
    )
    assert "default" not in schema["properties"]["nodeSelector"]


def test_an_unrepresentable_union_is_refused() -> None:
    with pytest.raises(crdgen.SchemaError, match="x: a union"):
        crdgen.structural({"anyOf": [{"type": "integer"}, {"type": "boolean"}]}, {}, "x")


def test_output_is_identical_whatever_the_hash_seed(tmp_path: Path) -> None:
    outputs = []
    for seed in ("1", "2", "3"):
        out = tmp_path / seed
        env = {**os.environ, "PYTHONHASHSEED": seed}
        subprocess.run(
            [sys.executable, "-m", "gpuval_api.crdgen", "--out", str(out)],
            env=env,
            check=True,
            capture_output=True,
        )
        outputs.append({p.name: p.read_text() for p in sorted(out.glob("*.yaml"))})
    assert outputs[0] == outputs[1] == outputs[2]


@pytest.mark.parametrize("model", [GpuValidationSpec, GpuBaselineSpec])
def test_every_spec_field_a_user_writes_is_bounded(model: type) -> None:
    """Unbounded input would be copied into status and grow it toward etcd's limit (issue 9);
    a GpuBaseline is written by hand or imported from a file."""
    schema = crdgen.model_schema(model)
    unbounded = []
    for path, node in _walk(schema):
        kind = node.get("type")
        if node.get("x-kubernetes-int-or-string"):
            if "maximum" not in node or "maxLength" not in node:
                unbounded.append(f"{path}: int-or-string without maximum and maxLength")
        elif kind == "string" and "maxLength" not in node and "enum" not in node:
            unbounded.append(f"{path}: string without maxLength")
        elif kind in ("integer", "number") and "maximum" not in node:
            unbounded.append(f"{path}: number without maximum")
        elif kind == "array" and "maxItems" not in node:
            unbounded.append(f"{path}: array without maxItems")
        elif isinstance(node.get("additionalProperties"), dict) and "maxProperties" not in node:
            unbounded.append(f"{path}: map without maxProperties")
    assert unbounded == []


def test_report_status_refuses_verdicts_and_reasons_outside_the_catalogue() -> None:
    props = crdgen.model_schema(GpuNodeReportStatus)["properties"]
    assert props["verdict"]["enum"] == ["Passed", "Failed", "NotRun"]
    assert "Maybe" not in props["reason"]["enum"] and "BurnMismatch" in props["reason"]["enum"]
    assert props["failures"]["items"]["properties"]["reason"]["enum"] == props["reason"]["enum"]
    assert props["phase"]["enum"] == ["Pending", "Waiting", "Running", "Completed"]


def test_a_baseline_is_a_spec_only_object_and_its_figures_a_list_map() -> None:
    baseline = crdgen.build_crds()["gpuval.dev_gpubaselines.yaml"]
    version = baseline["spec"]["versions"][0]
    root = version["schema"]["openAPIV3Schema"]
    assert "status" not in root["properties"] and "subresources" not in version
    figures = root["properties"]["spec"]["properties"]["figures"]
    assert figures["x-kubernetes-list-map-keys"] == ["figure"] and figures["maxItems"] == 48
    history = crdgen.model_schema(GpuNodeReportSpec)["properties"]["history"]
    assert history["maxItems"] == 20


def test_no_short_name_is_also_a_category_so_kubectl_get_short_name_name_works() -> None:
    # kubectl expands a category before it looks a short name up: a short name equal to a
    # category can never name one object ("you must specify only one resource").
    names = [crd["spec"]["names"] for crd in crdgen.build_crds().values()]
    short_names = {s for n in names for s in n["shortNames"]}
    categories = {c for n in names for c in n["categories"]}
    plurals = {n["plural"] for n in names} | {n["singular"] for n in names}

    assert short_names == {"gpuval", "gpureport", "gpubaseline"}
    assert categories == {"gpuval-all"}
    assert not short_names & categories
    assert not categories & plurals
