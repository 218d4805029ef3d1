"""The operator's one identity (gpuval_operator.kube.credentials): loaded again when it is due
and once after a 401 however many callers saw it, and handed to kopf as a session with the same
headers that goes stale when the identity does."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta

import pytest

from gpuval_credentials import CredentialsError, Identity
from gpuval_credentials.identity import utc_now
from gpuval_operator.kube.credentials import Login, kopf_context

SERVER = "https://10.0.0.1:6443"


def issuer(lifetime: timedelta | None) -> tuple[list[Identity], Callable[[], Identity]]:
    issued: list[Identity] = []

    def load() -> Identity:
        now = utc_now()
        identity = Identity(
            server=SERVER,
            where="test",
            authorization=f"Bearer {len(issued)}",
            loaded=now,
            expires=now + lifetime if lifetime else None,
        )
        issued.append(identity)
        return identity

    return issued, load


def test_an_identity_is_loaded_again_only_once_it_is_due() -> None:
    issued, load = issuer(timedelta(hours=1))
    login = Login(load)

    async def twice() -> tuple[Identity, Identity]:
        return await login.current(), await login.current()

    first, second = asyncio.run(twice())
    assert first is second is issued[0] and login.loads == 1

    stale_issued, stale_load = issuer(timedelta(seconds=-1))
    stale = Login(stale_load, first=Identity(server=SERVER, where="t", expires=utc_now()))
    assert asyncio.run(stale.current()) is stale_issued[0] and stale.loads == 2


def test_a_due_credential_that_still_works_is_used_while_the_next_one_loads() -> None:
    """A token file due to be read again, or an exec token in the last fifth of its life:
    requests go on with it, the new identity is loaded beside them, once."""
    issued, load = issuer(timedelta(hours=1))
    due = Identity(
        server=SERVER, where="t", token_file="token", loaded=utc_now() - timedelta(hours=1)
    )
    login = Login(load, first=due)

    async def use() -> tuple[Identity, Identity, Identity]:
        first, second = await login.current(), await login.current()
        for _ in range(600):  # the load beside the requests (a worker thread) finishes
            if login.loads == 2:
                break
            await asyncio.sleep(0.05)
        return first, second, await login.current()

    first, second, third = asyncio.run(use())
    assert first is second is due
    assert third is issued[0] and login.loads == 2


def test_a_401_seen_by_many_callers_loads_the_identity_again_once() -> None:
    issued, load = issuer(None)
    login = Login(load)
    refused = login.identity

    async def many() -> list[Identity]:
        return list(await asyncio.gather(*(login.renew(refused) for _ in range(5))))

    renewed = asyncio.run(many())
    assert len(issued) == 2 and all(r is issued[1] for r in renewed)


def test_what_the_operators_sessions_cannot_do_is_refused_when_loaded() -> None:
    def load() -> Identity:
        return Identity(server=SERVER, where="kubeconfig x", tls_server_name="api.internal")

    with pytest.raises(CredentialsError, match="kubeconfig x: the cluster's tls-server-name"):
        Login(load)


def test_kopf_gets_a_session_with_the_identitys_headers_stale_when_the_identity_is() -> None:
    now = utc_now()
    identity = Identity(
        server=SERVER,
        where="test",
        authorization="Bearer t",
        impersonation=(
            ("Impersonate-User", "alice"),
            ("Impersonate-Group", "a"),
            ("Impersonate-Group", "b"),
        ),
        namespace="gpuval-system",
        loaded=now,
        expires=now + timedelta(minutes=10),
        verify=False,
    )

    async def context() -> None:
        given = kopf_context(identity)
        try:
            assert given.server == SERVER and given.default_namespace == "gpuval-system"
            assert given.expiration == now + timedelta(minutes=8)
            headers = given.aiohttp_session.headers
            assert headers["Authorization"] == "Bearer t"
            assert headers.getall("Impersonate-Group") == ["a", "b"]
        finally:
            await given.aiohttp_session.close()

    asyncio.run(context())
