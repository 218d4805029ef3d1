"""An identity as aiohttp sessions: the operator's own client and kopf's login use these, so both
reach the API server the same way (trust, client certificate, proxy, impersonation)."""

from __future__ import annotations

import ssl

import aiohttp

from gpuval_credentials.errors import CredentialsError
from gpuval_credentials.identity import Identity


def check(identity: Identity) -> None:
    """What an aiohttp session cannot do for this identity, refused by name."""
    if identity.tls_server_name:
        raise CredentialsError(
            f"{identity.where}: the cluster's tls-server-name ({identity.tls_server_name}) is "
            "not supported by the operator (kopf's HTTP session cannot set the name it checks "
            "the certificate against); put a name the API server's certificate carries in "
            "server, or add it to the certificate"
        )


def ssl_context(identity: Identity) -> ssl.SSLContext:
    try:
        context = ssl.create_default_context(cafile=identity.ca_file)
        if identity.cert_file and identity.key_file:
            context.load_cert_chain(identity.cert_file, identity.key_file)
    except (OSError, ssl.SSLError, ValueError) as error:
        raise CredentialsError(f"{identity.where}: the certificates do not load: {error}") from None
    if not identity.verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def session(identity: Identity, *, headers: bool, limit: int = 100) -> aiohttp.ClientSession:
    """A session to the identity's server: its TLS trust and client certificate, its proxy (and
    no other: the environment was read when the identity was loaded) and, with `headers`, its
    Authorization and Impersonate-* headers on every request (kopf's session; the operator's
    own client adds them per request, as they change when the identity is loaded again)."""
    check(identity)
    connector = aiohttp.TCPConnector(ssl=ssl_context(identity), limit=limit)
    return aiohttp.ClientSession(
        connector=connector,
        headers=identity.headers() if headers else None,
        proxy=identity.proxy,
        trust_env=False,
    )
