"""The CRD upgrade path docs/install.md documents: `helm upgrade` leaves CRDs as they are (Helm
never upgrades crds/), and `kubectl apply --server-side --force-conflicts -f charts/gpuval/crds/`
brings them to the chart's version."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import yaml

from gpuval_devtools.controlplane import Cluster
from tests.support import chart
from tests.support.kube import get_json

CRD_FILE = chart.CHART / "crds" / "gpuval.dev_gpunodereports.yaml"
MARK = "gpuval.dev/generated-by"


@pytest.fixture
def release(cluster: Cluster, install_crds: list[str]) -> Iterator[chart.Release]:
    try:
        with chart.installed(cluster, "upgrade") as installed:
            yield installed
    finally:
        # Whatever happened above, the cluster keeps the chart's CRD for the tests after this one.
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_FILE))


def _mark(cluster: Cluster) -> str:
    crd = get_json(cluster, "crd", "gpunodereports.gpuval.dev")
    assert crd is not None
    return str(crd["metadata"]["annotations"][MARK])


def test_helm_upgrade_leaves_crds_and_the_documented_apply_upgrades_them(
    cluster: Cluster, release: chart.Release
) -> None:
    chart_crd = yaml.safe_load(CRD_FILE.read_text())
    # An older CRD in the cluster, as a previous chart version would have left it.
    older = {**chart_crd, "metadata": {**chart_crd["metadata"]}}
    older["metadata"]["annotations"] = {MARK: "an older chart"}
    cluster.kubectl(
        "apply",
        "--server-side",
        "--force-conflicts",
        "--field-manager=older-chart",
        "-f",
        "-",
        input=yaml.safe_dump(older),
    )
    assert _mark(cluster) == "an older chart"

    chart.helm(
        "upgrade",
        release.name,
        str(chart.CHART),
        "--namespace",
        release.namespace,
        "--reuse-values",
        kubeconfig=cluster.kubeconfig,
    )
    assert _mark(cluster) == "an older chart"

    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(chart.CHART / "crds"))
    assert _mark(cluster) == chart_crd["metadata"]["annotations"][MARK]
