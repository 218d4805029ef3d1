"""Writes the node's GpuNodeReport status through the API server: standard library only.

A JSON merge patch on /apis/gpuval.dev/v1alpha1/gpunodereports/<name>/status, authenticated with
the pod's ServiceAccount token (re-read for every request: bound tokens rotate) and verified with
the ServiceAccount CA, reached the in-cluster way (KUBERNETES_SERVICE_HOST/PORT).
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
from gpuval_api.crd import API_VERSION, REPORT_PLURAL
from gpuval_api.env import AgentEnv

SERVICEACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
GROUP_VERSION = API_VERSION
_RETRIABLE = {429, 500, 502, 503, 504}


@dataclass(frozen=True)
class ApiServer:
    base_url: str
    token_path: Path
    ca_path: Path

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
        return cls(f"https://{bracketed}:{port}", token, ca)


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
            except _RetriableError as error:
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
        token = self.server.token_path.read_text().strip()
        request = urllib.request.Request(
            self.server.base_url + self.path,
            data=body,
            method="PATCH",
            headers={
                "Authorization": f"Bearer {token}",
                "Content-Type": "application/merge-patch+json",
                "Accept": "application/json",
                "User-Agent": "gpuval-agent",
            },
        )
        try:
            with urllib.request.urlopen(request, context=self._context, timeout=30) as answer:
                document: dict[str, Any] = json.loads(answer.read())
                return document
        except urllib.error.HTTPError as error:
            detail = _status_message(error)
            if error.code in _RETRIABLE:
                raise _RetriableError(f"HTTP {error.code}: {detail}") from None
            if error.code == 404:
                raise AgentError(
                    f"GpuNodeReport {self.report_name!r} ({AgentEnv.REPORT_NAME}) does not exist "
                    f"on {self.server.base_url}: the operator creates it before the pod; {detail}"
                ) from None
            if error.code in (401, 403):
                raise AgentError(
                    f"the API server refused to let this pod write GpuNodeReport "
                    f"{self.report_name!r} status (HTTP {error.code}: {detail}); check the "
                    "agent's ServiceAccount role and that the report is this node's"
                ) from None
            raise AgentError(
                f"writing GpuNodeReport {self.report_name!r} status failed: HTTP {error.code}: "
                f"{detail}"
            ) from None
        except (urllib.error.URLError, TimeoutError, ConnectionError) as error:
            raise _RetriableError(f"{type(error).__name__}: {error}") from None


class _RetriableError(Exception):
    """A failed write worth trying again (no answer, or 429/5xx)."""


class ReportUnreachableError(AgentError):
    """Every write until the deadline failed transiently: the API server could not be reached."""


def _status_message(error: urllib.error.HTTPError) -> str:
    try:
        document = json.loads(error.read())
        return str(document.get("message", document))
    except (ValueError, OSError):
        return error.reason if isinstance(error.reason, str) else str(error.reason)
