"""`kubectl gpuval` (the kubectl-gpuval package) on the real control plane, found by the real
kubectl on PATH as a person would use it: a run of the real operator (its own process) over
simulated nodes, one slow and one computing wrong results, then `status`, `status NAME` and `report
NAME --html`, the page opened in headless chromium; and what it says when gpuval's CRDs are not
there."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from pathlib import Path

import pytest

from gpuval_api.baseline import files
from gpuval_api.crd import GpuBaseline, ObjectMeta
from gpuval_api.reasons import REASONS, Reason
from gpuval_devtools.controlplane import Cluster, free_port
from gpuval_devtools.launch import (
    AGENT_NAMESPACE,
    agent_rbac,
    kubectl_gpuval,
    operator_process,
    podrunner_process,
)
from gpuval_devtools.simulation import simulated_node
from gpuval_kubectl.cli import build_parser, show
from gpuval_kubectl.cluster import Cluster as Objects
from gpuval_kubectl.cluster import PluginError, Resources, connect
from tests.support.browser import look_at
from tests.support.kube import get_json, wait_for

pytestmark = pytest.mark.usefixtures("install_crds")


def _completed(cluster: Cluster, name: str) -> bool:
    status = (get_json(cluster, "gpuvalidation", name) or {}).get("status") or {}
    return bool((status.get("run") or {}).get("completedAt"))


@pytest.mark.browser
def test_kubectl_gpuval_shows_the_run_the_failing_nodes_with_hints_and_the_outliers(
    cluster: Cluster, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    label = unique_name("plugin")
    healthy = [unique_name("ok") for _ in range(3)]
    slow, wrong = unique_name("slow"), unique_name("wrong")
    faults = {
        slow: [{"kind": "thermal-slowdown", "gpu": 5}],
        wrong: [{"kind": "miscompare", "gpu": 3}],
    }
    nodes = [
        dataclasses.replace(simulated_node(n, faults.get(n, [])), labels={"gpuval-test": label})
        for n in [*healthy, slow, wrong]
    ]
    cluster.add_nodes(nodes)
    cluster.apply(agent_rbac())
    name = unique_name("see")
    validation = {
        "apiVersion": "gpuval.dev/v1alpha1",
        "kind": "GpuValidation",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"matchLabels": {"gpuval-test": label}},
            "nodeTimeoutSeconds": 120,
            "checks": {"burn": {"durationSeconds": 2}, "nccl": {"maxBytes": 1 << 24}},
        },
    }
    try:
        with (
            operator_process(
                cluster.kubeconfig,
                metrics_port=free_port(),
                log_file=tmp_path / "operator.log",
                namespace=AGENT_NAMESPACE,
            ),
            podrunner_process(
                cluster,
                logs_dir=tmp_path / "agents",
                log_file=tmp_path / "podrunner.log",
                namespace=AGENT_NAMESPACE,
            ),
        ):
            cluster.apply([validation])
            done = functools.partial(_completed, cluster, name)
            wait_for(f"GpuValidation {name} to complete its run", done, timeout=180, interval=1)
        listing = kubectl_gpuval(cluster, "status")
        detail = kubectl_gpuval(cluster, "status", name)
        page = tmp_path / "report.html"
        report = kubectl_gpuval(cluster, "report", name, "--html", str(page))
        missing = kubectl_gpuval(cluster, "status", "no-such-validation")
    finally:
        cluster.kubectl("delete", "gpuvalidation", name, "--wait=false", check=False)
        for node in nodes:
            cluster.kubectl("delete", "node", node.name, "--wait=false", check=False)

    assert listing.returncode == 0, listing.stderr
    assert any(line.split()[:2] == [name, "Failed"] for line in listing.stdout.splitlines())

    assert detail.returncode == 0, detail.stderr
    out = detail.stdout
    # It opens with the fleet's healthy capacity: the two failing nodes' named GPUs failed, their
    # seven others each withheld with their node.
    first, second = out.splitlines()[:2]
    assert first == (
        "Healthy capacity: 24 of 40 GPUs (60.0 %) proven healthy; 2 failed, 14 withheld with "
        "their node; nodes: 3 of 5 healthy"
    ), out
    assert second.startswith(f"GpuValidation {name}: Failed"), out
    assert "(Passed 3, Failed 2)" in out
    assert f"{wrong}  burn GPU 3  BurnMismatch:" in out
    assert f"{slow}  burn GPU 5  ThermalSlowdown:" in out
    assert f"hint: {REASONS[Reason.BURN_MISMATCH].hint}" in out
    outliers = out.split("Outliers:", 1)[1]
    assert slow in outliers and "60% of median" in outliers
    assert wrong not in outliers, "the wrong node burns at full speed: not an outlier"

    assert report.returncode == 0, report.stderr
    assert report.stdout.strip() == f"wrote {page.resolve()} (5 nodes)"
    seen = look_at(page, tmp_path / "report.png")
    assert seen.refused == [] and seen.errors == []
    burn = seen.plot("plot-burnTflops")
    assert len(burn["fills"]) == 5
    assert f"{wrong} (BurnMismatch)" in burn["annotations"]
    assert f"{slow} (60% of median)" in burn["annotations"]

    assert missing.returncode == 1
    assert "GpuValidation 'no-such-validation' not found" in missing.stderr


@pytest.mark.parametrize(
    "args",
    [["status"], ["status", "fleet"], ["report", "x", "--html", "x"], ["evidence", "gpu-node-1"]],
)
def test_without_gpuvals_crds_kubectl_gpuval_says_they_are_missing_and_how_to_install_them(
    cluster: Cluster, args: list[str]
) -> None:
    # The session's cluster has gpuval's CRDs (a session fixture installs them), so the plugin is
    # asked for a version of gpuval.dev that no CRD serves, as a plugin newer than the installed
    # CRDs would: the real API server answers 404 for the list, the object and the discovery.
    absent = Resources(version="v1alpha0")
    with connect(str(cluster.kubeconfig)) as api, pytest.raises(PluginError) as said:
        show(Objects(api, absent), build_parser().parse_args(args))
    message = str(said.value)
    assert message.startswith("gpuval's CRDs are not installed in this cluster")
    assert "gpuvalidations.gpuval.dev/v1alpha0" in message
    assert "gpunodereports.gpuval.dev/v1alpha0" in message
    assert "helm install gpuval charts/gpuval" in message
    assert "kubectl apply --server-side -f charts/gpuval/crds/" in message
    assert "HTTP 404" not in message and "not found" not in message


def test_with_gpuvals_crds_a_missing_validation_is_not_found_not_missing_crds(
    cluster: Cluster,
) -> None:
    with connect(str(cluster.kubeconfig)) as api:
        objects = Objects(api)
        assert objects.missing() == []
        with pytest.raises(PluginError, match="GpuValidation 'no-such-validation' not found"):
            show(objects, build_parser().parse_args(["status", "no-such-validation"]))


def test_a_baseline_import_applies_whole_or_not_at_all_and_notes_an_unknown_gpu_model(
    cluster: Cluster, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    shipped = files.shipped()[0]

    def named(name: str, product: str | None = None) -> GpuBaseline:
        spec = shipped.spec
        if product is not None:
            spec = spec.model_copy(
                update={"key": spec.key.model_copy(update={"gpu_product": product})}
            )
        return GpuBaseline(metadata=ObjectMeta(name=name), spec=spec)

    def write(name: str, *baselines: GpuBaseline, before: str = "") -> str:
        path = tmp_path / f"{name}.yaml"
        path.write_text(before + files.to_yaml(list(baselines)))
        return str(path)

    exists, first, second, other = (unique_name(n) for n in ("exists", "one", "two", "other"))
    made = [exists, first, second, other]
    try:
        setup = kubectl_gpuval(cluster, "baseline", "import", write("setup", named(exists)))
        assert setup.returncode == 0, setup.stderr
        # Document 2 exists: nothing of the file is created (document 1 used to stay).
        clash = kubectl_gpuval(
            cluster, "baseline", "import", write("clash", named(first), named(exists))
        )
        # Document 3 is refused by the API server (a name it does not take): the same; the
        # empty document 1 keeps its number (issue 43 part 8).
        bad = kubectl_gpuval(
            cluster,
            "baseline",
            "import",
            write("bad", named(second), named("Not_A_Name"), before="---\n# emptied\n---\n"),
        )
        # A GPU model gpuval has never seen is taken, with a note saying so.
        unknown = kubectl_gpuval(
            cluster, "baseline", "import", write("unknown", named(other, "NVIDIA B300"))
        )
        present = {n for n in made if get_json(cluster, "gpubaseline", n) is not None}
    finally:
        for name in made:
            cluster.kubectl("delete", "gpubaseline", name, "--wait=false", check=False)

    assert clash.returncode == 1
    assert "nothing imported: document 2 (GpuBaseline " in clash.stderr
    assert f"GpuBaseline {exists!r} exists; --replace" in clash.stderr
    assert bad.returncode == 1
    assert (
        "nothing imported: document 3 (GpuBaseline 'Not_A_Name'): the API server refused: HTTP 422"
        in bad.stderr
    )
    assert unknown.returncode == 0, unknown.stderr
    assert (
        f"GpuBaseline {other} created (note: GPU model 'NVIDIA B300' is not one gpuval knows"
        in unknown.stdout
    )
    assert present == {exists, other}, "a refused file created nothing"
