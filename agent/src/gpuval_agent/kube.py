"""The agent's calls to the API server: standard library only.

It writes its node's GpuNodeReport status (a JSON merge patch on
/apis/gpuval.dev/v1alpha1/gpunodereports/<name>/status) and, in a fabric group queued through
Kueue, reads rank 0's pod in its own namespace (PodReader). Each request is authenticated with
the pod's ServiceAccount token (re-read every time: bound tokens rotate), verified with the
ServiceAccount CA, and sent the in-cluster way (KUBERNETES_SERVICE_HOST/PORT).
"""

from __future__ import annotations

import json
import os
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuval_agent.errors import AgentError
from gpuval_api import AgentEnv
from gpuval_api.crd import API_VERSION, REPORT_PLURAL
from gpuval_api.report import SETTLED_REFUSAL_WORDS

SERVICEACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
GROUP_VERSION = API_VERSION
_RETRIABLE = {429, 500, 502, 503, 504}


@dataclass(frozen=True)
class ApiServer:
    base_url: str
    token_path: Path
    ca_path: Path
    # The pod's own namespace (the ServiceAccount directory's `namespace` file), when known.
    namespace_path: Path | None = None

    def namespace(self) -> str:
        if self.namespace_path is None or not self.namespace_path.is_file():
            raise AgentError(
                f"the pod's namespace is unknown: {self.namespace_path} does not exist (the "
                "kubelet mounts it beside the ServiceAccount token)"
            )
        return self.namespace_path.read_text().strip()

    def send(
        self,
        context: ssl.SSLContext,
        method: str,
        path: str,
        body: bytes | None = None,
        content_type: str | None = None,
    ) -> dict[str, Any]:
        """One request; HttpAnswerError for an HTTP error answer, TransientApiError when no answer
        came (or 429/5xx)."""
        token = self.token_path.read_text().strip()
        headers = {
            "Authorization": f"Bearer {token}",
            "Accept": "application/json",
            "User-Agent": "gpuval-agent",
        }
        if content_type is not None:
            headers["Content-Type"] = content_type
        request = urllib.request.Request(
            self.base_url + path, data=body, method=method, headers=headers
        )
        try:
            with urllib.request.urlopen(request, context=context, timeout=30) as answer:
                document: dict[str, Any] = json.loads(answer.read())
                return document
        except urllib.error.HTTPError as error:
            detail = _status_message(error)
            if error.code in _RETRIABLE:
                raise TransientApiError(f"HTTP {error.code}: {detail}") from None
            raise HttpAnswerError(error.code, detail) from None
        except (urllib.error.URLError, TimeoutError, ConnectionError) as error:
            raise TransientApiError(f"{type(error).__name__}: {error}") from None

    @classmethod
    def in_cluster(cls) -> ApiServer:
        host = os.environ.get("KUBERNETES_SERVICE_HOST")
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        if not host:
            raise AgentError(
                "KUBERNETES_SERVICE_HOST is not set: `gpuval-agent cluster` runs inside a pod; "
                "on a plain machine use `gpuval-agent run`"
            )
        directory = Path(os.environ.get(AgentEnv.SERVICEACCOUNT_DIR, SERVICEACCOUNT_DIR))
        token, ca = directory / "token", directory / "ca.crt"
        for path in (token, ca):
            if not path.is_file():
                raise AgentError(
                    f"{path} does not exist: the pod needs its ServiceAccount token mounted "
                    f"(automountServiceAccountToken) or {AgentEnv.SERVICEACCOUNT_DIR} pointing at "
                    "one"
                )
        bracketed = f"[{host}]" if ":" in host else host
        return cls(f"https://{bracketed}:{port}", token, ca, directory / "namespace")


class ReportWriter:
    """Patches one GpuNodeReport's status; retries the API server's transient answers.

    A write keeps trying until `deadline` (Unix seconds; the operator's own timeout for the node,
    passed as GPUVAL_DEADLINE) or, without one, for `budget` seconds: a result measured over an
    hour must not be lost to a minute of API server outage (issue 9). Answers that retrying cannot
    change (404, 401/403, a refused body) end the write at once.
    """

    def __init__(
        self,
        server: ApiServer,
        report_name: str,
        *,
        deadline: float | None = None,
        budget: float = 60.0,
        backoff: float = 0.5,
        max_backoff: float = 10.0,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.server = server
        self.report_name = report_name
        self.deadline = deadline
        self.budget = budget
        self.backoff = backoff
        self.max_backoff = max_backoff
        self._clock = clock
        self._sleep = sleep
        self._context = ssl.create_default_context(cafile=str(server.ca_path))

    @property
    def path(self) -> str:
        return f"/apis/{GROUP_VERSION}/{REPORT_PLURAL}/{self.report_name}/status"

    def patch_status(
        self, status: dict[str, Any], *, budget: float | None = None
    ) -> dict[str, Any]:
        """Merge-patch `status`; retried until the deadline (or `budget` seconds, if shorter)."""
        body = json.dumps({"status": status}).encode()
        started = self._clock()
        give_up = self.deadline if self.deadline is not None else started + self.budget
        if budget is not None:
            give_up = min(give_up, started + budget)
        delay, attempts, last = self.backoff, 0, ""
        while True:
            attempts += 1
            try:
                return self._patch_once(body)
            except TransientApiError as error:
                last = str(error)
            now = self._clock()
            if now + delay > give_up:
                break
            self._sleep(delay)
            delay = min(delay * 2, self.max_backoff)
        raise ReportUnreachableError(
            f"writing GpuNodeReport {self.report_name!r} status to {self.server.base_url} failed "
            f"{attempts} times over {self._clock() - started:.0f}s; last: {last}"
        )

    def _patch_once(self, body: bytes) -> dict[str, Any]:
        try:
            return self.server.send(
                self._context, "PATCH", self.path, body, "application/merge-patch+json"
            )
        except HttpAnswerError as error:
            if error.code == 404:
                raise AgentError(
                    f"GpuNodeReport {self.report_name!r} ({AgentEnv.REPORT_NAME}) does not exist "
                    f"on {self.server.base_url}: the operator creates it before the pod; "
                    f"{error.detail}"
                ) from None
            if error.code == 403 and SETTLED_REFUSAL_WORDS in error.detail:
                raise AgentError(
                    f"GpuNodeReport {self.report_name!r} was settled by the operator before this "
                    f"agent wrote it (its agent came too late, e.g. past the pod's timeout): "
                    f"nothing is wrong with permissions, the operator's verdict stands "
                    f"(HTTP {error.code}: {error.detail})"
                ) from None
            if error.code in (401, 403):
                raise AgentError(
                    f"the API server refused to let this pod write GpuNodeReport "
                    f"{self.report_name!r} status (HTTP {error.code}: {error.detail}); check the "
                    "agent's ServiceAccount role and that the report is this node's"
                ) from None
            raise AgentError(
                f"writing GpuNodeReport {self.report_name!r} status failed: HTTP {error.code}: "
                f"{error.detail}"
            ) from None


class PodReader:
    """Reads one pod of the agent's own namespace by name: a fabric rank learns rank 0's address
    (its ServiceAccount may get pods there: gpuval_operator.rbac.AGENT_POD_RULES, which the
    chart renders)."""

    def __init__(self, server: ApiServer) -> None:
        self.server = server
        self.namespace = server.namespace()
        self._context = ssl.create_default_context(cafile=str(server.ca_path))

    def pod(self, name: str) -> dict[str, Any] | None:
        """The pod, None when it does not exist; TransientApiError when the API server did not
        answer; AgentError when it refused (the message names the missing right)."""
        path = f"/api/v1/namespaces/{self.namespace}/pods/{name}"
        try:
            return self.server.send(self._context, "GET", path)
        except HttpAnswerError as error:
            if error.code == 404:
                return None
            if error.code in (401, 403):
                raise AgentError(
                    f"the API server refused to let this pod read pod {self.namespace}/{name} "
                    f"(HTTP {error.code}: {error.detail}): a fabric rank reads rank 0's pod for "
                    "its address, so the agents' ServiceAccount needs get on pods in its namespace "
                    "(the chart's Role <release>-gpuval-agent-pods)"
                ) from None
            raise AgentError(f"reading pod {self.namespace}/{name} failed: {error}") from None


class HttpAnswerError(Exception):
    """The API server answered with an error that retrying cannot change."""

    def __init__(self, code: int, detail: str) -> None:
        super().__init__(f"HTTP {code}: {detail}")
        self.code, self.detail = code, detail


class TransientApiError(Exception):
    """A failed request worth trying again (no answer, or 429/5xx)."""


class ReportUnreachableError(AgentError):
    """Every write until the deadline failed transiently: the API server could not be reached."""


def _status_message(error: urllib.error.HTTPError) -> str:
    try:
        document = json.loads(error.read())
        return str(document.get("message", document))
    except (ValueError, OSError):
        return error.reason if isinstance(error.reason, str) else str(error.reason)
