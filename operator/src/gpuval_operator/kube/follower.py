"""One list+watch per kind and validation, filtered on the server by label selector.

kopf would open a queue, a task and annotation writes per child object, and filter labels on the
client; at fleet scale that is every pod of the cluster parsed at ~1 ms each. Here the API server
sends only this validation's children; the list is paginated, the watch resumes from the last
resourceVersion (bookmarks keep it fresh) and a 410 Gone lists again. Each object is handed to a
callback and dropped: the caller keeps its facts.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from typing import Any

import aiohttp

from gpuval_operator.kube.client import ApiError, KubeClient, ResourceExpiredError

log = logging.getLogger(__name__)

# (items of one page, whether it is the first page, whether it is the last)
OnPage = Callable[[list[dict[str, Any]], bool, bool], None]
OnEvent = Callable[[str, dict[str, Any]], None]


class Follower:
    """Follows the objects at `path` matching `label_selector` (and `field_selector`).

    `on_page` gets every (re)list page by page, told which page is the first and which the last,
    so the caller can notice objects deleted while the watch was down without holding the whole
    list; `on_event` gets each ADDED/MODIFIED/DELETED event afterwards.
    """

    def __init__(
        self,
        client: KubeClient,
        path: str,
        label_selector: str,
        on_page: OnPage,
        on_event: OnEvent,
        *,
        name: str = "",
        field_selector: str = "",
    ) -> None:
        self.client = client
        self.path = path
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.on_page = on_page
        self.on_event = on_event
        self.name = name or path
        self.synced = asyncio.Event()
        self.resource_version = ""
        self.relists = 0
        # The API server refused the list itself (400: a selector it does not accept).
        self.refused: ApiError | None = None

    async def _relist(self) -> None:
        first = True
        async for items, version, last in self.client.pages(
            self.path, self.label_selector, field_selector=self.field_selector
        ):
            self.on_page(items, first, last)
            first = False
            self.resource_version = version
        self.relists += 1
        self.refused = None
        self.synced.set()

    async def run(self) -> None:
        backoff = 0.5
        need_list = True
        while True:
            try:
                if need_list:
                    await self._relist()
                    need_list = False
                async for event in self.client.watch(
                    self.path, self.resource_version, self.label_selector, self.field_selector
                ):
                    obj = event.get("object") or {}
                    rv = (obj.get("metadata") or {}).get("resourceVersion")
                    if rv:
                        self.resource_version = rv
                    kind = event.get("type", "")
                    if kind != "BOOKMARK":
                        self.on_event(kind, obj)
                backoff = 0.5
            except asyncio.CancelledError:
                raise
            except ResourceExpiredError:
                log.info("%s: resourceVersion expired; listing again", self.name)
                need_list = True
            except (ApiError, OSError, TimeoutError, ValueError, aiohttp.ClientError) as exc:
                if isinstance(exc, ApiError) and exc.status == 400:
                    self.refused = exc
                # An API server restart drops every watch at once: one line each, no traceback.
                log.warning(
                    "%s: watch ended (%s: %s); resuming in %.1fs",
                    self.name,
                    type(exc).__name__,
                    exc,
                    backoff,
                )
                await asyncio.sleep(backoff * (0.5 + random.random()))
                backoff = min(backoff * 2, 30.0)
            except Exception:
                # A bug in a callback must not end the watch silently: log it and keep following.
                log.exception("%s: unexpected error; listing again", self.name)
                need_list = True
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 30.0)
