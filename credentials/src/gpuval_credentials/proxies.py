"""Pure: the proxy an API server is reached through, chosen as kubectl chooses it. The kubeconfig
cluster's `proxy-url` wins; else the environment's HTTPS_PROXY (HTTP_PROXY for an http server,
the upper-case name first), unless NO_PROXY names the host (names, domain suffixes, addresses,
CIDRs, `*`: the kubernetes package's matching) or the host is localhost or a loopback address,
which Go's proxy rules never send through a proxy."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from urllib.parse import urlsplit

from kubernetes.client.rest import should_bypass_proxies

from gpuval_credentials.errors import CredentialsError

SCHEMES = ("http", "https")


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _first(environ: Mapping[str, str], *names: str) -> tuple[str, str] | None:
    return next(((name, environ[name]) for name in names if environ.get(name)), None)


def env_proxy(server: str, environ: Mapping[str, str]) -> tuple[str, str] | None:
    """(the variable, its proxy) that applies to `server`, or None."""
    parts = urlsplit(server)
    if parts.scheme == "https":
        found = _first(environ, "HTTPS_PROXY", "https_proxy")
    else:
        found = _first(environ, "HTTP_PROXY", "http_proxy")
    if found is None or _loopback(parts.hostname or ""):
        return None
    no_proxy = _first(environ, "NO_PROXY", "no_proxy")
    if no_proxy is not None and should_bypass_proxies(server, no_proxy[1]):
        return None
    return found


def choose_proxy(
    server: str, proxy_url: str | None, environ: Mapping[str, str], field: str
) -> str | None:
    """The proxy for `server`: `proxy_url` (the kubeconfig's, named `field` in errors), else the
    environment's. A value without a scheme is an http:// proxy, as in Go."""
    source = (field, proxy_url) if proxy_url else env_proxy(server, environ)
    if source is None:
        return None
    named, proxy = source
    if "://" not in proxy:
        proxy = f"http://{proxy}"
    scheme = urlsplit(proxy).scheme
    if scheme not in SCHEMES:
        raise CredentialsError(
            f"{named} is {proxy!r}: gpuval reaches the API server through http:// or https:// "
            f"proxies (HTTP CONNECT) only, not {scheme}://; name an HTTP proxy"
        )
    return proxy
