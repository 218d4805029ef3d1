"""The operator's HTTP client against a local HTTP server: retries, pagination, watch resumption.

A plain aiohttp server stands in for the API server's HTTP behaviour (status codes, continue
tokens, watch streams); what the operator does with real objects is proven on the real control
plane in tests/integration.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from gpuval_credentials import Identity
from gpuval_operator.kube.client import ApiError, KubeClient
from gpuval_operator.kube.credentials import Login
from gpuval_operator.kube.follower import Follower


async def serve(
    app: web.Application, tokens: list[str] | None = None
) -> tuple[TestServer, KubeClient]:
    """A server and a client for it whose identity is loaded again from `tokens`, one token per
    load."""
    server = TestServer(app)
    await server.start_server()
    url = str(server.make_url("")).rstrip("/")
    issued = iter(tokens or ["t"])

    def identity() -> Identity:
        return Identity(server=url, where="the test", authorization=f"Bearer {next(issued)}")

    client = KubeClient(Login(identity), max_retries=3)
    return server, client


@pytest.fixture
def calls() -> list[str]:
    return []


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_429_and_503_are_retried_honouring_retry_after_and_404_is_not(calls: list[str]) -> None:
    async def flaky(request: web.Request) -> web.Response:
        calls.append(request.path)
        if len(calls) == 1:
            return web.json_response(
                {"message": "slow down"}, status=429, headers={"Retry-After": "0"}
            )
        if len(calls) == 2:
            return web.json_response({"message": "etcd leader change"}, status=503)
        return web.json_response({"ok": True})

    async def missing(request: web.Request) -> web.Response:
        calls.append(request.path)
        return web.json_response({"message": "not found", "reason": "NotFound"}, status=404)

    async def main() -> None:
        app = web.Application()
        app.router.add_post("/flaky", flaky)
        app.router.add_get("/missing", missing)
        server, client = await serve(app)
        try:
            assert await client.create("/flaky", {"a": 1}) == {"ok": True}
            with pytest.raises(ApiError) as err:
                await client.get("/missing")
            assert err.value.status == 404 and err.value.reason == "NotFound"
            assert await client.get_or_none("/missing") is None
        finally:
            await client.close()
            await server.close()

    run(main())
    assert calls == ["/flaky"] * 3 + ["/missing"] * 2


def test_a_401_loads_the_credentials_again_and_repeats_the_request_once(
    calls: list[str],
) -> None:
    async def guarded(request: web.Request) -> web.Response:
        calls.append(request.headers["Authorization"])
        if request.headers["Authorization"] != "Bearer rotated":
            return web.json_response({"message": "Unauthorized"}, status=401)
        return web.json_response({"ok": True})

    async def main() -> None:
        app = web.Application()
        app.router.add_get("/guarded", guarded)
        server, client = await serve(app, ["expired", "rotated", "unused"])
        try:
            assert await client.get("/guarded") == {"ok": True}
            assert client.login.loads == 2
            assert client.requests_total[("GET", 401)] == 1
        finally:
            await client.close()
            await server.close()

    run(main())
    assert calls == ["Bearer expired", "Bearer rotated"]


def test_a_401_after_logging_in_again_is_the_callers(calls: list[str]) -> None:
    async def refused(request: web.Request) -> web.Response:
        calls.append(request.headers["Authorization"])
        return web.json_response({"message": "Unauthorized"}, status=401)

    async def main() -> None:
        app = web.Application()
        app.router.add_get("/refused", refused)
        server, client = await serve(app, ["a", "b", "c"])
        try:
            with pytest.raises(ApiError) as err:
                await client.get("/refused")
            assert err.value.status == 401
        finally:
            await client.close()
            await server.close()

    run(main())
    assert calls == ["Bearer a", "Bearer b"]


def test_lists_follow_continue_tokens_and_restart_when_the_token_expires(calls: list[str]) -> None:
    async def pods(request: web.Request) -> web.Response:
        token = request.query.get("continue", "")
        calls.append(token)
        assert request.query["labelSelector"] == "a=b" and request.query["limit"] == "2"
        if token == "expired":
            return web.json_response({"message": "too old"}, status=410)
        pages = {
            "": ([1, 2], "expired" if calls.count("") == 1 else "p2"),
            "p2": ([3], ""),
        }
        items, nxt = pages[token]
        meta = {"resourceVersion": "77", "continue": nxt}
        return web.json_response({"items": [{"n": i} for i in items], "metadata": meta})

    async def main() -> tuple[list[dict[str, Any]], str]:
        app = web.Application()
        app.router.add_get("/pods", pods)
        server, client = await serve(app)
        try:
            return await client.list_pages("/pods", "a=b", page_size=2)
        finally:
            await client.close()
            await server.close()

    items, version = run(main())
    assert [i["n"] for i in items] == [1, 2, 3] and version == "77"
    assert calls == ["", "expired", "", "p2"]


def test_a_follower_resumes_from_the_last_version_and_relists_on_410() -> None:
    watches: list[str] = []
    lists = 0

    async def pods(request: web.Request) -> web.StreamResponse:
        nonlocal lists
        if request.query.get("watch") != "true":
            lists += 1
            body = {
                "items": [{"metadata": {"name": f"list{lists}"}}],
                "metadata": {"resourceVersion": f"{lists}0"},
            }
            return web.json_response(body)
        watches.append(request.query["resourceVersion"])
        resp = web.StreamResponse()
        await resp.prepare(request)
        if len(watches) == 1:
            for kind, rv in (("ADDED", "11"), ("BOOKMARK", "12")):
                event = {"type": kind, "object": {"metadata": {"name": "w", "resourceVersion": rv}}}
                await resp.write(json.dumps(event).encode() + b"\n")
        elif len(watches) == 2:
            gone = {
                "type": "ERROR",
                "object": {"kind": "Status", "code": 410, "message": "too old"},
            }
            await resp.write(json.dumps(gone).encode() + b"\n")
        else:
            await asyncio.sleep(30)
        return resp

    seen: list[tuple[str, str]] = []

    async def main() -> None:
        app = web.Application()
        app.router.add_get("/pods", pods)
        server, client = await serve(app)
        follower = Follower(
            client,
            "/pods",
            "",
            lambda items, first, last: seen.extend(("LIST", i["metadata"]["name"]) for i in items),
            lambda kind, obj: seen.append((kind, obj["metadata"]["name"])),
        )
        task = asyncio.create_task(follower.run())
        try:
            for _ in range(200):
                if len(watches) >= 3:
                    break
                await asyncio.sleep(0.02)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await client.close()
            await server.close()

    run(main())
    # List at 10, watch from 10; the bookmark moves it to 12 without an event; the next watch
    # resumes at 12, gets 410, lists again (20) and watches from there.
    assert watches == ["10", "12", "20"]
    assert seen == [("LIST", "list1"), ("ADDED", "w"), ("LIST", "list2")]


def test_a_watch_dropped_by_a_restarting_api_server_is_one_warning_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An API server restart ends every watch mid-stream; the follower logs one line per watch
    and resumes, never an ERROR with a traceback (issue 9)."""
    watches: list[str] = []

    async def pods(request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") != "true":
            return web.json_response({"metadata": {"resourceVersion": "10"}, "items": []})
        watches.append(request.query["resourceVersion"])
        if len(watches) == 1:
            # Headers and half a line, then the connection is cut: the server went away.
            resp = web.StreamResponse()
            await resp.prepare(request)
            await resp.write(b'{"type": "ADDED", "obj')
            assert request.transport is not None
            request.transport.close()
            return resp
        await asyncio.sleep(30)
        return web.Response()

    async def main() -> None:
        app = web.Application()
        app.router.add_get("/pods", pods)
        server, client = await serve(app)
        follower = Follower(client, "/pods", "", lambda *a: None, lambda *a: None, name="v/pods")
        task = asyncio.create_task(follower.run())
        try:
            for _ in range(300):
                if len(watches) >= 2:
                    break
                await asyncio.sleep(0.02)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await client.close()
            await server.close()

    with caplog.at_level("WARNING", logger="gpuval_operator.kube.follower"):
        run(main())
    assert watches == ["10", "10"], "the follower resumed from its resourceVersion"
    records = [r for r in caplog.records if r.name == "gpuval_operator.kube.follower"]
    assert len(records) == 1 and records[0].levelname == "WARNING"
    assert records[0].exc_info is None and "v/pods: watch ended" in records[0].getMessage()
