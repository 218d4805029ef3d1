"""A baseline as a YAML file: exported and imported with the same verdicts, bad input refused
naming the field and the value, and the H200 baseline shipped from this project's measurements."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gpuval_agent.baseline import judge
from gpuval_agent.parts import PARTS
from gpuval_api.baseline import files, shippedgen
from gpuval_api.baseline.files import BaselineFileError, from_yaml, to_yaml
from gpuval_api.baseline.learn import learn
from gpuval_api.baselinemodel import BaselineKey, SourceKind
from gpuval_api.crd import GpuBaseline, ObjectMeta
from gpuval_api.parts import KNOWN_PRODUCTS, unknown_product_note
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
            "spec.figures[0].centre = -5.0: Input should be greater than or equal to 0",
        ),
        (
            # A centre of 0 is a count's where lower is better, never a throughput's.
            lambda d: d["spec"]["figures"][0].update(centre=0.0),
            "centre of burn.bf16 is 0: more than 0 where higher is better",
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


def test_a_name_given_twice_names_both_documents_counting_empty_ones() -> None:
    """Issue 43 part 8: the error numbers the documents, and an empty document (a stray `---`)
    keeps its place, so document N is the Nth in the file."""
    one = to_yaml([learned()])
    other = learned()
    other.metadata.name = "another-name"
    text = one + "---\n---\n" + to_yaml([other]) + "---\n" + one
    with pytest.raises(BaselineFileError) as raised:
        from_yaml(text, "team.yaml")
    assert str(raised.value).startswith(
        "team.yaml: metadata.name 'nvidia-h200-x4-700w-gen5x16' is given to documents 1 and 4; "
    )
    numbered = files.numbered_from_yaml("---\n# empty\n---\n" + one, "team.yaml")
    assert [number for number, _ in numbered] == [2]
    broken = "---\n---\n" + one.replace("gpuProduct: NVIDIA H200", "gpuProduct: 5")
    with pytest.raises(BaselineFileError, match=r"^team\.yaml: document 2 \("):
        from_yaml(broken, "team.yaml")


def test_a_nan_is_refused_as_not_a_number_and_a_huge_value_is_quoted_in_part() -> None:
    document = files.to_document(learned())
    document["spec"]["figures"][2]["centre"] = float("nan")
    with pytest.raises(BaselineFileError) as nan:
        from_yaml(yaml.safe_dump(document), "team.yaml")
    assert str(nan.value).startswith(
        "team.yaml: document 1 (nvidia-h200-x4-700w-gen5x16): spec.figures[2].centre = nan: "
        "not a number"
    )
    document["spec"]["figures"][2]["centre"] = float("inf")
    with pytest.raises(BaselineFileError, match=r"centre = inf: not a finite number"):
        from_yaml(yaml.safe_dump(document), "team.yaml")

    document = files.to_document(learned())
    document["spec"]["key"]["gpuProduct"] = "x" * 400_000
    document["metadata"]["name"] = "n" * 400_000
    with pytest.raises(BaselineFileError) as huge:
        from_yaml(json.dumps(document), "team.json")
    said = str(huge.value)
    assert len(said) < 1_000, said[:300]
    assert "spec.key.gpuProduct = 'xxxx" in said and "(400,002 characters)" in said
    assert "(400,000 characters)" in said  # the name, cut too


def test_a_file_holds_at_most_64_documents_in_1_mib(tmp_path: Path) -> None:
    one = learned()
    many = [
        GpuBaseline(metadata=ObjectMeta(name=f"b-{i:04d}"), spec=one.spec)
        for i in range(files.MAX_DOCUMENTS + 1)
    ]
    with pytest.raises(BaselineFileError, match="more than 64 documents; a baseline file holds"):
        from_yaml(to_yaml(many), "many.yaml")
    assert len(from_yaml(to_yaml(many[: files.MAX_DOCUMENTS]), "64.yaml")) == 64
    big = tmp_path / "big.yaml"
    big.write_text(to_yaml([one]) + "# " + "x" * files.MAX_FILE_BYTES + "\n")
    with pytest.raises(
        BaselineFileError,
        match=r"big.yaml: 1,0\d\d,\d{3} bytes, more than a baseline file holds \(1,048,576",
    ):
        files.read_file(big)


def test_gpuvals_known_gpu_models_are_the_agents_parts_and_another_is_noted() -> None:
    assert {part.product for part in PARTS} == set(KNOWN_PRODUCTS)
    assert unknown_product_note("NVIDIA H200") is None
    note = unknown_product_note("NVIDIA B300")
    assert note is not None and note.startswith("GPU model 'NVIDIA B300' is not one gpuval knows")


def test_a_json_file_reads_as_well() -> None:
    text = json.dumps(files.to_document(learned()))

    (baseline,) = from_yaml(text, "team.json")

    assert baseline.spec == learned().spec


def test_the_shipped_baselines_come_from_the_benchmark_results_they_name() -> None:
    by_model = {b.spec.key.gpu_product: b for b in files.shipped()}
    assert set(by_model) == {"NVIDIA H200", "NVIDIA H100 80GB HBM3"}
    h200, h100 = by_model["NVIDIA H200"], by_model["NVIDIA H100 80GB HBM3"]
    assert h200.spec.key == BaselineKey(
        gpu_product="NVIDIA H200", gpu_count=2, power_limit_watts=700, pcie_link="gen5x16"
    )
    assert h100.spec.key.gpu_count == 1
    assert h200.spec == shippedgen.build(shippedgen.H200).spec
    assert h100.spec == shippedgen.build(shippedgen.H100).spec
    results = Path(shippedgen.RESULTS)
    for shipped in (h200, h100):
        assert shipped.spec.source.kind is SourceKind.SHIPPED
        for figure in shipped.spec.figures:
            named = figure.source.removeprefix("benchmarks/results/: ").split(", ")
            assert named and all((results / name).is_file() for name in named), figure.figure
        assert "No figure comes from a public source" in shipped.spec.source.description
    bf16 = h200.spec.figure("burn.bf16")
    assert bf16 is not None and bf16.nodes == 4 and bf16.samples == 8
    # The median of the eight per-GPU figures of the four default runs.
    assert bf16.centre == 706.421


def test_the_shipped_baselines_hold_the_losses_their_stack_computed_twice() -> None:
    for shipped in files.shipped():
        [losses] = shipped.spec.training
        assert losses.nodes == 2 and len(losses.losses) == 65, shipped.metadata.name
        assert losses.stack.startswith(shipped.spec.key.gpu_product + ", driver ")
        named = losses.source.removeprefix("benchmarks/results/: ").split(", ")
        assert all((Path(shippedgen.RESULTS) / name).is_file() for name in named)
    h200 = next(b for b in files.shipped() if b.spec.key.gpu_product == "NVIDIA H200")
    assert h200.spec.training[0].digest == "fa97a33de834da07"


def test_a_loss_that_yaml_1_2_reads_as_a_number_is_written_quoted() -> None:
    # kubectl (YAML 1.2) read a bare 411e6682 as 4.11e+6684 and the API server refused the file.
    h200 = next(b for b in files.shipped() if b.spec.key.gpu_product == "NVIDIA H200")
    text = files.to_yaml([h200])
    assert "- '411e6682'\n" in text and "- 411e6682\n" not in text
    assert "- 4122b0d2\n" in text  # not a number in either: left bare
    (back,) = from_yaml(text, "shipped")
    assert back.spec == h200.spec
