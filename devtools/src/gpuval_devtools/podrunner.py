"""The kubelet stand-in for kwok nodes: runs the real agent for every agent pod on a simulated
node.

kwok plays a kubelet's part for pods (it marks them Running and finishes deletions) but runs
nothing. For an agent pod bound to a node that carries the annotation gpuval.dev/simulate, this
runner does what a kubelet would: once kwok has marked the pod Running, it starts the pod's command
(`gpuval-agent cluster`) as a local process with the pod's environment (downward-API fieldRefs
resolved), `GPUVAL_BACKEND=simulated` and `GPUVAL_SIMULATE` from the node's annotation, and a
ServiceAccount token bound to the pod (TokenRequest with boundObjectRef, so the API server sees the
pod's node in the token, as the admission policy expects) written with the CA into a directory given
as `GPUVAL_SERVICEACCOUNT_DIR`. When the process exits it sets the pod's phase from the exit code,
as a kubelet does; kwok's stages only act on Pending pods and on deletions, so the terminal phase
stays. A pod deleted while its agent runs has its process killed.

`python -m gpuval_devtools.podrunner --kubeconfig PATH [--logs DIR]` runs it on its own.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from gpuval_operator import names
from gpuval_operator.children import Follower
from gpuval_operator.kube import ApiError, KubeClient, load_credentials, q

log = logging.getLogger("gpuval.podrunner")

AGENT_SELECTOR = f"{names.LABEL_COMPONENT}={names.AGENT_COMPONENT},{names.LABEL_VALIDATION}"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def resolve_field_ref(pod: Mapping[str, Any], path: str) -> str:
    """The value of a downward-API fieldRef such as spec.nodeName or metadata.labels['x']."""
    meta = pod.get("metadata") or {}
    simple = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": (pod.get("spec") or {}).get("nodeName"),
        "spec.serviceAccountName": (pod.get("spec") or {}).get("serviceAccountName"),
        "status.podIP": (pod.get("status") or {}).get("podIP"),
        "status.hostIP": (pod.get("status") or {}).get("hostIP"),
    }
    if path in simple:
        return str(simple[path] or "")
    for prefix, source in (("metadata.labels", "labels"), ("metadata.annotations", "annotations")):
        if path.startswith(prefix + "['") and path.endswith("']"):
            return str((meta.get(source) or {}).get(path[len(prefix) + 2 : -2], ""))
    raise ValueError(f"fieldRef {path!r} is not supported by the pod runner")


def container_env(pod: Mapping[str, Any], container: Mapping[str, Any]) -> dict[str, str]:
    """The container's env as a kubelet would set it (values and fieldRefs; other sources
    refused).
    """
    env: dict[str, str] = {}
    for var in container.get("env") or []:
        if "value" in var:
            env[var["name"]] = str(var["value"])
        elif "fieldRef" in (var.get("valueFrom") or {}):
            env[var["name"]] = resolve_field_ref(pod, var["valueFrom"]["fieldRef"]["fieldPath"])
        elif var.get("valueFrom"):
            raise ValueError(
                f"env {var['name']}: only value and fieldRef are supported by the pod runner"
            )
        else:
            env[var["name"]] = ""
    return env


def agent_argv(container: Mapping[str, Any]) -> list[str]:
    """The container's command and args, with `gpuval-agent` resolved to this environment's
    script.
    """
    argv = [*(container.get("command") or []), *(container.get("args") or [])]
    if not argv:
        raise ValueError("the agent container has no command")
    script = Path(sys.executable).parent / argv[0]
    if script.exists():
        argv[0] = str(script)
    elif shutil.which(argv[0]) is None:
        raise ValueError(f"{argv[0]!r} is not installed in {Path(sys.executable).parent}")
    return argv


def terminal_status(exit_code: int, started_at: str, container: str, image: str) -> dict[str, Any]:
    """The pod status a kubelet writes when the only container of a restartPolicy=Never pod ends."""
    finished = _now()
    phase = "Succeeded" if exit_code == 0 else "Failed"
    return {
        "phase": phase,
        "conditions": [
            {
                "type": "Ready",
                "status": "False",
                "reason": "PodCompleted",
                "lastTransitionTime": finished,
            },
            {
                "type": "ContainersReady",
                "status": "False",
                "reason": "PodCompleted",
                "lastTransitionTime": finished,
            },
        ],
        "containerStatuses": [
            {
                "name": container,
                "image": image,
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "started": False,
                "state": {
                    "terminated": {
                        "exitCode": exit_code,
                        "reason": "Completed" if exit_code == 0 else "Error",
                        "startedAt": started_at,
                        "finishedAt": finished,
                    }
                },
            }
        ],
    }


@dataclass
class Running:
    pod: str
    namespace: str
    process: asyncio.subprocess.Process | None = None
    task: asyncio.Task[None] | None = None
    killed: bool = False


@dataclass
class PodRunner:
    client: KubeClient
    ca_file: Path
    logs_dir: Path
    namespace: str = ""
    extra_env: dict[str, str] = field(default_factory=dict)
    running: dict[str, Running] = field(default_factory=dict)
    started: int = 0
    finished: dict[str, int] = field(default_factory=dict)

    @property
    def _api_host_port(self) -> tuple[str, str]:
        parts = urlsplit(self.client.credentials.server)
        return parts.hostname or "127.0.0.1", str(parts.port or 443)

    @property
    def pods_path(self) -> str:
        if self.namespace:
            return f"/api/v1/namespaces/{q(self.namespace)}/pods"
        return "/api/v1/pods"

    def _on_page(self, items: list[dict[str, Any]], first: bool, last: bool) -> None:
        for pod in items:
            self._on_event("MODIFIED", pod)

    def _on_event(self, kind: str, pod: dict[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        uid = meta.get("uid", "")
        entry = self.running.get(uid)
        if kind == "DELETED" or meta.get("deletionTimestamp"):
            if entry is not None and entry.process is not None and not entry.killed:
                entry.killed = True
                log.info("pod %s deleted: stopping its agent", meta.get("name"))
                with contextlib.suppress(ProcessLookupError):
                    entry.process.send_signal(signal.SIGTERM)
            return
        phase = (pod.get("status") or {}).get("phase")
        node = (pod.get("spec") or {}).get("nodeName")
        if entry is not None or phase != "Running" or not node or uid in self.finished:
            return
        entry = self.running[uid] = Running(meta.get("name", ""), meta.get("namespace", ""))
        entry.task = asyncio.create_task(self._run_pod(pod, entry), name=f"agent-{entry.pod}")

    async def _simulation(self, node: str) -> str | None:
        obj = await self.client.get_or_none(f"/api/v1/nodes/{q(node)}")
        if obj is None:
            return None
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        value = annotations.get(names.ANNOTATION_SIMULATE)
        return None if value is None else str(value)

    async def _token(self, pod: Mapping[str, Any]) -> str:
        meta = pod["metadata"]
        account = (pod.get("spec") or {}).get("serviceAccountName") or "default"
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "expirationSeconds": 3600,
                "boundObjectRef": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": meta["name"],
                    "uid": meta["uid"],
                },
            },
        }
        path = f"/api/v1/namespaces/{q(meta['namespace'])}/serviceaccounts/{q(account)}/token"
        answer = await self.client.create(path, body)
        return str(answer["status"]["token"])

    async def _run_pod(self, pod: dict[str, Any], entry: Running) -> None:
        meta = pod["metadata"]
        node = pod["spec"]["nodeName"]
        try:
            simulate = await self._simulation(node)
            if simulate is None:
                return  # a real (or non-simulated) node: not ours to run
            container = pod["spec"]["containers"][0]
            argv = agent_argv(container)
            env = {
                **os.environ,
                **container_env(pod, container),
                "GPUVAL_BACKEND": "simulated",
                "GPUVAL_SIMULATE": simulate,
                **self.extra_env,
            }
            token = await self._token(pod)
        except (ApiError, ValueError, KeyError) as exc:
            log.error(
                "pod %s/%s: cannot start its agent: %s",
                meta.get("namespace"),
                meta.get("name"),
                exc,
            )
            await self._finish(pod, 2, _now())
            return
        host, port = self._api_host_port
        started_at = _now()
        with tempfile.TemporaryDirectory(prefix=f"gpuval-sa-{entry.pod[:40]}-") as sa_dir:
            # Three small local files: not worth a thread hop each.
            Path(sa_dir, "token").write_text(token)  # noqa: ASYNC240
            Path(sa_dir, "ca.crt").write_bytes(self.ca_file.read_bytes())  # noqa: ASYNC240
            Path(sa_dir, "namespace").write_text(meta["namespace"])  # noqa: ASYNC240
            env.update(
                GPUVAL_SERVICEACCOUNT_DIR=sa_dir,
                KUBERNETES_SERVICE_HOST=host,
                KUBERNETES_SERVICE_PORT=port,
            )
            self.logs_dir.mkdir(parents=True, exist_ok=True)
            log_path = self.logs_dir / f"{meta['namespace']}_{entry.pod}.log"
            with log_path.open("wb") as out:
                entry.process = await asyncio.create_subprocess_exec(
                    *argv, env=env, stdout=out, stderr=asyncio.subprocess.STDOUT
                )
                self.started += 1
                log.info("pod %s on %s: agent started (log %s)", entry.pod, node, log_path)
                code = await entry.process.wait()
        log.info("pod %s on %s: agent exited %d", entry.pod, node, code)
        if not entry.killed:
            await self._finish(pod, code, started_at)

    async def _finish(self, pod: Mapping[str, Any], code: int, started_at: str) -> None:
        meta = pod["metadata"]
        self.finished[meta["uid"]] = code
        container = pod["spec"]["containers"][0]
        status = terminal_status(code, started_at, container["name"], container.get("image", ""))
        path = f"/api/v1/namespaces/{q(meta['namespace'])}/pods/{q(meta['name'])}/status"
        try:
            await self.client.merge_patch(path, {"status": status})
        except ApiError as exc:
            if exc.status != 404:
                log.warning("pod %s: could not set its phase: %s", meta["name"], exc)

    async def run(self) -> None:
        follower = Follower(
            self.client,
            self.pods_path,
            AGENT_SELECTOR,
            self._on_page,
            self._on_event,
            name="podrunner",
        )
        try:
            await follower.run()
        finally:
            await self.stop()

    async def stop(self) -> None:
        for entry in self.running.values():
            if entry.process is not None and entry.process.returncode is None:
                entry.killed = True
                with contextlib.suppress(ProcessLookupError):
                    entry.process.kill()
        tasks = [e.task for e in self.running.values() if e.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def serve(kubeconfig: Path, ca_file: Path, logs_dir: Path, namespace: str = "") -> None:
    client = KubeClient(load_credentials(str(kubeconfig)))
    try:
        await PodRunner(client, ca_file=ca_file, logs_dir=logs_dir, namespace=namespace).run()
    finally:
        await client.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gpuval_devtools.podrunner", description=__doc__
    )
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument(
        "--ca-file",
        type=Path,
        help="the API server's CA (default: pki/ca.crt beside the kubeconfig)",
    )
    parser.add_argument(
        "--logs", type=Path, default=Path(tempfile.gettempdir()) / "gpuval-podrunner"
    )
    parser.add_argument(
        "--namespace", default="", help="only pods of this namespace (default: all)"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s podrunner %(message)s")
    ca = args.ca_file or args.kubeconfig.parent / "pki" / "ca.crt"
    started = time.monotonic()
    try:
        asyncio.run(serve(args.kubeconfig, ca, args.logs, args.namespace))
    except KeyboardInterrupt:
        log.info("stopped after %.0fs", time.monotonic() - started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
