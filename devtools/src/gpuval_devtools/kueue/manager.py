"""Kueue's manager beside a local control plane: what it needs installed from its own manifests,
the manager run as the ServiceAccount those manifests give it (so their RBAC is what it has), its
webhooks on loopback (gpuval_devtools.kueue.manifests says why), and queues for tests.

Start it with :meth:`Kueue.start` (or ``Cluster.start_kueue``), end it with :meth:`Kueue.stop`:
Kueue's pod webhook fails closed, so no pod could be created in the cluster once the manager is
gone; stopping removes its webhook configurations first. Kueue puts finalizers on the pods,
Workloads and queues it manages: delete those (:meth:`Kueue.release`) while it still runs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from gpuval_api.kubernetes import TERMINAL_POD_PHASES, PodPhase
from gpuval_api.kueue import ADMISSION_GATE, QUEUE_NAME_LABEL, RETRIABLE_IN_GROUP_ANNOTATION
from gpuval_devtools.buildsteps import (
    BuildError,
    Log,
    cache_dir,
    free_port,
    stderr_log,
    stop_process,
)
from gpuval_devtools.kueue import certs, manifests
from gpuval_devtools.kueue.build import KueueBuild, build

if TYPE_CHECKING:
    from gpuval_devtools.clusteraccess import ClusterAccess

FLAVOR = "gpuval-gpu"
TOKEN_DURATION = "24h"


def run_dir(cluster_name: str) -> Path:
    """Where one cluster's Kueue keeps its configuration, certificate and log (kept after it
    stops, for reading the log)."""
    return cache_dir() / "kueue" / "clusters" / cluster_name


@dataclass(frozen=True)
class KueueQueue:
    """A LocalQueue ``name`` in ``namespace`` and its own ClusterQueue with a GPU quota."""

    cluster: ClusterAccess
    name: str
    namespace: str
    cluster_queue: str
    cpu: str
    memory: str

    def set_gpus(self, gpus: int) -> None:
        """Sets the ClusterQueue's GPU quota (Kueue admits what now fits at once)."""
        self.cluster.apply(
            [
                manifests.cluster_queue(
                    self.cluster_queue,
                    flavor=FLAVOR,
                    namespace=self.namespace,
                    gpus=gpus,
                    cpu=self.cpu,
                    memory=self.memory,
                )
            ]
        )


class Kueue:
    """A running Kueue manager. Start it with :meth:`start`, end it with :meth:`stop`."""

    def __init__(
        self, cluster: ClusterAccess, built: KueueBuild, workdir: Path, rendered: manifests.Rendered
    ) -> None:
        self.cluster = cluster
        self.built = built
        self.workdir = workdir
        self.log_file = workdir / "kueue.log"
        self.rendered = rendered
        self.webhook_url = ""
        self.process: subprocess.Popen[bytes] | None = None

    @classmethod
    def start(cls, cluster: ClusterAccess, *, log: Log = stderr_log, timeout: float = 120) -> Kueue:
        """Installs Kueue's CRDs and RBAC, starts its manager, waits until its webhooks answer
        the API server; on any failure stops what it started before raising."""
        started = time.monotonic()
        built = build(log=log)
        # libyaml's loader: pyyaml's own takes 6 s for these 1.7 MB (measured), libyaml's 0.9 s.
        docs = yaml.load_all(built.manifests.read_text(), Loader=yaml.CSafeLoader)
        rendered = manifests.split(docs)
        workdir = run_dir(cluster.name)
        shutil.rmtree(workdir, ignore_errors=True)
        workdir.mkdir(parents=True)
        kueue = cls(cluster, built, workdir, rendered)
        try:
            kueue._boot(timeout=timeout)
        except BaseException:
            kueue.stop()
            raise
        log(
            f"kueue {built.version} ready in {time.monotonic() - started:.1f}s, webhooks at "
            f"{kueue.webhook_url} (log: {kueue.log_file})"
        )
        return kueue

    def _boot(self, *, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        webhook_port, health_port = free_port(), free_port()
        self.webhook_url = f"https://127.0.0.1:{webhook_port}"
        service_dns = f"{manifests.WEBHOOK_SERVICE}.{manifests.NAMESPACE}.svc"
        cert_dir = self.workdir / "certs"
        files = certs.issue(cert_dir, service_dns)
        ca = files["ca.crt"]
        objects = [
            manifests.on_loopback(o, self.webhook_url, ca) for o in self.rendered.cluster_objects
        ]
        self._apply([*objects, manifests.cert_secret(files)])
        crds = [
            f"crd/{o['metadata']['name']}"
            for o in objects
            if o["kind"] == "CustomResourceDefinition"
        ]
        self.cluster.kubectl("wait", "--for=condition=Established", *crds, "--timeout=60s")
        config = manifests.manager_config(
            self.rendered.manager_config,
            webhook_port=webhook_port,
            health_port=health_port,
            cert_dir=str(cert_dir),
        )
        config_file = self.workdir / "config.yaml"
        config_file.write_text(yaml.safe_dump(config))
        self._spawn(config_file)
        self._wait_ready(health_port, deadline)
        self._apply(
            [
                manifests.on_loopback(o, self.webhook_url, ca)
                for o in self.rendered.webhook_configurations
            ]
        )
        self._apply([manifests.resource_flavor(FLAVOR)])
        self._wait_webhooks_answer(deadline)

    def _apply(self, objects: list[dict[str, Any]]) -> None:
        """Server-side apply as one JSON List: writing Kueue's CRDs as YAML takes 3 s (measured),
        as JSON 0.03 s."""
        items = {"apiVersion": "v1", "kind": "List", "items": objects}
        self.cluster.kubectl(
            "apply", "--server-side", "--force-conflicts", "-f", "-", input=json.dumps(items)
        )

    def _dry_run(self, obj: Mapping[str, Any]) -> subprocess.CompletedProcess[str]:
        """A server-side dry run of creating ``obj``: admission webhooks run, nothing is kept."""
        return self.cluster.kubectl(
            "create",
            "--dry-run=server",
            "-o",
            "json",
            "-f",
            "-",
            input=json.dumps(obj),
            check=False,
        )

    def _spawn(self, config_file: Path) -> None:
        token = self.cluster.kubectl(
            "create",
            "token",
            manifests.SERVICE_ACCOUNT,
            "-n",
            manifests.NAMESPACE,
            f"--duration={TOKEN_DURATION}",
        ).stdout.strip()
        kubeconfig = self.cluster.token_kubeconfig(token, self.workdir / "kubeconfig.yaml")
        env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
        argv = [str(self.built.manager), f"--config={config_file}", "--zap-log-level=2"]
        with self.log_file.open("ab") as out:
            self.process = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)

    def _failure(self, what: str) -> BuildError:
        tail = self.log_file.read_text(errors="replace").splitlines()[-20:]
        return BuildError(f"kueue: {what}; log: {self.log_file}\n" + "\n".join(tail))

    def _check_alive(self) -> None:
        if self.process is None or self.process.poll() is not None:
            code = None if self.process is None else self.process.returncode
            raise self._failure(f"the manager exited with {code}")

    def _wait_ready(self, health_port: int, deadline: float) -> None:
        url = f"http://127.0.0.1:{health_port}/readyz"
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                with urllib.request.urlopen(url, timeout=2) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.3)
        raise self._failure(f"not ready at {url}")

    def _wait_webhooks_answer(self, deadline: float) -> None:
        """Until the API server reaches the webhooks: a server-side dry run of a ClusterQueue
        passes Kueue's (fail-closed) ClusterQueue webhooks only when it gets an answer."""
        probe = manifests.cluster_queue(
            "gpuval-webhook-probe", flavor=FLAVOR, namespace="default", gpus=0, cpu="0", memory="0"
        )
        last = ""
        while time.monotonic() < deadline:
            self._check_alive()
            proc = self._dry_run(probe)
            if proc.returncode == 0:
                return
            last = proc.stderr.strip()
            time.sleep(0.5)
        raise self._failure(f"the API server does not reach the webhooks: {last}")

    def opt_in(self, namespace: str, timeout: float = 60) -> None:
        """Labels ``namespace`` so Kueue manages the pods created in it, and waits until Kueue's
        webhook sees the label: a server-side dry run of a queued pod there comes back gated."""
        self.cluster.kubectl(
            "label", "namespace", namespace, f"{manifests.MANAGED_NAMESPACE_LABEL}=true"
        )
        probe = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "gpuval-kueue-probe",
                "namespace": namespace,
                "labels": {QUEUE_NAME_LABEL: "gpuval-kueue-probe"},
            },
            "spec": {"containers": [{"name": "probe", "image": "probe"}]},
        }
        deadline, last = time.monotonic() + timeout, ""
        while time.monotonic() < deadline:
            self._check_alive()
            proc = self._dry_run(probe)
            if proc.returncode == 0:
                gates = json.loads(proc.stdout)["spec"].get("schedulingGates", [])
                if any(g["name"] == ADMISSION_GATE for g in gates):
                    return
                last = "the pod came back without Kueue's scheduling gate"
            else:
                last = proc.stderr.strip()
            time.sleep(0.3)
        raise self._failure(f"Kueue does not manage the namespace {namespace} yet: {last}")

    def queue(
        self, name: str, namespace: str, *, gpus: int, cpu: str = "1k", memory: str = "64Ti"
    ) -> KueueQueue:
        """A LocalQueue ``name`` in ``namespace`` whose own ClusterQueue (``<namespace>-<name>``)
        holds ``gpus`` GPUs; CPU and memory quotas large enough that only GPUs bind."""
        queue = KueueQueue(self.cluster, name, namespace, f"{namespace}-{name}", cpu, memory)
        queue.set_gpus(gpus)
        self.cluster.apply(
            [manifests.local_queue(name, namespace=namespace, cluster_queue=queue.cluster_queue)]
        )
        return queue

    def release(self, namespace: str, timeout: float = 120) -> None:
        """Deletes every pod and queue of ``namespace`` (and the queues' ClusterQueues) and waits
        until they are gone: Kueue lifts its finalizers only while it runs. The namespace stays.

        Kueue keeps its finalizer on a pod until the pod has ended (and on a failed member of a
        retriable group until a replacement comes), and kwok nodes have no kubelet to end a
        deleted pod: so every group is first made unretriable and each pod still running on a
        node reported ``Failed``, as a kubelet reports a pod it killed."""
        self.cluster.kubectl(
            "annotate", "pods", "--all", "-n", namespace, f"{RETRIABLE_IN_GROUP_ANNOTATION}=false"
        )
        found = json.loads(
            self.cluster.kubectl("get", "pods", "-n", namespace, "-o", "json").stdout
        )
        for pod in found["items"]:
            if (
                pod["spec"].get("nodeName")
                and pod["status"].get("phase") not in TERMINAL_POD_PHASES
            ):
                self.cluster.kubectl(
                    "patch",
                    "pod",
                    pod["metadata"]["name"],
                    "-n",
                    namespace,
                    "--subresource=status",
                    "--type=merge",
                    "-p",
                    json.dumps({"status": {"phase": PodPhase.FAILED}}),
                )
        wait = f"--timeout={timeout:.0f}s"
        self.cluster.kubectl("delete", "pods", "--all", "-n", namespace, wait, timeout=timeout + 10)
        queues = self._names("localqueues", namespace, "{.spec.clusterQueue}")
        self.cluster.kubectl("delete", "localqueues", "--all", "-n", namespace, wait)
        if queues:
            self.cluster.kubectl("delete", "clusterqueues", *queues, "--ignore-not-found", wait)

    def _names(self, resource: str, namespace: str, path: str) -> list[str]:
        out = self.cluster.kubectl(
            "get", resource, "-n", namespace, "-o", f"jsonpath={{range .items[*]}}{path} {{end}}"
        ).stdout
        return sorted(set(out.split()))

    def workloads(self, namespace: str) -> list[Mapping[str, Any]]:
        """The Workloads Kueue made for the pods of ``namespace``."""
        out = self.cluster.kubectl("get", "workloads", "-n", namespace, "-o", "json").stdout
        items: list[Mapping[str, Any]] = json.loads(out)["items"]
        return items

    def stop(self) -> None:
        """Removes Kueue's webhook configurations (so pods need it no longer), then stops it."""
        for obj in self.rendered.webhook_configurations:
            self.cluster.kubectl(
                "delete", obj["kind"], obj["metadata"]["name"], "--ignore-not-found", check=False
            )
        proc, self.process = self.process, None
        if proc is not None:
            stop_process(proc)
