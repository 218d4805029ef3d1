"""Baselines on the real API server: the shipped H200 baseline applies as its file is, a baseline
exported, applied and read back from the cluster gives the same verdicts, bad figures are refused
naming the field, and spec.baseline's defaults are the api package's (issue 18, step 1)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from gpuval_agent.baseline import judge
from gpuval_api.baseline import files
from gpuval_api.baselinemodel import BaselineSettings
from gpuval_api.crd import GpuBaseline, ObjectMeta
from gpuval_devtools.controlplane import Cluster
from tests.support.baselines import measured, node_figures, slowed
from tests.support.fleets import learned_from

pytestmark = pytest.mark.usefixtures("install_crds")


def _create(cluster: Cluster, document: dict[str, Any] | str, dry_run: bool = False) -> Any:
    """kubectl create of a document, or of a file's text as it is."""
    args = ["create", "-o", "json", "-f", "-"] + (["--dry-run=server"] if dry_run else [])
    text = document if isinstance(document, str) else yaml.safe_dump(document)
    proc = cluster.kubectl(*args, input=text, check=False)
    return json.loads(proc.stdout) if proc.returncode == 0 else proc.stderr


def test_every_shipped_baseline_applies_as_its_file_is(cluster: Cluster) -> None:
    for shipped in files.shipped():  # the H200's and the H100's, with their training losses
        # The file's text: kubectl reads YAML 1.2, where a bare 411e6682 is a number.
        stored = _create(cluster, files.to_yaml([shipped]), dry_run=True)

        assert isinstance(stored, dict), stored
        assert GpuBaseline.model_validate(stored).spec == shipped.spec
        assert shipped.spec.training and stored["spec"]["training"], shipped.metadata.name


def test_a_baseline_exported_applied_and_read_back_gives_the_same_verdicts(
    cluster: Cluster, unique_name: Callable[[str], str]
) -> None:
    name, spec = learned_from([measured(f"n{i}") for i in range(6)])
    exported = files.to_yaml([GpuBaseline(metadata=ObjectMeta(name=unique_name(name)), spec=spec)])
    cluster.kubectl("apply", "-f", "-", input=exported)
    (applied,) = files.from_yaml(exported, "exported")
    try:
        read_back = cluster.kubectl("get", "gpubaseline", applied.metadata.name, "-o", "yaml")
        (imported,) = files.from_yaml(read_back.stdout, "kubectl get")

        assert imported.spec == spec
        fleet = [measured(f"m{i}", slowed(0.85, [1]) if i == 2 else ()) for i in range(4)]
        before = [judge(r, [(name, spec)], 0.1) for r in fleet]
        after = [judge(r, [(name, imported.spec)], 0.1) for r in fleet]
        assert [(r.verdict, r.reason) for r in before] == [(r.verdict, r.reason) for r in after]
        assert [r.node for r in after if r.reason == "BelowBaseline"] == ["m2"]
        assert node_figures(fleet[0]).key == spec.key
    finally:
        cluster.kubectl("delete", "gpubaseline", applied.metadata.name, check=False)


def test_a_figure_below_zero_is_refused_naming_the_field(
    cluster: Cluster, unique_name: Callable[[str], str]
) -> None:
    shipped = next(b for b in files.shipped() if b.spec.key.gpu_product == "NVIDIA H200")
    document = files.to_document(shipped)
    document["metadata"]["name"] = unique_name("bad")
    document["spec"]["figures"][0]["centre"] = -5

    answer = _create(cluster, document, dry_run=True)

    assert isinstance(answer, str), "the API server accepted it"
    assert "spec.figures[0].centre" in answer, answer
    # A count where lower is better may learn a centre of 0 (issue 42 part 3): below 0 is refused.
    assert "should be greater than or equal to 0" in answer, answer


def test_spec_baseline_defaults_are_the_api_packages_and_history_is_bounded(
    cluster: Cluster, unique_name: Callable[[str], str]
) -> None:
    validation = {
        "apiVersion": "gpuval.dev/v1alpha1",
        "kind": "GpuValidation",
        "metadata": {"name": unique_name("baseline")},
        "spec": {"baseline": {}},
    }

    stored = _create(cluster, validation, dry_run=True)

    assert isinstance(stored, dict), stored
    assert BaselineSettings.model_validate(stored["spec"]["baseline"]) == BaselineSettings()
    validation["spec"] = {"baseline": {"history": {"runs": 21}}}
    refused = _create(cluster, validation, dry_run=True)
    assert isinstance(refused, str) and "spec.baseline.history.runs" in refused, refused
