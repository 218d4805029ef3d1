"""The operator's one identity, for kopf's login and its own client alike.

Loaded by gpuval_credentials (the `kubernetes` package's kubeconfig and in-cluster loaders, plus
impersonation, proxies and the refresh rule), in kubectl's order: $KUBECONFIG, else
~/.kube/config, else, in a pod, its ServiceAccount. `Login` holds the current identity and loads
it again, in a worker thread (an exec plugin may take seconds), when it is due (before an exec
credential's expirationTimestamp; a minute after reading a token file, which the kubelet
rotates) and after a 401 (`renew`). While the credential in hand still works (a due token file,
an exec token in its last fifth), requests go on with it and the new one is loaded beside them;
only an expired one makes requests wait for the plugin. kopf gets the same identity as a session
of its own (`kopf_context`), told when it goes stale, so kopf logs in again at about the same
moment (and takes the identity already loaded) and after its own 401s.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import kopf

from gpuval_credentials import CredentialsError, Identity, load
from gpuval_credentials.aio import check
from gpuval_credentials.aio import session as aio_session
from gpuval_credentials.identity import utc_now

__all__ = ["Credentials", "CredentialsError", "Login", "kopf_context", "load_credentials"]

log = logging.getLogger(__name__)
RETRY_SECONDS = 5.0  # after a failed load in the background, before the next attempt


class Login:
    """The current identity, loaded again when it is due or refused (401)."""

    def __init__(self, loader: Callable[[], Identity], first: Identity | None = None) -> None:
        self._loader = loader
        self._current = first if first is not None else self._checked()
        self._lock = asyncio.Lock()
        self._refreshing: asyncio.Task[None] | None = None
        self._retry_at = 0.0
        self.loads = 1  # how many times the identity was loaded (first load included)

    def _checked(self) -> Identity:
        identity = self._loader()
        check(identity)  # what the operator's sessions cannot do is refused at load
        return identity

    @property
    def identity(self) -> Identity:
        """The identity as last loaded (it may be due: `current` loads it again)."""
        return self._current

    async def current(self) -> Identity:
        identity, now = self._current, utc_now()
        if not identity.due(now):
            return identity
        if identity.expires is None or now < identity.expires:
            self._refresh_beside()
            return identity
        return await self._replace(identity)

    async def renew(self, refused: Identity) -> Identity:
        """After the API server refused `refused` (401): load again, unless another caller
        already replaced it."""
        return await self._replace(refused)

    async def _replace(self, old: Identity) -> Identity:
        async with self._lock:
            if self._current is old:
                self._current = await asyncio.to_thread(self._checked)
                self.loads += 1
            return self._current

    def _refresh_beside(self) -> None:
        busy = self._refreshing is not None and not self._refreshing.done()
        if not busy and time.monotonic() >= self._retry_at:
            self._refreshing = asyncio.create_task(self._refresh(self._current))

    async def _refresh(self, old: Identity) -> None:
        try:
            await self._replace(old)
        except CredentialsError as error:
            self._retry_at = time.monotonic() + RETRY_SECONDS
            log.warning(
                "credentials: loading them again failed (the current ones still work): %s", error
            )


Credentials = Login  # what KubeClient takes


def load_credentials(kubeconfig: str | None = None) -> Login:
    """The operator's Login: `kubeconfig`, else kubectl's order (gpuval_credentials.load).
    Loaded now, so a missing or refused identity is named at start-up."""
    return Login(lambda: load(kubeconfig))


def kopf_context(identity: Identity) -> kopf.AiohttpSession:
    """The identity as kopf's login result: a session with its trust, client certificate,
    proxy and headers, stale (kopf logs in again) when the identity's credential goes stale."""
    return kopf.AiohttpSession(
        aiohttp_session=aio_session(identity, headers=True),
        server=identity.server,
        default_namespace=identity.namespace,
        expiration=identity.stale_at(),
    )
