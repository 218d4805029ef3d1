"""A baseline as a YAML file: exported and imported with the same verdicts, bad input refused
naming the field and the value, and the H200 baseline shipped from this project's measurements."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gpuval_agent.baseline import judge
from gpuval_api.baseline import files, shippedgen
from gpuval_api.baseline.files import BaselineFileError, from_yaml, to_yaml
from gpuval_api.baseline.learn import learn
from gpuval_api.baselinemodel import BaselineKey, SourceKind
from gpuval_api.crd import GpuBaseline, ObjectMeta
from tests.support.baselines import GPUS, measured, node_figures, slowed

KEY = BaselineKey(
    gpu_product="NVIDIA H200", gpu_count=GPUS, power_limit_watts=700, pcie_link="gen5x16"
)


def learned() -> GpuBaseline:
    nodes = [node_figures(measured(f"n{i}", slowed(0.85) if i == 3 else ())) for i in range(8)]
    outcome = learn(nodes, KEY, fraction=0.1, min_nodes=5)
    assert outcome.spec is not None
    meta = ObjectMeta(name=KEY.default_name(), uid="1234", annotations={"x": "y"})
    return GpuBaseline(metadata=meta, spec=outcome.spec)


def test_an_exported_and_imported_baseline_gives_the_same_verdicts(tmp_path: Path) -> None:
    original = learned()
    path = tmp_path / "h200.yaml"
    path.write_text(to_yaml([original], "carried from cluster a"))

    (imported,) = files.read_file(path)

    assert imported.spec == original.spec
    fleet = [measured(f"m{i}", slowed(0.85, [1]) if i in (2, 5) else ()) for i in range(6)]
    before = [judge(r, [(original.metadata.name, original.spec)], 0.1) for r in fleet]
    after = [judge(r, [(imported.metadata.name, imported.spec)], 0.1) for r in fleet]
    assert [(r.verdict, r.reason, r.message) for r in before] == [
        (r.verdict, r.reason, r.message) for r in after
    ]
    assert [r.baseline for r in before] == [r.baseline for r in after]
    assert [r.node for r in after if r.reason == "BelowBaseline"] == ["m2", "m5"]


def test_an_export_carries_no_cluster_fields_and_applies_anywhere() -> None:
    (document,) = yaml.safe_load_all(to_yaml([learned()]))

    assert document["metadata"] == {"name": "nvidia-h200-x4-700w-gen5x16"}
    assert (document["apiVersion"], document["kind"]) == ("gpuval.dev/v1alpha1", "GpuBaseline")
    assert document["spec"]["source"]["excluded"][0]["node"] == "n3"


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (
            lambda d: d["spec"]["figures"][0].update(centre=-5.0),
            "spec.figures[0].centre = -5.0: Input should be greater than 0",
        ),
        (
            lambda d: d["spec"]["figures"][1].update(figure="burn.int8"),
            "spec.figures[1].figure = 'burn.int8': String should match pattern",
        ),
        (
            lambda d: d["spec"]["key"].update(pcieLink="x16"),
            "spec.key.pcieLink = 'x16': String should match pattern",
        ),
        (
            lambda d: d["spec"]["figures"][0].update(unit="GB/s"),
            "unit of burn.bf16 is TFLOP/s, not GB/s",
        ),
        (
            lambda d: d["spec"]["figures"].append(dict(d["spec"]["figures"][0])),
            "figure 'burn.bf16' is given twice",
        ),
        (lambda d: d["spec"].pop("key"), "spec.key: missing"),
        (lambda d: d.update(kind="GpuValidation"), "kind 'GpuValidation': a baseline file holds"),
    ],
)
def test_a_bad_file_names_the_field_and_the_value(change: object, said: str) -> None:
    document = files.to_document(learned())
    assert callable(change)
    change(document)

    with pytest.raises(BaselineFileError) as raised:
        from_yaml(yaml.safe_dump(document), "team.yaml")

    assert said in str(raised.value)
    assert str(raised.value).startswith("team.yaml: document 1")


def test_broken_yaml_names_line_and_column_and_an_empty_file_is_refused() -> None:
    with pytest.raises(BaselineFileError, match=r"team.yaml: not YAML at line 2, column 8: "):
        from_yaml("spec:\n  key: : x\n", "team.yaml")
    with pytest.raises(BaselineFileError, match="holds no GpuBaseline document"):
        from_yaml("# nothing\n", "team.yaml")
    with pytest.raises(BaselineFileError, match="is a list, not a GpuBaseline mapping"):
        from_yaml("- 1\n- 2\n", "team.yaml")
    twice = to_yaml([learned(), learned()])
    with pytest.raises(BaselineFileError, match=r"metadata\.name 'nvidia-h200-x4-700w-gen5x16'"):
        from_yaml(twice, "team.yaml")


def test_a_json_file_reads_as_well() -> None:
    text = json.dumps(files.to_document(learned()))

    (baseline,) = from_yaml(text, "team.json")

    assert baseline.spec == learned().spec


def test_the_shipped_h200_baseline_comes_from_the_benchmark_results_it_names() -> None:
    (shipped,) = files.shipped()

    assert shipped.spec.key == BaselineKey(
        gpu_product="NVIDIA H200", gpu_count=2, power_limit_watts=700, pcie_link="gen5x16"
    )
    assert shipped.spec.source.kind is SourceKind.SHIPPED
    assert shipped.spec == shippedgen.build().spec
    results = Path(shippedgen.RESULTS)
    for figure in shipped.spec.figures:
        named = figure.source.removeprefix("benchmarks/results/: ").split(", ")
        assert named and all((results / name).is_file() for name in named), figure.figure
    bf16 = shipped.spec.figure("burn.bf16")
    assert bf16 is not None and bf16.nodes == 4 and bf16.samples == 8
    # The median of the eight per-GPU figures of the four default runs.
    assert bf16.centre == 706.421
    assert "No figure comes from a public source" in shipped.spec.source.description
