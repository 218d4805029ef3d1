"""A test's own simulated nodes and its GpuValidations on the real control plane: apply, wait for a
completed run, read its status, reports, pods and the operator's metrics."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import yaml

from gpuval_api.gfd import SharingStrategy
from gpuval_devtools.controlplane import Cluster
from gpuval_devtools.launch import AGENT_NAMESPACE
from gpuval_devtools.simulation import SIMULATE_ANNOTATION, simulated_node
from tests.support.kube import get_json, wait_for

# The integration conftest's `operator` fixture: `with operator() as metrics_port:`.
Operator = Callable[[], contextlib.AbstractContextManager[int]]


class Fleet:
    """A test's own simulated nodes, all carrying one unique label its GpuValidation selects."""

    def __init__(self, cluster: Cluster, label: str) -> None:
        self.cluster = cluster
        self.label = label
        self.nodes: list[str] = []
        # The ResourceSlices that publish its nodes' GPUs (devices="dra"), deleted with them.
        self.slices: list[str] = []

    def add(
        self,
        name: str,
        faults: Sequence[dict[str, Any]] = (),
        *,
        taints: Sequence[dict[str, str]] = (),
        labels: Mapping[str, str] | None = None,
        sharing: tuple[SharingStrategy, int] | None = None,
        **simulate: Any,
    ) -> str:
        """A simulated node of this fleet; `sharing` (strategy, replicas per GPU): its device
        plugin shares its GPUs, with the capacity and labels GPU feature discovery gives it."""
        node = simulated_node(name, faults, **simulate)
        own = {**node.labels, **(labels or {}), "gpuval-test": self.label}
        labelled = dataclasses.replace(node, labels=own, taints=taints)
        if sharing is not None:
            labelled = dataclasses.replace(labelled, sharing=sharing[0], replicas=sharing[1])
        self.cluster.add_nodes([labelled])
        self.nodes.append(name)
        self.slices += [str(s["metadata"]["name"]) for s in labelled.slices]
        return name

    def add_many(
        self,
        faults: Mapping[str, Sequence[dict[str, Any]]],
        *,
        labels: Mapping[str, str] | None = None,
        **simulate: Any,
    ) -> list[str]:
        """Nodes named by `faults`' keys, each with its faults, added in one apply (a fleet of
        40 in seconds); `simulate`: simulated_node's settings for each (e.g. devices="dra")."""
        own = {**(labels or {}), "gpuval-test": self.label}
        made = [
            simulated_node(name, node_faults, **simulate) for name, node_faults in faults.items()
        ]
        nodes = [dataclasses.replace(node, labels={**node.labels, **own}) for node in made]
        self.cluster.add_nodes(nodes)
        self.nodes += [n.name for n in nodes]
        self.slices += [str(s["metadata"]["name"]) for n in nodes for s in n.slices]
        return [n.name for n in nodes]

    def resimulate(self, node: str, faults: Sequence[dict[str, Any]], **overrides: Any) -> None:
        """The node's agents from now on simulate `faults` (and the config's `overrides`, e.g.
        gpuSet: its GPUs replaced; the pod runner reads the node's simulation config each time
        it starts an agent)."""
        config = simulated_node(node, faults, **overrides).annotations[SIMULATE_ANNOTATION]
        self.cluster.kubectl(
            "annotate", "node", node, f"{SIMULATE_ANNOTATION}={config}", "--overwrite"
        )

    def validation(self, name: str, **spec: Any) -> dict[str, Any]:
        body: dict[str, Any] = {
            "nodeSelector": {"matchLabels": {"gpuval-test": self.label}},
            "nodeTimeoutSeconds": 120,
            "checks": {"burn": {"durationSeconds": 5}, "nccl": {"maxBytes": 1 << 30}},
        }
        body.update(spec)
        return {
            "apiVersion": "gpuval.dev/v1alpha1",
            "kind": "GpuValidation",
            "metadata": {"name": name},
            "spec": body,
        }


def apply(cluster: Cluster, obj: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(obj))


def delete_validation(cluster: Cluster, name: str) -> None:
    cluster.kubectl("delete", "gpuvalidation", name, "--wait=false", check=False)


def status_of(cluster: Cluster, name: str) -> dict[str, Any]:
    obj = get_json(cluster, "gpuvalidation", name) or {}
    status: dict[str, Any] = obj.get("status") or {}
    return status


def conditions(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status.get("conditions") or []}


def completed_run(
    cluster: Cluster, name: str, timeout: float = 120, after: int = 0
) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        status = status_of(cluster, name)
        run = status.get("run") or {}
        if run.get("completedAt") and int(run.get("number") or 0) > after:
            return status
        return None

    result: dict[str, Any] = wait_for(
        f"a completed run of {name}", done, timeout=timeout, interval=1
    )
    return result


def reports_of(cluster: Cluster, name: str, run: str | None = None) -> list[dict[str, Any]]:
    selector = f"gpuval.dev/validation={name}" + (f",gpuval.dev/run={run}" if run else "")
    items: list[dict[str, Any]] = (get_json(cluster, "gpunodereports", "-l", selector) or {}).get(
        "items", []
    )
    return items


def pods_of(cluster: Cluster, name: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = (
        get_json(cluster, "pods", "-n", AGENT_NAMESPACE, "-l", f"gpuval.dev/validation={name}")
        or {}
    ).get("items", [])
    return items


def by_node(reports: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["spec"]["node"]: r.get("status") or {} for r in reports}


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text: str = resp.read().decode()
        return text


def scrape_when_up(port: int) -> str:
    """The metrics, or "" while the operator is still starting (KopfRunner returns before that)."""
    try:
        return scrape(port)
    except OSError:
        return ""


def patch_spec(cluster: Cluster, name: str, spec: Mapping[str, Any]) -> None:
    """A merge patch of the validation's spec: a new generation, so a new run."""
    cluster.kubectl(
        "patch", "gpuvalidation", name, "--type", "merge", "-p", json.dumps({"spec": dict(spec)})
    )


def events_of(cluster: Cluster, name: str) -> list[dict[str, Any]]:
    """The Events about a cluster-scoped object (they live in `default`)."""
    found = get_json(
        cluster, "events", "-n", "default", "--field-selector", f"involvedObject.name={name}"
    )
    items: list[dict[str, Any]] = (found or {}).get("items", [])
    return items
