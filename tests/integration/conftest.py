"""Fixtures for the tests that run against the real local control plane (marker ``cluster``).

The control plane is built from Go modules once and cached (gpuval_devtools.controlplane); starting
it when the cache is warm takes seconds. One cluster serves the whole session (under pytest-xdist,
each worker's session: a control plane per worker, with its own name, directory and loopback
ports); tests isolate themselves with unique names (the ``unique_name`` fixture) and their own
namespaces or nodes.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from kopf.testing import KopfRunner

from gpuval_api.env import OperatorEnv
from gpuval_devtools import images
from gpuval_devtools.controlplane import Cluster, GpuNode, free_port
from gpuval_devtools.kueue import Kueue
from gpuval_devtools.launch import AGENT_NAMESPACE, agent_rbac, podrunner_process
from gpuval_devtools.realnode import RealNode
from tests.support.fleet import Fleet, Operator
from tests.support.promtool import promtool_binary

Factory = Callable[..., contextlib.AbstractContextManager[Any]]

REPO_ROOT = Path(__file__).resolve().parents[2]
CRD_DIR = REPO_ROOT / "crds"
SESSION_NODES = 4


# The fixtures of the one real node: it runs on the machine itself (gpuval_devtools.realnode), so
# every test that takes it runs in one pytest-xdist worker, one after the other.
REAL_NODE_FIXTURES = frozenset({"real_node", "real_node_cluster", "built_images"})
REAL_NODE_GROUP = "real-node"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks every test here ``cluster`` (and ``real_node`` where it takes the real node) and gives
    it its pytest-xdist group (``make test`` runs ``--dist loadgroup``): a module's tests stay
    together on one worker, whose session starts its own control plane (so module-scoped fixtures
    such as Kueue start once), and the tests of the real node share one worker. ``make test``
    runs the ``real_node`` tests on their own after the rest, serially: in a parallel run a
    second worker's session was seen waiting on the machine's one real node."""
    here = Path(__file__).parent
    for item in items:
        path = Path(str(item.fspath))
        if here not in path.parents:
            continue
        item.add_marker(pytest.mark.cluster)
        uses_real_node = not REAL_NODE_FIXTURES.isdisjoint(getattr(item, "fixturenames", ()))
        if uses_real_node:
            item.add_marker(pytest.mark.real_node)
        group = REAL_NODE_GROUP if uses_real_node else str(path.relative_to(here.parent))
        item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    """A running control plane with ``SESSION_NODES`` simulated 8-GPU nodes, for the session."""
    name = f"gpuval-test-{uuid.uuid4().hex[:6]}"
    nodes = [GpuNode(name=f"{name}-gpu-{i}") for i in range(SESSION_NODES)]
    started = Cluster.start(name, nodes)
    previous = os.environ.get("KUBECONFIG")
    os.environ["KUBECONFIG"] = str(started.kubeconfig)
    try:
        yield started
    finally:
        if previous is None:
            os.environ.pop("KUBECONFIG", None)
        else:
            os.environ["KUBECONFIG"] = previous
        started.stop()


@pytest.fixture(scope="session")
def real_node_cluster(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """The session's cluster with one real node (gpuval_devtools.realnode) beside its kwok
    nodes; only with --real-node (make test passes it), which needs root."""
    if not request.config.getoption("--real-node"):
        pytest.skip("needs one real node: run with --real-node (make test does), as root")
    cluster.start_real_node()
    try:
        yield cluster
    finally:
        problems = cluster.stop_real_node()
        assert not problems, f"the real node's teardown left: {problems}"


@pytest.fixture(scope="session")
def built_images(request: pytest.FixtureRequest) -> list[images.BuiltImage]:
    """gpuval's images built here without a daemon (cached); with --real-node only, as building
    them needs root (mmdebstrap, chroot)."""
    if not request.config.getoption("--real-node"):
        pytest.skip("builds the images: run with --real-node (make test does), as root")
    return images.ensure()


@pytest.fixture
def real_node(real_node_cluster: Cluster) -> RealNode:
    """The running real node (a test may have restarted it: always the current one)."""
    node = real_node_cluster.real_node
    assert node is not None, "the real node was stopped by an earlier test and not restarted"
    return node


@pytest.fixture(scope="session")
def kube_config(cluster: Cluster) -> Path:
    return cluster.kubeconfig


@pytest.fixture
def namespace(cluster: Cluster, unique_name: Callable[[str], str]) -> Iterator[str]:
    """A fresh namespace for one test, deleted (without waiting) afterwards."""
    name = unique_name("ns")
    cluster.kubectl("create", "namespace", name)
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture(scope="module")
def kueue(cluster: Cluster) -> Iterator[Kueue]:
    """Kueue's manager on the session's cluster (gpuval_devtools.kueue, docs/kueue.md) for one
    test module: stopped after it, as its pod webhook fails closed and must not outlive it."""
    started = cluster.start_kueue()
    try:
        yield started
    finally:
        cluster.stop_kueue()


@pytest.fixture
def kueue_namespace(
    cluster: Cluster, kueue: Kueue, unique_name: Callable[[str], str]
) -> Iterator[str]:
    """A fresh namespace that Kueue manages; afterwards its pods and queues are deleted while
    Kueue still runs (it holds finalizers on them), then the namespace."""
    name = unique_name("kq")
    cluster.kubectl("create", "namespace", name)
    kueue.opt_in(name)
    yield name
    kueue.release(name)
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture(scope="session")
def install_crds(cluster: Cluster) -> list[str]:
    """Applies every CRD under crds/ and waits until the API server serves them."""
    files = sorted(CRD_DIR.glob("*.yaml"))
    if not files:
        pytest.fail(f"no CRDs under {CRD_DIR}: generate them first (make crds)")
    for f in files:
        cluster.kubectl("apply", "--server-side", "-f", str(f))
    names = [
        line.split("/", 1)[1]
        for f in files
        for line in cluster.kubectl("get", "-f", str(f), "-o", "name").stdout.split()
    ]
    for name in names:
        cluster.kubectl("wait", "--for=condition=Established", f"crd/{name}", "--timeout=60s")
    return names


@pytest.fixture
def writer_account(
    cluster: Cluster, namespace: str, unique_name: Callable[[str], str]
) -> tuple[str, str]:
    """A ServiceAccount allowed to patch GpuNodeReport status and nothing else."""
    account, role = "gpuval-agent", unique_name("agent-writer")
    cluster.kubectl("create", "serviceaccount", account, "-n", namespace)
    cluster.kubectl(
        "create",
        "clusterrole",
        role,
        "--verb=get,patch",
        "--resource=gpunodereports.gpuval.dev/status",
    )
    cluster.kubectl(
        "create",
        "clusterrolebinding",
        role,
        f"--clusterrole={role}",
        f"--serviceaccount={namespace}:{account}",
    )
    return namespace, account


@pytest.fixture
def kopf_runner(
    cluster: Cluster,
) -> Callable[..., contextlib.AbstractContextManager[Any]]:
    """A factory of running operators: ``with kopf_runner() as runner:`` runs gpuval's operator
    in-process through kopf.testing.KopfRunner against the session's cluster."""

    def make(
        module: str = "gpuval_operator.main", extra_args: Sequence[str] = ()
    ) -> contextlib.AbstractContextManager[Any]:
        args = ["run", "--standalone", "--all-namespaces", "-m", module, *extra_args]
        return KopfRunner(args, timeout=120)

    return make


@pytest.fixture(scope="module")
def podrunner(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The kubelet stand-in for the simulated nodes; yields the agents' log directory."""
    cluster.apply(agent_rbac())
    logs = tmp_path_factory.mktemp("agents")
    with podrunner_process(
        cluster, logs_dir=logs, log_file=logs / "podrunner.log", namespace=AGENT_NAMESPACE
    ):
        yield logs


@pytest.fixture
def operator(kopf_runner: Factory, monkeypatch: pytest.MonkeyPatch, podrunner: Path) -> Operator:
    """A factory: `with operator() as metrics_port:` runs the operator in-process."""

    @contextlib.contextmanager
    def run() -> Iterator[int]:
        port = free_port()
        monkeypatch.setenv(OperatorEnv.METRICS_PORT, str(port))
        monkeypatch.setenv(OperatorEnv.AGENT_NAMESPACE, AGENT_NAMESPACE)
        monkeypatch.setenv(OperatorEnv.POD_GRACE_SECONDS, "3")
        with kopf_runner() as runner:
            yield port
        assert runner.exception is None, runner.exception

    return run


@pytest.fixture
def fleet(cluster: Cluster, unique_name: Callable[[str], str]) -> Iterator[Fleet]:
    own = Fleet(cluster, unique_name("fleet"))
    yield own
    for node in own.nodes:
        cluster.kubectl("delete", "node", node, "--wait=false", check=False)
    if own.slices:
        cluster.kubectl("delete", "resourceslices", *own.slices, "--wait=false", check=False)


@pytest.fixture(scope="session")
def promtool() -> Path:
    """Debian's promtool, unpacked once into the cache (the alert and Grafana rule tests)."""
    return promtool_binary()
