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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuval_agent.errors import AgentError

SERVICEACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
GROUP_VERSION = "gpuval.dev/v1alpha1"
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
        directory = Path(os.environ.get("GPUVAL_SERVICEACCOUNT_DIR", SERVICEACCOUNT_DIR))
        token, ca = directory / "token", directory / "ca.crt"
        for path in (token, ca):
            if not path.is_file():
                raise AgentError(
                    f"{path} does not exist: the pod needs its ServiceAccount token mounted "
                    "(automountServiceAccountToken) or GPUVAL_SERVICEACCOUNT_DIR pointing at one"
                )
        bracketed = f"[{host}]" if ":" in host else host
        return cls(f"https://{bracketed}:{port}", token, ca)


class ReportWriter:
    """Patches one GpuNodeReport's status; retries the API server's transient answers."""

    def __init__(
        self, server: ApiServer, report_name: str, attempts: int = 5, backoff: float = 0.5
    ) -> None:
        self.server = server
        self.report_name = report_name
        self.attempts = attempts
        self.backoff = backoff
        self._context = ssl.create_default_context(cafile=str(server.ca_path))

    @property
    def path(self) -> str:
        return f"/apis/{GROUP_VERSION}/gpunodereports/{self.report_name}/status"

    def patch_status(self, status: dict[str, Any]) -> dict[str, Any]:
        body = json.dumps({"status": status}).encode()
        delay = self.backoff
        last = ""
        for attempt in range(1, self.attempts + 1):
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
                last = f"HTTP {error.code}: {detail}"
                if error.code == 404:
                    raise AgentError(
                        f"GpuNodeReport {self.report_name!r} (GPUVAL_REPORT_NAME) does not exist "
                        f"on {self.server.base_url}: the operator creates it before the pod; "
                        f"{detail}"
                    ) from None
                if error.code in (401, 403):
                    raise AgentError(
                        f"the API server refused to let this pod write GpuNodeReport "
                        f"{self.report_name!r} status (HTTP {error.code}: {detail}); check the "
                        "agent's ServiceAccount role and that the report is this node's"
                    ) from None
                if error.code not in _RETRIABLE:
                    raise AgentError(
                        f"writing GpuNodeReport {self.report_name!r} status failed: {last}"
                    ) from None
            except (urllib.error.URLError, TimeoutError, ConnectionError) as error:
                last = f"{type(error).__name__}: {error}"
            if attempt < self.attempts:
                time.sleep(delay)
                delay *= 2
        raise AgentError(
            f"writing GpuNodeReport {self.report_name!r} status to {self.server.base_url} failed "
            f"{self.attempts} times; last: {last}"
        )


def _status_message(error: urllib.error.HTTPError) -> str:
    try:
        document = json.loads(error.read())
        return str(document.get("message", document))
    except (ValueError, OSError):
        return error.reason if isinstance(error.reason, str) else str(error.reason)
