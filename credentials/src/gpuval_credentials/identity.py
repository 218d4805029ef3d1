"""Pure: who a program is to the API server, as loaded, and when it must be loaded again. Nothing
here reads a file or runs a plugin (gpuval_credentials.load does)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

# A token read from a file is read again this often, as client-go does: a pod's projected
# ServiceAccount token is rotated by the kubelet, a kubeconfig's tokenFile by whoever writes it.
REREAD = timedelta(seconds=60)
# A credential that expires is loaded again this long before it does: a fifth of its life, at
# most five minutes (the kubernetes package's own margin), so requests never carry a dead token.
MAX_MARGIN = timedelta(minutes=5)


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True, kw_only=True)
class Identity:
    """One loaded identity: the server, how to trust it, who to be, and until when."""

    server: str
    where: str  # for messages: the kubeconfig (context, user) or the ServiceAccount's folder
    authorization: str | None = None  # the Authorization header's value
    ca_file: str | None = None  # None: the system's trust store
    cert_file: str | None = None
    key_file: str | None = None
    verify: bool = True
    tls_server_name: str | None = None
    proxy: str | None = None  # the proxy this server is reached through, if any
    impersonation: tuple[tuple[str, str], ...] = ()  # Impersonate-* headers, repeated as sent
    namespace: str | None = None  # the context's, or the ServiceAccount's
    expires: datetime | None = None  # an exec credential's expirationTimestamp
    token_file: str | None = None  # where the token was read from (read again every minute)
    loaded: datetime = field(default_factory=utc_now)

    def headers(self) -> list[tuple[str, str]]:
        """Every header this identity adds to a request, a name repeated for each value."""
        auth = [("Authorization", self.authorization)] if self.authorization else []
        return [*auth, *self.impersonation]

    def stale_at(self) -> datetime | None:
        """When the credential must be replaced so that no request carries it expired."""
        if self.expires is None:
            return None
        margin = min(MAX_MARGIN, max((self.expires - self.loaded) / 5, timedelta(0)))
        return self.expires - margin

    def refresh_at(self) -> datetime | None:
        """When to load again: before it goes stale, and a minute after reading a token file."""
        times = [self.stale_at(), self.loaded + REREAD if self.token_file else None]
        return min((t for t in times if t is not None), default=None)

    def due(self, now: datetime) -> bool:
        when = self.refresh_at()
        return when is not None and now >= when

    def transport(self) -> tuple[object, ...]:
        """What shapes a connection (server, trust, client certificate, proxy): sessions built
        for one identity serve another with the same transport."""
        return (
            self.server,
            self.ca_file,
            self.cert_file,
            self.key_file,
            self.verify,
            self.tls_server_name,
            self.proxy,
        )
