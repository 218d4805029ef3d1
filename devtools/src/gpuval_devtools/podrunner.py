"""The kubelet stand-in for kwok nodes: runs the real agent for every agent pod on a simulated
node.

kwok plays a kubelet's part for pods (it marks them Running and finishes deletions) but runs
nothing. For an agent pod bound to a node that carries the annotation gpuval.dev/simulate, this
runner does what a kubelet would: once kwok has marked the pod Running, it starts the pod's command
(`gpuval-agent cluster`, or `gpuval-agent fabric --cluster`: a simulated node's pod IPs are on
loopback, simulation.simulated_node, so a fabric rank reaches the rank 0 it reads here) as a
local process with the pod's environment (downward-API fieldRefs resolved), the simulated
backend with the config from the node's annotation, and a ServiceAccount token bound to the pod
(TokenRequest with boundObjectRef, so the API server sees the pod's node in the token, as the
admission policy expects) written with the CA into a directory given as the ServiceAccount
directory. When the process exits it sets the pod's phase from the exit code (128 + N for a death
by signal N, as a kubelet reports it) and its termination message from the agent's file, as a
kubelet does; kwok's stages only act on Pending pods and on deletions, so the terminal phase
stays. A pod deleted while its agent runs has its process stopped (SIGTERM) and then, as a
kubelet does, its end reported (the phase from the exit code): a pod that carries a finalizer
(Kueue's) stays until it has ended, and kwok alone would never end it.
It reaches the API server through the operator's public client face, gpuval_operator.kube.

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

from gpuval_api import keys
from gpuval_api.env import AgentEnv
from gpuval_api.kubernetes import (
    CONTAINER_REASON_COMPLETED,
    CONTAINER_REASON_ERROR,
    CONTAINERS_READY,
    READY,
    TERMINAL_POD_PHASES,
    PodPhase,
)
from gpuval_devtools.controlplane import free_port
from gpuval_devtools.simulation import API_OUTAGE_ANNOTATION, SIMULATE_ANNOTATION
from gpuval_operator.kube import ApiError, Follower, KubeClient, load_credentials, q

log = logging.getLogger("gpuval.podrunner")

AGENT_SELECTOR = f"{keys.LABEL_COMPONENT}={keys.AGENT_COMPONENT},{keys.LABEL_VALIDATION}"
# The exit code a kubelet reports for a container killed before it could exit on its own.
KILLED_EXIT_CODE = 137


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


def terminal_status(
    exit_code: int, started_at: str, container: str, image: str, message: str = ""
) -> dict[str, Any]:
    """The pod status a kubelet writes when the only container of a restartPolicy=Never pod ends
    (with the container's termination message, as the kubelet reads it from its file)."""
    finished = _now()
    phase = PodPhase.SUCCEEDED if exit_code == 0 else PodPhase.FAILED
    return {
        "phase": phase,
        "conditions": [
            {
                "type": READY,
                "status": "False",
                "reason": "PodCompleted",
                "lastTransitionTime": finished,
            },
            {
                "type": CONTAINERS_READY,
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
                        "reason": (
                            CONTAINER_REASON_COMPLETED if exit_code == 0 else CONTAINER_REASON_ERROR
                        ),
                        "startedAt": started_at,
                        "finishedAt": finished,
                        **({"message": message} if message else {}),
                    }
                },
            }
        ],
    }


def exit_code(returncode: int) -> int:
    """A process's return code as a kubelet reports a container's: a death by signal N is
    128 + N (SIGKILL: 137), where Python says -N."""
    return 128 - returncode if returncode < 0 else returncode


@dataclass
class Running:
    pod: str
    namespace: str
    process: asyncio.subprocess.Process | None = None
    task: asyncio.Task[None] | None = None
    # The pod was deleted: its agent is stopped and its end reported, as a kubelet does.
    deleted: bool = False
    # The runner itself stops: the agent is killed and nothing is reported.
    stopping: bool = False


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
        parts = urlsplit(self.client.server)
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
            if entry is None and kind != "DELETED":
                self._end_unstarted(pod)
            if entry is not None and not entry.deleted:
                entry.deleted = True
                log.info("pod %s deleted: stopping its agent", meta.get("name"))
                if entry.process is not None:
                    with contextlib.suppress(ProcessLookupError):
                        entry.process.send_signal(signal.SIGTERM)
            return
        phase = (pod.get("status") or {}).get("phase")
        node = (pod.get("spec") or {}).get("nodeName")
        if entry is not None or phase != PodPhase.RUNNING or not node or uid in self.finished:
            return
        entry = self.running[uid] = Running(meta.get("name", ""), meta.get("namespace", ""))
        entry.task = asyncio.create_task(self._run_pod(pod, entry), name=f"agent-{entry.pod}")

    def _end_unstarted(self, pod: dict[str, Any]) -> None:
        """A pod deleted on a node before its agent ran (bound, not yet Running): a kubelet
        reports it ended; kwok does not, and a finalizer would keep it for ever."""
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        uid, phase = meta.get("uid", ""), (pod.get("status") or {}).get("phase")
        if not spec.get("nodeName") or phase in TERMINAL_POD_PHASES or uid in self.finished:
            return
        entry = self.running[uid] = Running(meta.get("name", ""), meta.get("namespace", ""))
        entry.deleted = True

        async def end() -> None:
            simulate, _ = await self._simulation(spec["nodeName"])
            if simulate is not None:
                await self._finish(pod, KILLED_EXIT_CODE, _now())

        entry.task = asyncio.create_task(end(), name=f"agent-{entry.pod}-deleted")

    async def _simulation(self, node: str) -> tuple[str | None, float | None]:
        """The node's simulation config, and how long its API outage lasts (None: none)."""
        obj = await self.client.get_or_none(f"/api/v1/nodes/{q(node)}")
        if obj is None:
            return None, None
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        value = annotations.get(SIMULATE_ANNOTATION)
        outage = annotations.get(API_OUTAGE_ANNOTATION)
        return (None if value is None else str(value)), (None if outage is None else float(outage))

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
            simulate, outage = await self._simulation(node)
            if simulate is None:
                return  # a real (or non-simulated) node: not ours to run
            container = pod["spec"]["containers"][0]
            argv = agent_argv(container)
            pod_env = container_env(pod, container)
            env = {
                **os.environ,
                **pod_env,
                AgentEnv.BACKEND: "simulated",
                AgentEnv.SIMULATE: simulate,
                **self.extra_env,
            }
            token = await self._token(pod)
            if entry.deleted:
                # Deleted before its container started: a kubelet reports it ended all the same.
                await self._finish(pod, KILLED_EXIT_CODE, _now())
                return
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
        if outage is not None:
            # Nothing listens on a port just freed: every write fails until the deadline.
            port = str(free_port())
            env[AgentEnv.DEADLINE] = str(int(time.time() + outage))
        started_at = _now()
        with (
            tempfile.TemporaryDirectory(prefix=f"gpuval-sa-{entry.pod[:40]}-") as sa_dir,
            # The container's own /tmp, gone with it as a kubelet's is: what the agent leaves
            # there (the simulated host tree of an agent killed mid-run) goes when it ends.
            tempfile.TemporaryDirectory(
                prefix=f"gpuval-tmp-{entry.pod[:40]}-", ignore_cleanup_errors=True
            ) as tmp_dir,
        ):
            # Three small local files: not worth a thread hop each.
            Path(sa_dir, "token").write_text(token)  # noqa: ASYNC240
            Path(sa_dir, "ca.crt").write_bytes(self.ca_file.read_bytes())  # noqa: ASYNC240
            Path(sa_dir, "namespace").write_text(meta["namespace"])  # noqa: ASYNC240
            # The kubelet mounts the termination-message file; here it is a file of our own.
            termination = Path(sa_dir, "termination-log")
            env.update(
                {
                    AgentEnv.SERVICEACCOUNT_DIR: sa_dir,
                    AgentEnv.TERMINATION_LOG: str(termination),
                    "TMPDIR": tmp_dir,
                    "KUBERNETES_SERVICE_HOST": host,
                    "KUBERNETES_SERVICE_PORT": port,
                }
            )
            self.logs_dir.mkdir(parents=True, exist_ok=True)
            log_path = self.logs_dir / f"{meta['namespace']}_{entry.pod}.log"
            with log_path.open("wb") as out:
                entry.process = await asyncio.create_subprocess_exec(
                    *argv, env=env, stdout=out, stderr=asyncio.subprocess.STDOUT
                )
                self.started += 1
                log.info("pod %s on %s: agent started (log %s)", entry.pod, node, log_path)
                code = exit_code(await entry.process.wait())
            message = termination.read_text() if termination.is_file() else ""  # noqa: ASYNC240
        log.info("pod %s on %s: agent exited %d", entry.pod, node, code)
        if not entry.stopping:
            # A deleted pod's end too: its phase is what a kubelet reports after stopping the
            # container, and Kueue keeps its finalizer (and its quota) until the pod has ended.
            await self._finish(pod, code, started_at, message)

    async def _finish(
        self, pod: Mapping[str, Any], code: int, started_at: str, message: str = ""
    ) -> None:
        meta = pod["metadata"]
        self.finished[meta["uid"]] = code
        container = pod["spec"]["containers"][0]
        status = terminal_status(
            code, started_at, container["name"], container.get("image", ""), message
        )
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
            entry.stopping = True
            if entry.process is not None and entry.process.returncode is None:
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
