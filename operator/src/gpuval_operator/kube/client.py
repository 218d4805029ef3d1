"""A small asyncio Kubernetes client on raw JSON, for the operator's hot paths.

Who it is comes from `gpuval_operator.kube.credentials` (one identity with kopf's, loaded by the
`kubernetes` package): each request carries the identity's current headers, the identity is
loaded again when it is due, and a 401 loads it again and repeats the request once. Requests go
through aiohttp and come back as plain dicts: the kubernetes package's asyncio client turns
10,000 pods into models several times slower (docs/operator/architecture.md, "Credentials"). Lists
are paginated; watches ask for bookmarks and resume from the last resourceVersion; 429 and 5xx are
retried with backoff (honouring Retry-After), so bursts of creates slow down instead of failing.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import AsyncIterator, Mapping
from typing import Any
from urllib.parse import quote

import aiohttp

from gpuval_credentials import Identity
from gpuval_credentials.aio import session as aio_session
from gpuval_operator.kube.credentials import Login

log = logging.getLogger(__name__)

RETRYABLE = frozenset({429, 500, 502, 503, 504})
JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"


class ApiError(Exception):
    """A Kubernetes API request that failed; `status` is the HTTP status."""

    def __init__(self, status: int, method: str, path: str, body: Any) -> None:
        self.status = status
        self.body = body
        message = body.get("message") if isinstance(body, dict) else str(body)
        self.reason = body.get("reason", "") if isinstance(body, dict) else ""
        super().__init__(f"{method} {path}: HTTP {status}: {message}")


class ResourceExpiredError(Exception):
    """The watch's resourceVersion is too old (410): list again."""


class KubeClient:
    """Raw-JSON requests with retries, paginated lists and resumable watches."""

    def __init__(
        self,
        login: Login,
        *,
        request_timeout: float = 30.0,
        watch_timeout: int = 240,
        max_retries: int = 8,
    ) -> None:
        self.login = login
        self.request_timeout = request_timeout
        self.watch_timeout = watch_timeout
        self.max_retries = max_retries
        self._session: aiohttp.ClientSession | None = None
        self._transport: tuple[object, ...] = ()
        self._retired: list[aiohttp.ClientSession] = []  # sessions of an earlier transport
        self.requests_total: dict[tuple[str, int], int] = {}

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def server(self) -> str:
        return self.login.identity.server.rstrip("/")

    async def _session_for(
        self, identity: Identity
    ) -> tuple[aiohttp.ClientSession, list[tuple[str, str]]]:
        """A session for the identity's transport (a new one should its server, trust, client
        certificate or proxy change) and the headers it adds to a request."""
        if self._session is None or self._session.closed or identity.transport() != self._transport:
            if self._session is not None:
                # Requests and watches under way finish on it; closed with the client.
                self._retired.append(self._session)
            self._session = aio_session(identity, headers=False, limit=128)
            self._transport = identity.transport()
        return self._session, [*identity.headers(), ("Accept", JSON)]

    async def close(self) -> None:
        for session in [*self._retired, self._session]:
            if session is not None:
                await session.close()

    def _count(self, method: str, status: int) -> None:
        key = (method, status)
        self.requests_total[key] = self.requests_total.get(key, 0) + 1

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str | int] | None = None,
        body: Any = None,
        content_type: str = JSON,
    ) -> Any:
        """One request; retried on 429/5xx and connection errors, repeated once with the identity
        loaded again after a 401; ApiError on any other failure."""
        data = None if body is None else json.dumps(body, separators=(",", ":"))
        delay, attempt = 0.2, 0
        refused: Identity | None = None
        while True:
            identity = await self.login.current()
            try:
                status, payload, retry_after = await self._send(
                    identity, method, path=path, params=params, data=data, content_type=content_type
                )
            except (aiohttp.ClientConnectionError, TimeoutError) as exc:
                self._count(method, 0)
                if attempt == self.max_retries:
                    raise
                log.debug("%s %s: %s; retrying", method, path, exc)
                wait = delay
            else:
                if status < 400:
                    return payload
                if status == 401 and refused is None:
                    refused = identity
                    log.info("%s %s: HTTP 401; loading the credentials again", method, path)
                    await self.login.renew(identity)
                    continue
                if status not in RETRYABLE or attempt == self.max_retries:
                    raise ApiError(status, method, path, payload)
                wait = float(retry_after) if retry_after.isdigit() else delay
            attempt += 1
            await asyncio.sleep(wait * (0.5 + random.random()))
            delay = min(delay * 2, 10.0)

    async def _send(
        self,
        identity: Identity,
        method: str,
        *,
        path: str,
        params: Mapping[str, str | int] | None,
        data: str | None,
        content_type: str,
    ) -> tuple[int, Any, str]:
        """(status, the decoded body, Retry-After) of one request."""
        session, headers = await self._session_for(identity)
        if data is not None:
            headers.append(("Content-Type", content_type))
        async with session.request(
            method,
            identity.server.rstrip("/") + path,
            params=params,
            data=data,
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=self.request_timeout),
        ) as resp:
            self._count(method, resp.status)
            text = await resp.text()
            retry_after = resp.headers.get("Retry-After", "")
        if resp.status < 400:
            return resp.status, json.loads(text) if text else None, retry_after
        try:
            return resp.status, json.loads(text), retry_after
        except ValueError:
            return resp.status, text, retry_after

    async def get(self, path: str, **params: str | int) -> Any:
        return await self.request("GET", path, params=params or None)

    async def get_or_none(self, path: str) -> Any:
        try:
            return await self.get(path)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    async def create(self, path: str, body: Mapping[str, Any]) -> Any:
        return await self.request("POST", path, body=body)

    async def merge_patch(self, path: str, body: Mapping[str, Any]) -> Any:
        return await self.request("PATCH", path, body=body, content_type=MERGE_PATCH)

    async def delete(self, path: str, **params: str | int) -> Any:
        try:
            return await self.request("DELETE", path, params=params or None)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    async def pages(
        self, path: str, label_selector: str = "", page_size: int = 500, field_selector: str = ""
    ) -> AsyncIterator[tuple[list[dict[str, Any]], str, bool]]:
        """A list one page at a time: (items, the list's resourceVersion, whether it is the last).

        Consumers keep what they need from each page and drop it, so listing 10,000 nodes or
        reports never holds them all at once. An expired continue token raises
        ResourceExpiredError: the caller starts again from the first page.
        """
        params: dict[str, str | int] = {"limit": page_size}
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        while True:
            try:
                page = await self.request("GET", path, params=params)
            except ApiError as exc:
                if exc.status == 410 and "continue" in params:
                    raise ResourceExpiredError(path) from exc
                raise
            token = page.get("metadata", {}).get("continue")
            version = page.get("metadata", {}).get("resourceVersion", "")
            yield page.get("items") or [], version, not token
            if not token:
                return
            params["continue"] = token

    async def list_pages(
        self, path: str, label_selector: str = "", page_size: int = 500, field_selector: str = ""
    ) -> tuple[list[dict[str, Any]], str]:
        """Every item of a list (fetched `page_size` at a time) and the list's resourceVersion."""
        while True:
            items: list[dict[str, Any]] = []
            version = ""
            try:
                async for page, page_version, _ in self.pages(
                    path, label_selector, page_size, field_selector
                ):
                    items.extend(page)
                    version = page_version
            except ResourceExpiredError:
                continue  # start the list again rather than return half of it
            return items, version

    async def watch(
        self, path: str, resource_version: str, label_selector: str = "", field_selector: str = ""
    ) -> AsyncIterator[dict[str, Any]]:
        """Watch events (ADDED/MODIFIED/DELETED/BOOKMARK) from `resource_version`; raises on 410.

        The server ends the watch after `watch_timeout` seconds and the client gives up after a
        little more, so a silently stalled connection is noticed and the caller resumes from its
        last resourceVersion.
        """
        params: dict[str, str | int] = {
            "watch": "true",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": self.watch_timeout,
        }
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        timeout = aiohttp.ClientTimeout(
            total=self.watch_timeout + 30, sock_connect=10, sock_read=self.watch_timeout + 15
        )
        identity = await self.login.current()
        session, headers = await self._session_for(identity)
        async with session.get(
            identity.server.rstrip("/") + path,
            params=params,
            headers=headers,
            timeout=timeout,
        ) as resp:
            self._count("WATCH", resp.status)
            if resp.status == 410:
                raise ResourceExpiredError(path)
            if resp.status == 401:
                await self.login.renew(identity)  # the caller resumes with the new identity
            if resp.status >= 400:
                raise ApiError(resp.status, "WATCH", path, await resp.text())
            async for line in resp.content:
                if not line.strip():
                    continue
                event = json.loads(line)
                if event.get("type") == "ERROR":
                    obj = event.get("object") or {}
                    if obj.get("code") == 410:
                        raise ResourceExpiredError(path)
                    raise ApiError(int(obj.get("code") or 500), "WATCH", path, obj)
                yield event


def q(text: str) -> str:
    """A path segment, quoted."""
    return quote(text, safe="")
