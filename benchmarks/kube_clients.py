"""The operator's hand-written client against the `kubernetes` package's, listing N agent pods.

Why the operator keeps its own small asyncio client for its hot paths
(docs/operator/architecture.md,
"Credentials"): the operator lists and watches its agent pods, reports and nodes, thousands at a
time, and keeps a few fields of each. This lists N agent pods (the operator's own manifests,
`planning.build_pod`, held Pending by a scheduler name no scheduler serves) from a local control
plane, 500 a page, each way, and prints per way the wall time, the CPU time of this process and
the memory the listed objects hold:

- `KubeClient` (aiohttp, raw JSON to dicts), then the operator's `PodFacts` of each;
- `kubernetes.aio` (the package's asyncio client), its V1Pod models;
- `kubernetes.aio` with `_preload_content=False` (the package as a transport), json to dicts;
- `kubernetes` (the synchronous client), its V1Pod models.

All four log in with the one identity of gpuval_credentials. A benchmark, never a timed test:

    python3 -m uv run python benchmarks/kube_clients.py --pods 10000 --json out/kube-clients.json
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import kubernetes
import kubernetes.aio

from gpuval_api.crd import GpuValidationSpec
from gpuval_credentials import Identity
from gpuval_credentials.sync import configuration
from gpuval_devtools.controlplane import running_cluster
from gpuval_operator.config import OperatorConfig
from gpuval_operator.kube import KubeClient, Login, load_credentials, q
from gpuval_operator.planning import build_pod
from gpuval_operator.podfacts import PodFacts

NAMESPACE = "bench"
PAGE = 500
Way = Callable[[Identity], Coroutine[Any, Any, list[Any]]]


def bench_pod(index: int) -> dict[str, Any]:
    pod = build_pod(
        validation="bench",
        uid="00000000-0000-0000-0000-000000000000",
        run="1-abcd",
        node=f"gpu-node-{index:05d}",
        gpus=8,
        spec=GpuValidationSpec(),
        config=OperatorConfig(agent_namespace=NAMESPACE),
    )
    pod["metadata"].pop("ownerReferences", None)  # no owner: the garbage collector leaves them
    pod["spec"]["schedulerName"] = "gpuval-bench-unscheduled"  # Pending, as a first wave is
    return pod


async def create_pods(client: KubeClient, count: int, concurrency: int = 32) -> None:
    path = f"/api/v1/namespaces/{q(NAMESPACE)}/pods"
    queue = iter(range(count))

    async def worker() -> None:
        for index in queue:
            await client.create(path, bench_pod(index))

    await asyncio.gather(*(worker() for _ in range(concurrency)))


async def with_kubeclient(identity: Identity) -> list[PodFacts]:
    async with KubeClient(load_credentials_of(identity)) as client:
        items, _ = await client.list_pages(f"/api/v1/namespaces/{q(NAMESPACE)}/pods", "", PAGE)
    return [PodFacts.parse(item) for item in items]


def load_credentials_of(identity: Identity) -> Login:
    return Login(lambda: identity)


def aio_configuration(identity: Identity) -> Any:
    config = kubernetes.aio.client.Configuration(host=identity.server)
    config.ssl_ca_cert = identity.ca_file
    config.cert_file, config.key_file = identity.cert_file, identity.key_file
    config.verify_ssl = identity.verify
    if identity.authorization:
        config.api_key["BearerToken"] = identity.authorization
    return config


async def with_aio_models(identity: Identity) -> list[Any]:
    async with kubernetes.aio.client.ApiClient(aio_configuration(identity)) as api:
        core = kubernetes.aio.client.CoreV1Api(api)
        pods: list[Any] = []
        token = None
        while True:
            page = await core.list_namespaced_pod(NAMESPACE, limit=PAGE, _continue=token)
            pods.extend(page.items)
            token = page.metadata._continue if page.metadata else None
            if not token:
                return pods


async def with_aio_raw(identity: Identity) -> list[Any]:
    async with kubernetes.aio.client.ApiClient(aio_configuration(identity)) as api:
        core = kubernetes.aio.client.CoreV1Api(api)
        pods: list[Any] = []
        token = None
        while True:
            answer = await core.list_namespaced_pod_without_preload_content(
                NAMESPACE, limit=PAGE, _continue=token
            )
            page = json.loads(await answer.read())
            pods.extend(page["items"])
            token = page["metadata"].get("continue")
            if not token:
                return pods


async def with_sync_models(identity: Identity) -> list[Any]:
    def listing() -> list[Any]:
        with kubernetes.client.ApiClient(configuration(identity)) as api:
            core = kubernetes.client.CoreV1Api(api)
            pods: list[Any] = []
            token = None
            while True:
                page = core.list_namespaced_pod(NAMESPACE, limit=PAGE, _continue=token)
                pods.extend(page.items)
                token = page.metadata._continue if page.metadata else None
                if not token:
                    return pods

    return listing()


WAYS: dict[str, Way] = {
    "KubeClient, dicts -> PodFacts": with_kubeclient,
    "kubernetes.aio, V1Pod models": with_aio_models,
    "kubernetes.aio raw, dicts": with_aio_raw,
    "kubernetes sync, V1Pod models": with_sync_models,
}


def measure(way: Way, identity: Identity) -> dict[str, Any]:
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    listed = asyncio.run(way(identity))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {"wall_s": wall, "cpu_s": cpu, "objects": len(listed)}


def held_bytes(way: Way, identity: Identity) -> int:
    """What the listed objects hold once listed (tracemalloc: allocated and still referenced)."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    listed = asyncio.run(way(identity))
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    del listed
    return held


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=10000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    with running_cluster(f"gpuval-bench-{int(time.time()) % 100000}") as cluster:
        identity = load_credentials(str(cluster.kubeconfig)).identity
        cluster.kubectl("create", "namespace", NAMESPACE)
        cluster.kubectl("create", "serviceaccount", "gpuval-agent", "-n", NAMESPACE)

        async def populate() -> None:
            async with KubeClient(load_credentials_of(identity)) as client:
                await create_pods(client, args.pods)

        started = time.monotonic()
        asyncio.run(populate())
        print(f"created {args.pods} pods in {time.monotonic() - started:.1f}s", file=sys.stderr)
        results: dict[str, Any] = {"pods": args.pods, "page": PAGE, "ways": {}}
        for name, way in WAYS.items():
            runs = [measure(way, identity) for _ in range(args.repeat)]
            assert all(r["objects"] == args.pods for r in runs), runs
            results["ways"][name] = {
                "wall_s": statistics.median(r["wall_s"] for r in runs),
                "cpu_s": statistics.median(r["cpu_s"] for r in runs),
                "held_mib": held_bytes(way, identity) / 2**20,
                "runs": runs,
            }
            figures = results["ways"][name]
            print(
                f"{name:32} wall {figures['wall_s']:6.2f}s  cpu {figures['cpu_s']:6.2f}s  "
                f"held {figures['held_mib']:7.1f} MiB",
                file=sys.stderr,
            )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
