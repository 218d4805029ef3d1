"""An identity as the `kubernetes` package's synchronous ApiClient (kubectl gpuval's), with the
impersonation the package does not send and the same refresh rule as the operator: loaded again
when it is due (before an exec credential expires, a minute after reading a token file) and,
through `SyncLogin.login_again`, after a 401."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kubernetes.client import ApiClient, Configuration
from kubernetes.client.rest import RESTClientObject
from urllib3 import HTTPHeaderDict

from gpuval_credentials.identity import Identity, utc_now


def configuration(identity: Identity) -> Configuration:
    config = Configuration(host=identity.server)
    config.ssl_ca_cert = identity.ca_file
    config.cert_file = identity.cert_file
    config.key_file = identity.key_file
    config.verify_ssl = identity.verify
    config.tls_server_name = identity.tls_server_name
    config.proxy = identity.proxy  # chosen with the environment when loaded; no second choice
    if identity.authorization:
        config.api_key["BearerToken"] = identity.authorization
    return config


class _Impersonating(RESTClientObject):
    """The package's REST client, adding the Impersonate-* headers it does not know, a name
    repeated for each value (urllib3 sends every value of an HTTPHeaderDict)."""

    def __init__(self, config: Configuration, headers: tuple[tuple[str, str], ...]) -> None:
        super().__init__(config)
        self.impersonation = headers

    def request(
        self,
        method: Any,
        url: Any,
        headers: Any = None,
        body: Any = None,
        post_params: Any = None,
        _request_timeout: Any = None,
    ) -> Any:
        merged = HTTPHeaderDict(headers or {})
        for name, value in self.impersonation:
            merged.add(name, value)
        return super().request(  # type: ignore[no-untyped-call]
            method,
            url,
            headers=merged,
            body=body,
            post_params=post_params,
            _request_timeout=_request_timeout,
        )


class SyncLogin:
    """One identity and the package's ApiClient for it."""

    def __init__(self, load: Callable[[], Identity]) -> None:
        self._load = load
        self.identity = load()
        self.api = self._client()

    def __enter__(self) -> SyncLogin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.api.close()  # type: ignore[no-untyped-call]

    def _client(self) -> ApiClient:
        config = configuration(self.identity)
        config.refresh_api_key_hook = self._refresh  # type: ignore[assignment]  # typed None
        api = ApiClient(config)
        api.rest_client = _Impersonating(config, self.identity.impersonation)
        return api

    def _refresh(self, config: Configuration) -> None:
        """Called by the package before each request: a new token once the old one is due."""
        if self.identity.due(utc_now()):
            self.identity = self._load()
            if self.identity.authorization:
                config.api_key["BearerToken"] = self.identity.authorization

    def login_again(self) -> ApiClient:
        """After a 401: load the identity again (re-run its plugin, re-read its files) and
        return a client for it."""
        self.api.close()  # type: ignore[no-untyped-call]
        self.identity = self._load()
        self.api = self._client()
        return self.api
